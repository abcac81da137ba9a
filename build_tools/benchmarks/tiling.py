#!/usr/bin/env python3
"""Super tiling benchmark (issue 3): seed, traffic and default strategies over LRAM budgets, one markdown file.

    nice -n 10 .venv/bin/python build_tools/benchmarks/tiling.py        # full sizes -> RESULTS-tiling.md
    .venv/bin/python build_tools/benchmarks/tiling.py --quick --models cnn --budgets 64 --no-depth --output /tmp/t.md

Each model (MobileNetV2 and ResNet-18 at 224x224, a BERT-base encoder layer at
sequence 128; samples/models.py) is exported once with iree-turbine, then
compiled with `torq.compile` for every `--torq-super-tiling-strategy` in
`--strategies` at every LRAM size in `--budgets` (KiB, `SL2610:lram_kb=N`; the
usable budget is N minus the reserved 14 KiB), each compile in its own child
process with `--torq-dump-tiling`. From the dump, summed over the NPU
dispatches: predicted DMA bytes (in + out of the final NSS program) vs
compulsory bytes (DDR traffic ratio, DESIGN §7), the largest LRAM peak, the
tiles, the dispatches whose peak exceeds the budget (overflows: must be 0) and
the compile seconds. A failing compile is a row with its error.

Then (`--no-depth` skips it) a 1-layer vs 2-layer BERT-base encoder compile
with the default strategy at the default hardware, against the issue's
targets: one layer < 60 s, two layers <= 2.2x one.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import MODEL_SIZES, build_model, machine_info, machine_markdown, one_line, progress, run_worker, worker_main  # noqa: E402

from torq.contract.hw import TorqHw  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_MODELS = ["mobilenet_v2", "resnet18", "bert"]
BUDGETS_KIB = [64, 128, 256, 512]
STRATEGIES = ["seed", "traffic", "default"]
CNN_RATIO_TARGET = 1.15  # default strategy on the CNNs at 512 KiB
ONE_LAYER_TARGET_S = 60.0
TWO_LAYER_TARGET_X = 2.2


def measure(spec: dict) -> dict:
    """Compile one exported model with one strategy and budget; the tiling dump's totals."""
    import torq

    with open(spec["mlir"], "rb") as f:
        source = f.read()
    # A dispatch whose tiling overflows (the seed's estimate) stays on host with a remark
    # instead of stopping the compile, so every dispatch is counted.
    flags = [f"--torq-super-tiling-strategy={spec['strategy']}", "--torq-host-fallback-on-error"]
    dump = spec["mlir"] + f".{spec['strategy']}.{spec['lram_kb']}.tiling.json"
    if spec.get("dump", True):
        flags.append(f"--torq-dump-tiling={dump}")
    t0 = time.perf_counter()
    try:
        cm = torq.compile(source, hw=f"SL2610:lram_kb={spec['lram_kb']}", flags=flags, remarks=io.StringIO())
    except torq.TorqCompileError as e:
        return {"compile_s": time.perf_counter() - t0, "error": one_line(e, 400)}
    row = {"compile_s": time.perf_counter() - t0, "budget": cm.hw.available_lram_bytes,
           "torq_dispatches": sum(d.executor == "torq" for d in cm.report.dispatches),
           "host_dispatches": sum(d.executor == "host" for d in cm.report.dispatches),
           "mac_share": cm.report.npu_mac_share,
           "refused": sum(d.reason.startswith("Torq compile failed") for d in cm.report.dispatches)}
    if not spec.get("dump", True):
        return row
    with open(dump) as f:
        records = json.load(f)["dispatches"]
    os.unlink(dump)
    dma = sum(r["predicted_dma_bytes_in"] + r["predicted_dma_bytes_out"] for r in records)
    compulsory = sum(r["compulsory_bytes"] for r in records)
    worst = max(records, key=lambda r: r["traffic_ratio"], default=None)
    row.update(dma_bytes=dma, compulsory_bytes=compulsory, traffic_ratio=dma / compulsory if compulsory else None,
               lram_peak=max((r["lram_peak_bytes"] for r in records), default=0),
               tiles=sum(r["tiles"] for r in records), tiled_dispatches=sum(r["tiles"] > 1 for r in records),
               overflows=sum(r["lram_peak_bytes"] > r["budget_bytes"] for r in records),
               per_dispatch={r["dispatch"]: [r["predicted_dma_bytes_in"] + r["predicted_dma_bytes_out"],
                                             r["compulsory_bytes"]] for r in records},
               worst_dispatch=worst and [worst["dispatch"], worst["traffic_ratio"]])
    return row


COLUMNS = ["model", "LRAM KiB (usable)", "strategy", "DDR traffic ratio", "DMA MB", "compulsory MB",
           "LRAM peak KiB", "tiles (tiled dispatches)", "overflows: compile-time refused / run", "NPU / host dispatches", "compile s",
           "worst dispatch ratio"]


