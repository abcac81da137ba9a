#!/usr/bin/env python3
"""Benchmark suite (issue 4): Torq compile + simulator vs IREE llvm-cpu, one markdown table.

    nice -n 10 .venv/bin/python build_tools/benchmarks/run.py            # full sizes -> RESULTS.md
    .venv/bin/python build_tools/benchmarks/run.py --quick --models mlp,cnn --output /tmp/r.md

Models, side by side: an MLP, the sample CNN (samples/cnn.py), MobileNetV2,
MobileNetV3-Large and ResNet-18 at 224x224, a BERT-base encoder layer at
sequence 128, a Whisper-style audio encoder, ViT-B/16 at 224x224 (197 tokens;
samples/models.py, random weights), and the three CNNs again
quantized to int8 by onnxruntime (`<name>_int8`: a second table, int8.py),
and samples/llm.py's Llama decoder (`llm`: prefill and decode, a third table, llm_rows.py).
Per model, in its own child process
(`--timeout` each; a failure or timeout is a row with the error):
1. export with iree-turbine to torch-dialect MLIR (once; both compilers get it);
2. `torq.compile` of that MLIR (in process, seconds) and `iree-compile` with
   the llvm-cpu backend and the same host flags (the iree-compile binary,
   seconds);
3. one warm-up call, then one timed call on the Torq simulator (NPU dispatches
   simulated, host dispatches on llvm-cpu) and the median of 5 timed calls of
   the llvm-cpu module via iree.runtime ("local-task"), same input;
4. the simulated figures of the Torq run (DESIGN §7): cycles, latency at the
   model clock, efficiency = roofline / cycles, DDR traffic ratio = DMA bytes /
   compulsory bytes, LRAM peak (max over dispatches), share of the model's
   MACs on the NPU (compiler/macs.py), host dispatches left, and the error of
   both outputs vs torch fp32 (relative L2, cosine).
Writes `--output` (default build_tools/benchmarks/RESULTS.md) with the machine it
ran on.
"""

from __future__ import annotations

import argparse
import copy
import io
import os
import statistics
import sys
import time
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (  # noqa: E402
    MODEL_SIZES,
    build_model,
    compile_cold_and_warm,
    llvm_cpu_compile,
    machine_info,
    machine_markdown,
    one_line,
    progress,
    run_worker,
    worker_main,
)
from int8 import is_int8, measure_int8  # noqa: E402
from int8 import markdown as int8_markdown  # noqa: E402
from llm_rows import is_llm, measure_llm  # noqa: E402
from llm_rows import markdown as llm_markdown  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))

def llvm_cpu_function(mlir: str | bytes, function: str = "main") -> tuple[float, object]:
    """iree-compile (llvm-cpu) seconds and the compiled `function` on iree.runtime local-task."""
    import iree.runtime as rt

    compile_s, vmfb = llvm_cpu_compile(mlir)
    ctx = rt.SystemContext(config=rt.Config("local-task"))
    ctx.add_vm_module(rt.VmModule.copy_buffer(ctx.instance, vmfb))
    return compile_s, ctx.modules.module[function]


def llvm_cpu(mlir: str | bytes, x, function: str = "main") -> tuple[float, float, object]:
    """iree-compile (llvm-cpu) seconds, median run seconds of 5 calls after a warm-up, and the output."""
    import numpy as np

    compile_s, main = llvm_cpu_function(mlir, function)
    np.asarray(main(x))
    samples = []
    for _ in range(5):
        t0 = time.perf_counter()
        y = np.asarray(main(x))
        samples.append(time.perf_counter() - t0)
    return compile_s, statistics.median(samples), y


def measure(spec: dict) -> dict:
    """One model: both compiles, both runs, the simulated figures and the errors."""
    if is_int8(spec["model"]):
        return measure_int8(spec, build_model, simulated_figures, llvm_cpu_function)
    if is_llm(spec["model"]):
        return measure_llm(spec, llvm_cpu_compile)
    import numpy as np
    import torch
    from cnn import error_figures
    from run_model import export_mlir

    import torq

    model, x, label = build_model(spec["model"], spec["kwargs"])
    row: dict = {"label": label, "model": spec["model"]}
    with torch.no_grad():
        ref = model(x).numpy()
        try:  # torch's own bf16 run (a copy of the model): what the format alone costs, beside ours
            y_bf16 = copy.deepcopy(model).to(torch.bfloat16)(x.to(torch.bfloat16)).float().numpy()
            row["torch_bf16_rel_l2"], row["torch_bf16_cosine"] = error_figures(y_bf16, ref)
        except RuntimeError as e:  # an op without a bf16 CPU kernel
            row["torch_bf16_error"] = one_line(f"{type(e).__name__}: {e}", 200)
    t0 = time.perf_counter()
    mlir = export_mlir(model, x)
    row["export_s"] = time.perf_counter() - t0
    xs = x.numpy()

    # The reference first: its figures stay in the row if Torq fails.
    try:
        row["iree_compile_s"], row["cpu_run_s"], y_cpu = llvm_cpu(mlir, xs)
        row["cpu_rel_l2"], row["cpu_cosine"] = error_figures(y_cpu, ref)
    except Exception as e:
        row.update(iree_compile_s=None, cpu_run_s=None, cpu_error=one_line(f"{type(e).__name__}: {e}", 300))

    t0 = time.perf_counter()
    try:
        cm, row["torq_compile_s"], row["warm_compile_s"] = compile_cold_and_warm(mlir, spec["hw"], io.StringIO())
    except torq.TorqCompileError as e:
        return {**row, "error": f"torq compile: {one_line(e, 300)}", "torq_compile_s": time.perf_counter() - t0}
    try:
        cm(xs)  # warm-up: loads the module, parses the executables
        t0 = time.perf_counter()
        y = np.asarray(cm(xs))
        row["sim_run_s"] = time.perf_counter() - t0
    except torq.TorqRuntimeError as e:
        return {**row, "error": f"torq run: {one_line(e, 300)}"}
    row.update(simulated_figures(cm))
    row["rel_l2"], row["cosine"] = error_figures(y, ref)
    return row


