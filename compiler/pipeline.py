"""Torq pass registry and the dispatch pipeline, assembled in one place.

`DISPATCH_PIPELINE` is what the Torq target runs on every accepted dispatch.
`run_pipeline_text` runs a textual pipeline such as
`builtin.module(torq-super-tiling,canonicalize)` for torq-opt, sending runs
of non-Torq passes to MLIR's PassManager unchanged.
"""

from __future__ import annotations

from types import ModuleType

from iree.compiler import ir

from .ir_utils import CompileError
from .pass_managers import reuse, run_pipeline
from .passes import (
    PassOptions,
    assign_lram_addresses,
    build_nss_program,
    check_npu_support,
    convert_dtypes,
    decompose_attention,
    fold_index_constants,
    fold_padding,
    fold_unit_dims,
    fuse_dequantize,
    lower_requantization,
    lower_to_torq_hl,
    mark_in_place_updates,
    mark_patterns_for_super_tiling,
    serialize_executable,
    split_box_reads,
    split_elementwise_results,
    split_fused_gathers,
    super_tiling,
    unroll_index_dims,
)
from .patterns import Unsupported

PASSES: dict[str, ModuleType] = {m.NAME: m for m in (
    decompose_attention, fuse_dequantize, lower_requantization, mark_in_place_updates, split_elementwise_results,
    fold_index_constants, split_fused_gathers, unroll_index_dims, fold_unit_dims, split_box_reads, check_npu_support,
    convert_dtypes,
    fold_padding, mark_patterns_for_super_tiling, super_tiling, lower_to_torq_hl, assign_lram_addresses,
    build_nss_program, serialize_executable)}

# Normalisation first: named linalg ops become generics the matchers read;
# linalg.softmax becomes its reduce / elementwise chain (max, exp(x - max),
# sum, divide), whose loops tiling can cut anywhere without cutting a row.
PRE_PASSES = ("func.func(iree-codegen-decompose-softmax{use-fusion=false}),"
              "linalg-generalize-named-ops,canonicalize,cse")

# Attention first (PRE_PASSES decompose the softmax it makes); requantization after
# the pre-passes (it reads generics), once the dequantizes it reads are in its body;
# the support check once the function is final in what it computes, before any pass
# that assumes the NPU can run it.
DISPATCH_PIPELINE = [decompose_attention.NAME, PRE_PASSES, fuse_dequantize.NAME, lower_requantization.NAME,
                     mark_in_place_updates.NAME, split_elementwise_results.NAME, fold_index_constants.NAME,
                     split_fused_gathers.NAME,
                     unroll_index_dims.NAME, fold_unit_dims.NAME, split_box_reads.NAME,
                     check_npu_support.NAME, convert_dtypes.NAME,
                     fold_padding.NAME,
                     mark_patterns_for_super_tiling.NAME, super_tiling.NAME, lower_to_torq_hl.NAME,
                     assign_lram_addresses.NAME, build_nss_program.NAME, serialize_executable.NAME]

# `--compile-to=<phase>` stops the dispatch pipeline after this pass and prints
# the NPU dispatches: "torq-hl" is the TorqHL form with LRAM addresses, "nss"
# the NSS program before serialization.
TORQ_PHASES = {"torq-hl": assign_lram_addresses.NAME, "nss": build_nss_program.NAME}


def dispatch_pipeline(stop_after_phase: str = "") -> list[str]:
    """The dispatch pipeline, cut after the last pass of a Torq phase if given."""
    if not stop_after_phase:
        return list(DISPATCH_PIPELINE)
    return DISPATCH_PIPELINE[:DISPATCH_PIPELINE.index(TORQ_PHASES[stop_after_phase]) + 1]


def _split_top_level(s: str) -> list[str]:
    out, depth, cur = [], 0, ""
    for ch in s:
        if ch in "({[":
            depth += 1
        elif ch in ")}]":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


def parse_pipeline(text: str) -> list[str]:
    text = text.strip()
    if text.startswith("builtin.module(") and text.endswith(")"):
        text = text[len("builtin.module("):-1]
    return _split_top_level(text)


def run_passes(module: ir.Module, names: list[str], options: PassOptions,
               print_after_all=None) -> dict[str, object]:
    """Runs the passes `names` on `module`; returns what Torq passes reported, by pass name
    (a pass's `run` returns None or its report, e.g. torq-super-tiling's tiling records).
    Pass pipelines the passes run again and again (super tiling's cleanups) are parsed
    once for the whole run (`pass_managers.reuse`)."""
    with reuse():
        return _run_passes(module, names, options, print_after_all)


def _run_passes(module: ir.Module, names: list[str], options: PassOptions, print_after_all) -> dict[str, object]:
    pending: list[str] = []
    reports: dict[str, object] = {}

    def flush():
        if pending:
            try:
                run_pipeline(f"builtin.module({','.join(pending)})", module.operation)
            except ir.MLIRError as e:
                raise CompileError(f"error: pass pipeline '{','.join(pending)}' failed: {e}") from None
            except ValueError as e:
                raise CompileError(f"error: bad pass pipeline '{','.join(pending)}': {e}") from None
            if print_after_all:
                print_after_all(",".join(pending), module)
            pending.clear()

    for name in names:
        if name in PASSES:
            flush()
            try:
                report = PASSES[name].run(module, options)
            except Unsupported as e:
                e.pass_name = name  # torq-opt names it; the target only needs the reason
                raise
            if report is not None:
                reports[name] = report
            if print_after_all:
                print_after_all(name, module)
        else:
            pending.append(name)
    flush()
    return reports


def run_pipeline_text(module: ir.Module, text: str, options: PassOptions) -> None:
    """Runs a textual pipeline (torq-opt); a function the NPU cannot run is a compile error
    naming the pass and why (in a compile, the target leaves that dispatch on the host)."""
    try:
        run_passes(module, parse_pipeline(text), options)
    except Unsupported as e:
        raise CompileError(f"error: {getattr(e, 'pass_name', 'pipeline')}: no NPU form: {e}") from None
