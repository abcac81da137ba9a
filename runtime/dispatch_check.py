"""How far an NPU dispatch's result is from its host copy's (--torq-check-dispatches).

compiler/dispatch_check.py keeps a host copy of every NPU dispatch (IREE
llvm-cpu, the same inputs) and routes each NPU result through `torq.check`
with the copy's result. `compare` measures the pair: for an integer result
(an int8 layer's levels) the elements that differ and the largest difference
in output steps (one level is one step); for a float result (a bf16 layer
against llvm-cpu's f32, or a dequantized int8 output) the elements that
differ, the largest absolute difference and the relative L2 error.
"""

from __future__ import annotations

import numpy as np


def compare(name: str, index: int, npu: np.ndarray, host: np.ndarray) -> dict:
    """The record of result `index` of dispatch `name`: NPU value vs host copy's."""
    if npu.shape != host.shape:
        raise ValueError(f"dispatch '{name}' result {index}: NPU shape {npu.shape} but host copy {host.shape}")
    integer = np.issubdtype(npu.dtype, np.integer) or npu.dtype == np.bool_
    a = npu.astype(np.int64 if integer else np.float64)
    b = host.astype(np.int64 if integer else np.float64)
    d = a - b
    differing = int(np.count_nonzero(d))
    record = {"name": name, "result": index, "dtype": str(npu.dtype), "elements": int(d.size),
              "differing": differing, "differing_share": differing / d.size if d.size else 0.0,
              "max_steps": int(np.abs(d).max(initial=0)) if integer else None,
              "max_abs": float(np.abs(d).max(initial=0)), "rel_l2": _rel_l2(d, b)}
    return record


def _rel_l2(d: np.ndarray, ref: np.ndarray) -> float:
    ref_norm = float(np.linalg.norm(ref.astype(np.float64)))
    diff_norm = float(np.linalg.norm(d.astype(np.float64)))
    if ref_norm == 0.0:
        return 0.0 if diff_norm == 0.0 else float("inf")
    return diff_norm / ref_norm


def summary_line(records: list[dict]) -> str:
    """One line over all checked results: how many differ, the worst integer step, the worst float error."""
    if not records:
        return "no NPU result checked (compile with --torq-check-dispatches)"
    ints = [r for r in records if r["max_steps"] is not None]
    floats = [r for r in records if r["max_steps"] is None]
    parts = [f"{len(records)} NPU results checked against their host copies (IREE llvm-cpu, same inputs)"]
    if ints:
        differing = sum(r["differing"] for r in ints)
        elements = sum(r["elements"] for r in ints)
        parts.append(f"integer: {differing:,} of {elements:,} elements differ "
                     f"({100 * differing / max(1, elements):.3f}%), at most {max(r['max_steps'] for r in ints)} step(s)")
    if floats:
        parts.append(f"float: largest relative L2 {max(r['rel_l2'] for r in floats):.2e}")
    return "; ".join(parts)