def table_row(r: dict) -> list[str]:
    head = [r["label"], f"{r['lram_kb']} ({TorqHw(lram_kb=r['lram_kb']).available_lram_bytes // 1024})", r["strategy"]]
    if "error" in r:
        return head + [f"**failed**: {one_line(r['error'], 220)}"] + [""] * (len(COLUMNS) - 6) + \
            [f"{r.get('compile_s', 0):.1f}", ""]
    ratio = "-" if r["traffic_ratio"] is None else f"{r['traffic_ratio']:.3f}"
    worst = f"{r['worst_dispatch'][0]}: {r['worst_dispatch'][1]:.2f}" if r.get("worst_dispatch") else "-"
    return head + [ratio, f"{r['dma_bytes'] / 1e6:.2f}", f"{r['compulsory_bytes'] / 1e6:.2f}",
                   f"{r['lram_peak'] / 1024:.0f}", f"{r['tiles']} ({r['tiled_dispatches']})", f"{r['refused']} / {r['overflows']}",
                   f"{r['torq_dispatches']} / {r['host_dispatches']}", f"{r['compile_s']:.1f}", worst]


def target_lines(rows: list[dict]) -> list[str]:
    out = []
    by = {(r["model"], r["lram_kb"], r["strategy"]): r for r in rows}
    for model in sorted({r["model"] for r in rows}):
        for kib in sorted({r["lram_kb"] for r in rows if r["model"] == model}):
            d, s = by.get((model, kib, "default")), by.get((model, kib, "seed"))
            if d is None or s is None:
                continue
            common = sorted(set(d.get("per_dispatch", {})) & set(s.get("per_dispatch", {})))
            if common:
                dr, sr = (sum(r["per_dispatch"][k][0] for k in common) / sum(r["per_dispatch"][k][1] for k in common)
                          for r in (d, s))
                above = [k for k in common if d["per_dispatch"][k][0] > s["per_dispatch"][k][0]]
                verdict = "ok" if not above else f"**default above seed on {', '.join(above)}**"
                out.append(f"- {model} @ {kib} KiB, the {len(common)} dispatches both compiled: default {dr:.3f} "
                           f"vs seed {sr:.3f}: {verdict} (seed refused {s.get('refused', 0)})")
            elif d.get("traffic_ratio") is not None:
                out.append(f"- {model} @ {kib} KiB: default {d['traffic_ratio']:.3f}; seed failed "
                           f"({one_line(s.get('error', '?'), 120)})")
            else:
                out.append(f"- {model} @ {kib} KiB: default failed ({one_line(d.get('error', '?'), 120)})")
        d = by.get((model, 512, "default"))
        if model in ("mobilenet_v2", "resnet18") and d is not None and d.get("traffic_ratio") is not None:
            met = "met" if d["traffic_ratio"] <= CNN_RATIO_TARGET else "**not met**"
            out.append(f"- {model} @ 512 KiB default ratio {d['traffic_ratio']:.3f} ≤ {CNN_RATIO_TARGET}: {met}")
    return out


def depth_lines(depth: list[dict]) -> list[str]:
    if not depth:
        return []
    lines = ["## BERT-base encoder: compile time vs depth", "",
             "| layers | model | compile s | NPU / host dispatches | NPU share of MACs |", "|---|---|---|---|---|"]
    for r in depth:
        if "error" in r:
            lines.append(f"| {r['layers']} | {r['label']} | **failed**: {one_line(r['error'], 200)} | | |")
        else:
            lines.append(f"| {r['layers']} | {r['label']} | {r['compile_s']:.1f} | "
                         f"{r['torq_dispatches']} / {r['host_dispatches']} | {100 * r['mac_share']:.1f}% |")
    ok = [r for r in depth if "error" not in r]
    if len(ok) == 2:
        one, two = ok[0]["compile_s"], ok[1]["compile_s"]
        lines += ["", f"One layer {one:.1f} s (target < {ONE_LAYER_TARGET_S:.0f} s: "
                  f"{'met' if one < ONE_LAYER_TARGET_S else '**not met**'}); two layers {two / one:.2f}× one "
                  f"(target ≤ {TWO_LAYER_TARGET_X}×: {'met' if two <= TWO_LAYER_TARGET_X * one else '**not met**'}). "
                  "Default strategy, `--torq-hw=SL2610` (512 KiB), no tiling dump."]
    return lines + [""]