def simulated_figures(cm) -> dict:
    """The figures of the last call of compiled model `cm` (DESIGN §7) and its dispatch split."""
    stats, rep = cm.last_stats, cm.report
    cycles = sum(s["cycles"] for s in stats)
    roofline = sum(s["roofline_cycles"] for s in stats)
    dma = sum(s["dma_bytes_in"] + s["dma_bytes_out"] for s in stats)
    compulsory = sum(s["compulsory_bytes"] for s in stats)
    host = [d for d in rep.dispatches if d.executor == "host"]
    return dict(
        cycles=cycles, latency_ms=cycles / (cm.hw.clock_mhz * 1e3), clock_mhz=cm.hw.clock_mhz,
        efficiency=roofline / cycles if cycles else None,
        traffic_ratio=dma / compulsory if compulsory else None,
        lram_peak=max((s["lram_peak_bytes"] for s in stats), default=0), budget=cm.hw.available_lram_bytes,
        mac_share=rep.npu_mac_share, total_macs=rep.total_macs,
        torq_dispatches=len(rep.dispatches) - len(host), host_dispatches=len(host),
        host_with_macs=[(d.name, d.macs, d.reason) for d in host if d.macs],
        host_reasons=dict(Counter(d.reason for d in host)))


def _ratio(a, b) -> str:
    return f"{a / b:.1f}×" if a is not None and b else "-"


