"""The int8 rows of the benchmark suite (run.py): models quantized as users quantize them.

Per model (samples/models.py, random weights): `torch.onnx.export`, then
onnxruntime `quantize_static` (QDQ, per-channel int8 weights, int8
activations; samples/ort_int8.py), then `torq.compile` of the quantized ONNX
file, IREE llvm-cpu on the same imported MLIR and onnxruntime on the file.
Reported beside the bf16 row of the same architecture in the same run:
simulated cycles and their int8 / bf16 ratio (the slices do 256 int8 MACs per
cycle and 64 bf16 ones), the share of MACs on the NPU, the host dispatches,
and the error of the dequantized output vs llvm-cpu and vs onnxruntime
(relative L2, and how many outputs are 0, 1, 2+ output steps from
llvm-cpu's), with the requantizations that are not exact.
"""

from __future__ import annotations

import io
import tempfile
import time

INT8_SUFFIX = "_int8"
# A variant row: the same model quantized by `quantize_static`, or by `quantize_dynamic` (its
# activations quantized when it runs, its output f32), compiled with Torq flags
# (name suffix -> flags, label, dynamic).
FLAG_VARIANTS = {
    "_bf16_float_ops": (["--torq-int8-float-ops=bf16"], "softmax, LayerNorm in bf16 on the NPU", False),
    "_dynamic": ([], "onnxruntime quantize_dynamic: activations quantized at run time, float ops in bf16", True),
    "_dynamic_keep_f32": (["--torq-keep-f32"], "onnxruntime quantize_dynamic, float ops on the host in f32", True),
}


def _split_name(name: str) -> tuple[str, str]:
    """(the bf16 model's name, the variant suffix or "") of an int8 row's name."""
    for suffix in FLAG_VARIANTS:
        if name.endswith(INT8_SUFFIX + suffix):
            return name[: -len(INT8_SUFFIX + suffix)], suffix
    return (name[: -len(INT8_SUFFIX)], "") if name.endswith(INT8_SUFFIX) else (name, "")


def is_int8(name: str) -> bool:
    return _split_name(name) != (name, "")


def measure_int8(spec: dict, build_model, simulated_figures, llvm_cpu_function) -> dict:
    """One int8 row: quantize, both compiles, both references, the simulated figures
    (`build_model`, `simulated_figures` and `llvm_cpu_function` are run.py's)."""
    from pathlib import Path

    import numpy as np
    from common import compile_cold_and_warm
    from ort_int8 import (
        int8_error_figures,
        one_input_step_moved,
        onnxruntime_output,
        quantize_dynamic_with_ort,
        quantize_with_ort,
    )

    import torq
    from torq.compiler.onnx_import import import_onnx

    base, variant = _split_name(spec["model"])
    flags, what, dynamic = FLAG_VARIANTS.get(variant, ([], "", False))
    model, x, label = build_model(base, spec["kwargs"])
    row: dict = {"label": f"int8 {label}" + (f" ({what}{': ' + ' '.join(flags) if flags else ''})" if what else ""),
                 "model": base, "int8": True}
    xs = x.numpy()
    with tempfile.TemporaryDirectory(prefix="torq-int8-") as tmp:
        t0 = time.perf_counter()
        path = (quantize_dynamic_with_ort if dynamic else quantize_with_ort)(model, x, tmp)
        row["quantize_s"] = time.perf_counter() - t0
        row["iree_compile_s"], cpu_fn = llvm_cpu_function(import_onnx(Path(path).read_bytes(), Path(path).name),
                                                          function="main_graph")
        cpu = np.asarray(cpu_fn(xs))
        # A dynamic model's input has no fixed quantization step to move it by.
        moved = None if dynamic else np.asarray(cpu_fn(one_input_step_moved(Path(path), xs)))
        onnxrt = onnxruntime_output(path, xs)
        cache = Path(tmp) / "cache"
        try:
            cm, row["torq_compile_s"], row["warm_compile_s"] = compile_cold_and_warm(str(path), spec["hw"],
                                                                                     io.StringIO(), flags, str(cache))
            # The same model with each NPU dispatch checked against its llvm-cpu copy (its NPU
            # dispatches from the cache): the per-layer figures.
            checked = torq.compile(str(path), hw=spec["hw"], remarks=io.StringIO(),
                                   flags=[f"--torq-cache-dir={cache}", "--torq-check-dispatches", *flags])
        except torq.TorqCompileError as e:
            return {**row, "error": f"torq compile: {' '.join(str(e).split())[:300]}"}
    checked(xs)
    row["layer_checks"] = checked.last_checks
    cm(xs)  # warm-up
    t0 = time.perf_counter()
    y = np.asarray(cm(xs))
    row["sim_run_s"] = time.perf_counter() - t0
    row.update(simulated_figures(cm))
    row.update(int8_error_figures(y, cpu, onnxrt, steps=not dynamic))  # a dynamic model's output is f32
    if not dynamic:
        floor = int8_error_figures(moved, cpu, onnxrt)
        row["one_step_rel_l2"], row["one_step_histogram"] = floor["rel_l2_cpu"], floor["step_histogram"]
    return row | _requantization_figures(cm.report.dispatches)