def markdown(rows: list[dict], depth: list[dict], info: dict, args, exports: dict) -> str:
    lines = ["# Super tiling: seed, traffic and default strategies", "",
             f"`build_tools/benchmarks/tiling.py{' --quick' if args.quick else ''}`. " + machine_markdown(info), "",
             "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(table_row(r)) + " |" for r in rows]
    lines += ["", "DDR traffic ratio = predicted DMA bytes (in + out) of the NPU dispatches' final NSS programs / "
              "their compulsory bytes (each input, weight and output once), summed over NPU dispatches, from "
              "`--torq-dump-tiling`. LRAM peak = largest allocator peak of a dispatch; overflows = dispatches whose "
              f"peak exceeds the usable budget (LRAM minus {TorqHw().reserved_kb} KiB reserved). tiles = sum of tiles over NPU "
              "dispatches (in brackets: dispatches with more than one tile). Overflows: compile-time refused = "
              "dispatches whose tiling the LRAM allocator refused (`--torq-host-fallback-on-error` keeps them on "
              "host, so the rest is still measured; the seed's estimate does this), run = dispatches whose peak "
              "exceeds the budget in the program (must be 0). compile s = `torq.compile` of the "
              "exported MLIR, in its own process, tiling dump included. Exports (iree-turbine): "
              + ", ".join(f"{k} {v:.1f} s" for k, v in exports.items()) + ".", ""]
    checks = target_lines(rows)
    if checks:
        lines += ["Targets (issue 3): default never above seed; CNNs at 512 KiB ≤ 1.15:", "", *checks, ""]
    return "\n".join(lines + depth_lines(depth))


def _export(name: str, kwargs: dict, directory: str) -> tuple[str, str, float]:
    from run_model import export_mlir

    model, x, label = build_model(name, kwargs)
    t0 = time.perf_counter()
    text = export_mlir(model, x)
    seconds = time.perf_counter() - t0
    path = os.path.join(directory, f"{name}-{kwargs.get('layers', 1)}.mlir")
    with open(path, "w") as f:
        f.write(text)
    return path, label, seconds


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--worker"]:
        return worker_main(argv[1:], measure)
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    known = [m for m in MODEL_SIZES if not m.endswith("_int8")]  # the int8 rows are run.py's
    p.add_argument("--models", default=",".join(DEFAULT_MODELS), help=f"comma-separated subset of "
                   f"{','.join(known)} (default: {','.join(DEFAULT_MODELS)})")
    p.add_argument("--budgets", default=",".join(map(str, BUDGETS_KIB)), help="LRAM sizes in KiB (default 64..512)")
    p.add_argument("--strategies", default=",".join(STRATEGIES), help="seed,traffic,default")
    p.add_argument("--quick", action="store_true", help="small sizes (smoke tests)")
    p.add_argument("--no-depth", dest="depth", action="store_false", help="skip the 1- vs 2-layer BERT timing")
    p.add_argument("--timeout", type=float, default=900, help="seconds per compile (default 900)")
    p.add_argument("--output", default=os.path.join(HERE, "RESULTS-tiling.md"), help="markdown file to write")
    args = p.parse_args(argv)
    names = [m.strip() for m in args.models.split(",") if m.strip()]
    strategies = [s.strip() for s in args.strategies.split(",") if s.strip()]
    try:
        budgets = [int(b) for b in args.budgets.split(",") if b.strip()]
    except ValueError:
        p.error(f"--budgets: expected KiB numbers like 64,128, got '{args.budgets}'")
    bad = [m for m in names if m not in known] + [s for s in strategies if s not in STRATEGIES]
    if bad:
        p.error(f"unknown model or strategy: {', '.join(bad)}")
    size = 1 if args.quick else 0

    import warnings

    warnings.filterwarnings("ignore")
    info = machine_info()
    rows, depth, exports = [], [], {}
    with tempfile.TemporaryDirectory(prefix="torq-tiling-") as tmp, progress() as bar:
        task = bar.add_task("tiling", total=len(names) * len(budgets) * len(strategies) + 2 * args.depth)
        for name in names:
            bar.update(task, description=f"export {name}")
            mlir, label, seconds = _export(name, MODEL_SIZES[name][size], tmp)
            exports[label] = seconds
            for kib in budgets:
                for strategy in strategies:
                    bar.update(task, description=f"{label} {kib} KiB {strategy}")
                    t0 = time.perf_counter()
                    r = run_worker(os.path.abspath(__file__),
                                   {"mlir": mlir, "strategy": strategy, "lram_kb": kib}, args.timeout)
                    r.update(model=name, label=label, lram_kb=kib, strategy=strategy)
                    r.setdefault("compile_s", time.perf_counter() - t0)
                    rows.append(r)
                    status = ("failed: " + one_line(r["error"], 100)) if "error" in r else \
                        f"ratio {r['traffic_ratio'] or 0:.3f}, peak {r['lram_peak'] / 1024:.0f} KiB"
                    bar.console.print(f"{label} {kib} KiB {strategy}: {status} ({r['compile_s']:.1f} s)")
                    bar.advance(task)
        if args.depth:
            for layers in (1, 2):
                kwargs = {**MODEL_SIZES["bert"][size], "layers": layers}
                bar.update(task, description=f"export bert x{layers}")
                mlir, label, _ = _export("bert", kwargs, tmp)
                bar.update(task, description=f"{label} compile")
                r = run_worker(os.path.abspath(__file__),
                               {"mlir": mlir, "strategy": "default", "lram_kb": 512, "dump": False}, args.timeout)
                r.update(layers=layers, label=label)
                depth.append(r)
                bar.console.print(f"{label}: " + (f"failed: {one_line(r['error'], 100)}" if "error" in r
                                                   else f"compile {r['compile_s']:.1f} s"))
                bar.advance(task)
    text = markdown(rows, depth, info, args, exports)
    with open(args.output, "w") as f:
        f.write(text)
    print(text)
    print(f"written {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