def _f(v, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


COLUMNS = ["model", "torq-compile s", "iree-compile llvm-cpu s", "ratio", "warm recompile s", "simulator run ms",
           "llvm-cpu run ms",
           "ratio", "simulated cycles", "latency ms", "efficiency vs roofline", "DDR traffic ratio",
           "LRAM peak KiB", "NPU share of MACs", "dispatches torq/host", "rel L2 vs torch", "cosine vs torch",
           "wall s"]


def table_row(r: dict) -> list[str]:
    if "error" in r and "cycles" not in r:
        return [r.get("label", "?"), f"**failed**: {one_line(r['error'])}", _f(r.get("iree_compile_s"), ".1f"), "",
                "", "", _f(r.get("cpu_run_s") and 1e3 * r["cpu_run_s"], ".1f")] + [""] * (len(COLUMNS) - 8) + \
            [_f(r.get("wall_s"), ".0f")]
    return [r["label"], _f(r["torq_compile_s"], ".1f"), _f(r["iree_compile_s"], ".1f"),
            _ratio(r["torq_compile_s"], r["iree_compile_s"]), _f(r.get("warm_compile_s"), ".1f"),
            _f(1e3 * r["sim_run_s"], ".1f"),
            _f(1e3 * r["cpu_run_s"], ".1f"), _ratio(r["sim_run_s"], r["cpu_run_s"]), f"{r['cycles']:,}",
            _f(r["latency_ms"], ".2f"), _f(r["efficiency"] and 100 * r["efficiency"], ".1f") + "%",
            _f(r["traffic_ratio"], ".3f"), f"{r['lram_peak'] / 1024:.0f} / {r['budget'] / 1024:.0f}",
            f"{100 * r['mac_share']:.1f}%", f"{r['torq_dispatches']}/{r['host_dispatches']}",
            f"{r['rel_l2']:.1e}", f"{r['cosine']:.6f}", _f(r.get("wall_s"), ".0f")]


def markdown(rows: list[dict], info: dict, args) -> str:
    lines = ["# Torq benchmark suite", "",
             f"`build_tools/benchmarks/run.py{' --quick' if args.quick else ''}` on `--torq-hw={args.hw}`. "
             + machine_markdown(info), "",
             "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(table_row(r)) + " |" for r in rows if not (r.get("int8") or r.get("llm"))]
    lines += ["", "Columns: torq-compile = `torq.compile` of the exported MLIR in process, cold (empty "
              "caches; distinct dispatches in one worker process per core); iree-compile = the "
              "`iree-compile` binary, llvm-cpu backend, same MLIR and `--iree-llvmcpu-target-cpu=host`; warm "
              "recompile = the same `torq.compile` again with the caches the first one filled (compiled "
              "dispatches and IREE's front end, compiler/frontend_cache.py). Simulator "
              "run = one call after a warm-up (NPU dispatches simulated in numpy, host dispatches on llvm-cpu); "
              "llvm-cpu run = median of 5 calls after a warm-up, iree.runtime local-task. Latency = simulated cycles "
              "at the model clock. Efficiency = roofline cycles / simulated cycles; DDR traffic ratio = DMA bytes / "
              "compulsory bytes; LRAM peak = max over NPU dispatches / usable budget (DESIGN §7). NPU share of MACs = "
              "MACs of NPU dispatches / MACs of all dispatches, counted by the compiler from the linalg ops "
              "(compiler/macs.py). Errors: the Torq output vs torch fp32 (bf16 limits: rel L2 ≤ 1e-2, cosine ≥ "
              "0.9999). wall s = the whole measurement of that model, export included.", ""]
    notes = []
    for r in rows:
        if "cycles" not in r or r.get("int8") or r.get("llm"):
            continue
        ref = (f"llvm-cpu vs torch rel L2 {r['cpu_rel_l2']:.1e}, cosine {r['cpu_cosine']:.6f}"
               if "cpu_error" not in r else f"llvm-cpu failed: {r['cpu_error']}")
        bf16 = (f"torch's own bf16 run rel L2 {r['torch_bf16_rel_l2']:.1e}, cosine {r['torch_bf16_cosine']:.6f}"
                if "torch_bf16_rel_l2" in r else f"torch's own bf16 run failed: {r.get('torch_bf16_error')}")
        notes.append(f"- {r['label']}: {ref}; {bf16}; {r['total_macs']:,} MACs; export {r['export_s']:.1f} s.")
        for reason, n in sorted(r["host_reasons"].items(), key=lambda kv: -kv[1]):
            notes.append(f"  - {n} host dispatch{'es' if n > 1 else ''}: {one_line(reason, 200)}")
        for name, macs, reason in r["host_with_macs"]:
            notes.append(f"  - host MACs: {name} {macs:,} ({one_line(reason, 120)})")
    if notes:
        lines += ["Per model (reference error of llvm-cpu itself and of torch's own bf16 run, model.to(torch.bfloat16), "
                  "vs torch fp32; host dispatches and why they stay on the host):",
                  "", *notes, ""]
    return "\n".join(lines + int8_markdown(rows) + llm_markdown(rows))


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--worker"]:
        return worker_main(argv[1:], measure)
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(MODEL_SIZES),
                   help=f"comma-separated subset of {','.join(MODEL_SIZES)} (default: all)")
    p.add_argument("--quick", action="store_true", help="small sizes (smoke tests)")
    p.add_argument("--size", type=int, help="input height/width of the CNNs (overrides 224 / quick)")
    p.add_argument("--seq", type=int, help="BERT sequence length (overrides 128 / quick)")
    p.add_argument("--hw", default="SL2610", help="Torq hardware spec (default SL2610)")
    p.add_argument("--timeout", type=float, default=900, help="seconds per model (default 900)")
    p.add_argument("--output", default=os.path.join(HERE, "RESULTS.md"), help="markdown file to write")
    args = p.parse_args(argv)
    names = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in names if m not in MODEL_SIZES]
    if unknown:
        p.error(f"unknown model(s) {', '.join(unknown)} (known: {', '.join(MODEL_SIZES)})")

    info = machine_info()
    rows = []
    with progress() as bar:
        task = bar.add_task("benchmarks", total=len(names))
        for name in names:
            kwargs = dict(MODEL_SIZES[name][1 if args.quick else 0])
            if args.size and "size" in kwargs:
                kwargs["size"] = args.size
            if args.seq and "seq" in kwargs:
                kwargs["seq"] = args.seq
            bar.update(task, description=f"{name} {kwargs}")
            t0 = time.perf_counter()
            r = run_worker(os.path.abspath(__file__), {"model": name, "kwargs": kwargs, "hw": args.hw},
                           args.timeout)
            r.setdefault("label", f"{name} {kwargs}")
            r["wall_s"] = time.perf_counter() - t0
            rows.append(r)
            status = "failed: " + one_line(r["error"], 100) if "cycles" not in r else "ok"
            bar.console.print(f"{r['label']}: {status} ({r['wall_s']:.0f} s)")
            bar.advance(task)
    text = markdown(rows, info, args)
    with open(args.output, "w") as f:
        f.write(text)
    print(text)
    print(f"written {args.output}", file=sys.stderr)
    return 0 if all("cycles" in r for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