def _requantization_figures(dispatches) -> dict:
    """The NPU dispatches' requantizations: channels (reproduced exactly), activation tables,
    residual adds, and a level one off carried through a steeper step."""
    from common import composition

    summaries = [s for d in dispatches if d.executor == "torq" for s in d.requant]
    return {"requant_channels": sum(s["channels"] for s in summaries),
            "requant_exact_channels": sum(s["exact_channels"] for s in summaries),
            "tables": sum(bool(s.get("table_entries")) for s in summaries),
            "residual_adds": sum(bool(s.get("sum_pairs")) for s in summaries),
            "composition": composition(dispatches)}


COLUMNS = ["model", "torq-compile s", "iree-compile llvm-cpu s", "ratio", "warm recompile s", "simulated cycles",
           "int8 / bf16 cycles", "efficiency vs roofline", "DDR traffic ratio", "NPU share of MACs",
           "dispatches torq/host", "rel L2 vs llvm-cpu", "rel L2 vs onnxruntime", "llvm-cpu vs onnxruntime",
           "outputs 0 / 1 / 2+ steps off", "per layer vs llvm-cpu, same inputs", "llvm-cpu, one input step moved", "exact rescale channels", "wall s"]


def _row(r: dict, bf16: dict | None) -> list[str]:
    if "cycles" not in r:
        return [r.get("label", "?"), f"**failed**: {' '.join(str(r.get('error')).split())[:160]}"] + \
            [""] * (len(COLUMNS) - 2)
    hist = r["step_histogram"] + [0, 0] if "step_histogram" in r else None
    steps = f"{hist[0]} / {hist[1]} / {sum(hist[2:])}" if hist else "- (f32 output)"
    ratio = f"{r['cycles'] / bf16['cycles']:.3f}" if bf16 and bf16.get("cycles") else "-"
    ch = r["requant_channels"]
    return [r["label"], f"{r['torq_compile_s']:.1f}", f"{r['iree_compile_s']:.1f}",
            f"{r['torq_compile_s'] / r['iree_compile_s']:.1f}×", f"{r['warm_compile_s']:.1f}", f"{r['cycles']:,}", ratio,
            f"{100 * r['efficiency']:.1f}%" if r["efficiency"] else "-",
            f"{r['traffic_ratio']:.3f}" if r["traffic_ratio"] else "-", f"{100 * r['mac_share']:.2f}%",
            f"{r['torq_dispatches']}/{r['host_dispatches']}", f"{r['rel_l2_cpu']:.2e}", f"{r['rel_l2_ort']:.2e}",
            f"{r['cpu_vs_ort']:.2e}", steps, _per_layer(r), _one_step(r),
            f"{r['requant_exact_channels']:,} of {ch:,}" if ch else "-", f"{r.get('wall_s', 0):.0f}"]


def _cpu_int8_isa() -> str:
    """The x86 int8 dot-product extensions this machine has (onnxruntime picks its kernels by them)."""
    try:
        flags = set(next(ln for ln in open("/proc/cpuinfo") if ln.startswith("flags")).split())
    except (OSError, StopIteration):
        return "unknown"
    have = [name for flag, name in (("avx512_vnni", "AVX-512 VNNI"), ("avx_vnni", "AVX-VNNI")) if flag in flags]
    return ", ".join(have) if have else ("AVX2, no VNNI" if "avx2" in flags else "no AVX2")


