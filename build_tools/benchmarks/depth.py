#!/usr/bin/env python3
"""Compile time vs depth (issue 15): BERT-base encoders of 1, 2 and 12 layers compiled
for Torq and by iree-compile (llvm-cpu), weights inline and in a parameter archive.

    nice -n 10 .venv/bin/python build_tools/benchmarks/depth.py   # -> RESULTS-depth.md

Per (layers, weights), in its own child process: the export (iree-turbine; the
external one with `aot.externalize_module_parameters`, as samples/llm.py), a cold
`torq.compile` (an empty cache directory; one worker per core, the default) and
the seconds of it spent in the Torq target (`TargetReport.seconds`: extraction,
dispatch compiles, calls; the rest is IREE's front and back end, which scale with
the weights IREE handles), then `iree-compile` llvm-cpu on the same MLIR. The
layers of a model are the same dispatch functions (their weights reach them as
arguments, inline or external alike), so each distinct dispatch compiles once
(the dispatch cache; "NPU dispatches compiled"); with --torq-no-cache, or where
layers differ in what is compiled into their dispatches (an int8 model's
rescales), super tiling still searches one layer's tilings for all
(tiling/search.py keeps its choices by structure). What grows with depth is
IREE's own work on the weights (parsing, constant handling, the .vmfb), which
iree-compile does too. (With external weights IREE hoisted each layer's weight
transposes into load-time initializers until compiler/torch_linear.py made the
Linears read their weights as stored.)
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import llvm_cpu_compile, machine_info, one_line, run_worker, worker_main, write_results  # noqa: E402

LAYERS = (1, 2, 12)
# The target: a 12-layer encoder compiles in at most this many times one layer's time.
DEPTH_TARGET = 1.5


def measure(spec: dict) -> dict:
    """One row (in the worker process): spec {"layers", "weights": "inline" | "external"}."""
    import iree.turbine.aot as aot
    from models import make_bert_encoder_layer

    import torq

    model, x = make_bert_encoder_layer(layers=spec["layers"])
    with tempfile.TemporaryDirectory(prefix="torq-depth-") as tmp:
        if spec["weights"] == "external":
            aot.externalize_module_parameters(model)
            aot.save_module_parameters(os.path.join(tmp, "weights.irpa"), model)
        mlir = str(aot.export(model, args=(x,)).mlir_module)
        t0 = time.perf_counter()
        cm = torq.compile(mlir, remarks=io.StringIO(), flags=(f"--torq-cache-dir={os.path.join(tmp, 'cache')}",))
        torq_s = time.perf_counter() - t0
    iree_s, _ = llvm_cpu_compile(mlir)
    decisions = cm.report.dispatches
    return {"torq_s": torq_s, "target_s": cm.report.seconds, "iree_s": iree_s,
            "torq": sum(d.executor == "torq" for d in decisions), "host": sum(d.executor != "torq" for d in decisions),
            "compiled": sum(d.executor == "torq" and not d.cached for d in decisions)}


def markdown(rows: list[dict]) -> list[str]:
    lines = ["| layers | weights | torq-compile s | of it, Torq target s | iree-compile llvm-cpu s | ratio | "
             "NPU / host dispatches | NPU dispatches compiled |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['layers']} | {r['weights']} | **failed**: {one_line(r['error'], 200)} | | | | | |")
            continue
        lines.append(f"| {r['layers']} | {r['weights']} | {r['torq_s']:.1f} | {r['target_s']:.1f} | {r['iree_s']:.1f} | "
                     f"{r['torq_s'] / r['iree_s']:.2f}× | {r['torq']} / {r['host']} | {r['compiled']} |")
    return lines


def depth_lines(rows: list[dict]) -> list[str]:
    """Per weights mode, the deepest model's times over one layer's, against DEPTH_TARGET."""
    lines = [""]
    for weights in ("inline", "external"):
        ok = {r["layers"]: r for r in rows if r["weights"] == weights and "error" not in r}
        if 1 not in ok or len(ok) < 2:
            continue
        deep = ok[max(ok)]
        whole, own = deep["torq_s"] / ok[1]["torq_s"], deep["target_s"] / ok[1]["target_s"]
        lines.append(f"- {weights} weights, {deep['layers']} layers over 1: torq-compile {whole:.2f}× "
                     f"(target ≤ {DEPTH_TARGET}×: {'met' if whole <= DEPTH_TARGET else '**not met**'}), "
                     f"the Torq target alone {own:.2f}×, iree-compile llvm-cpu {deep['iree_s'] / ok[1]['iree_s']:.2f}×.")
    return lines


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--worker"]:
        return worker_main(argv[1:], measure)
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", default=",".join(map(str, LAYERS)), help="comma-separated depths (default 1,2,12)")
    p.add_argument("--timeout", type=float, default=900, help="seconds per row")
    p.add_argument("--output", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "RESULTS-depth.md"))
    args = p.parse_args(argv)
    try:
        depths = [int(n) for n in args.layers.split(",") if n.strip()]
    except ValueError:
        p.error(f"--layers: expected numbers like 1,2,12, got '{args.layers}'")
    info = machine_info()
    rows = []
    for weights in ("inline", "external"):
        for layers in depths:
            r = {**run_worker(os.path.abspath(__file__), {"layers": layers, "weights": weights}, args.timeout),
                 "layers": layers, "weights": weights}
            rows.append(r)
            print(markdown([r])[2], flush=True)
    write_results(args.output, "BERT-base encoder: compile time vs depth", "depth.py", info,
                  markdown(rows) + depth_lines(rows) + ["", __doc__.split("\n\n", 2)[2].strip()])
    return 0


if __name__ == "__main__":
    sys.exit(main())