def _per_layer(r: dict) -> str:
    """The NPU results vs their llvm-cpu copies on the same inputs (--torq-check-dispatches)."""
    checks = r.get("layer_checks")
    if not checks:
        return "-"
    ints = [c for c in checks if c["max_steps"] is not None]
    floats = [c for c in checks if c["max_steps"] is None]
    parts = []
    if ints:
        off, n = sum(c["differing"] for c in ints), sum(c["elements"] for c in ints)
        parts.append(f"{len(ints)} int8: {off:,} of {n:,} off ({100 * off / n:.3f}%), "
                     f"≤ {max(c['max_steps'] for c in ints)} step")
    if floats:
        parts.append(f"{len(floats)} f32: rel L2 ≤ {max(c['rel_l2'] for c in floats):.1e}")
    return "; ".join(parts)


def _one_step(r: dict) -> str:
    """llvm-cpu's own output moved by one input element moved one quantization step."""
    if "one_step_rel_l2" not in r:
        return "-"
    hist = r["one_step_histogram"] + [0, 0]
    return f"{r['one_step_rel_l2']:.2e} ({hist[1] + sum(hist[2:])} outputs off)"


def markdown(rows: list[dict]) -> list[str]:
    """The int8 table (empty when the run had no int8 rows)."""
    from common import composition_text

    int8 = [r for r in rows if r.get("int8")]
    if not int8:
        return []
    bf16 = {r.get("model"): r for r in rows if not r.get("int8")}
    lines = ["## int8 (onnxruntime QDQ, and quantize_dynamic)", "",
             "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(_row(r, bf16.get(r.get("model")))) + " |" for r in int8]
    lines += ["", "Each model is the bf16 row's architecture and weights, exported with `torch.onnx.export` and "
              "quantized by onnxruntime `quantize_static` (QDQ, per-channel int8 weights, int8 activations, 4 "
              "random calibration inputs; samples/ort_int8.py). torq-compile and iree-compile (llvm-cpu) read the "
              "same quantized ONNX file (torq-compile cold and warm as in the bf16 table). int8 / bf16 cycles = this row's simulated cycles / the bf16 row's of the "
              "same model in this run. Errors: the dequantized output vs IREE llvm-cpu and onnxruntime on the same "
              "model (relative L2; DESIGN §7 asks ≤ 1e-2), and the outputs 0, 1, 2+ output steps from llvm-cpu's; "
              "a requantization whose f32 chain no integer rescale reproduces on every accumulator value takes the "
              "nearest (one step off on the values the compile report counts): exact rescale channels = channels "
              "reproduced exactly / all requantized channels on the NPU. Per layer: the model compiled again with "
              "--torq-check-dispatches, each NPU dispatch's result against its own llvm-cpu copy fed the same "
              "inputs (int8 results: elements off and the most output steps; a dequantized f32 result: relative "
              "L2), so a layer's figure does not carry the layers before it. llvm-cpu, one input step moved: llvm-cpu's "
              "own output when one input element (seeded choice) moves by the input's quantization step, vs its "
              "output on the unmoved input: the model's sensitivity, the error any int8 implementation that rounds "
              "a single value differently from llvm-cpu starts from. A quantize_dynamic row's model quantizes each "
              "MatMul's input when it runs (DynamicQuantizeLinear: its scale and zero point from the tensor's min "
              "and max) and keeps everything else f32, so its output is f32 (no output steps): the int8 matmuls run "
              "on the NPU, the scales on the host (compiler/onnx_dynamic_quant.py, "
              "compiler/quantization_parameters.py). onnxruntime's int8 kernels depend on the CPU: "
              "without AVX-512 VNNI / AVX-VNNI (this machine: " + _cpu_int8_isa() + ") its u8 x s8 products go "
              "through 16-bit saturating adds (onnxruntime documents reduce_range for such CPUs), which moves its "
              "output away from llvm-cpu's and ours alike.", ""]
    for r in int8:
        if "cycles" in r:
            lines.append(f"- {r['label']}: {r['tables']} activation tables, {r['residual_adds']} residual adds; "
                         f"a rescale's level one off carried through a steeper step (compiler/requant_compose.py): "
                         f"{composition_text(r['composition'])}; quantization {r['quantize_s']:.1f} s.")
            for reason, n in sorted(r["host_reasons"].items(), key=lambda kv: -kv[1]):
                lines.append(f"  - {n} host dispatch{'es' if n > 1 else ''}: {' '.join(reason.split())[:200]}")
    return lines + [""]
