"""`torq-benchmark-module`: iree-benchmark-module's flags, Torq dispatches on the simulator.

Contract:
- Flags (IREE syntax): `--module=path.vmfb` (required), `--function=main`,
  `--device=torq`, repeated `--input=` (same forms as torq-run-module,
  parsed by `tools.parse_input`), `--benchmark_repetitions=N` (default 1),
  `--torq-hw=SPEC` (`--torq-hw=list` lists presets), `--json=stats.json`,
  `--trace=trace.json`, `--report=DIR`, `--csv=layers.csv`.
- One untimed warm-up call, then N timed calls. Prints, like
  iree-benchmark-module, one `BM_<function>/real_time` line per repetition
  and the `_mean`, `_median`, `_stddev` aggregates of the host wall time of
  the VM invocation (the simulator runs inside it, on the host).
- Then the simulated figures of the last call (the simulator is
  deterministic): totals (cycles, latency at the device clock, DMA bytes
  in/out, compulsory bytes and DDR traffic ratio, LRAM peak, MACs, roofline
  cycles and cycle efficiency, DESIGN §7) and a per-dispatch table (name,
  executor, tiles, cycles, time, share, DMA bytes, LRAM peak, efficiency),
  then the network summary in Vela's style (`layer_report.summary_lines`:
  inferences/s from the simulated latency at the device clock, DDR MB per
  inference, achieved TOPS, NPU MAC utilisation, NPU vs host dispatches, time
  and MACs).
  IREE's Python runtime gives no per-dispatch timing of host (llvm-cpu)
  dispatches, so the host is one row: the measured wall time of the call
  minus the wall time spent in Torq dispatch calls (host dispatches, VM and
  buffer marshalling); the table says so in a footnote.
- `--json`: {"tool", "module", "function", "repetitions", "hw": TorqHw
  fields, "wall_us": {"samples", "mean", "median", "stddev"}, "dispatches":
  [per call: the `last_stats` dict fields (name, executor, tiles, cycles,
  latency_us, dma_bytes_in, dma_bytes_out, compulsory_bytes,
  lram_peak_bytes, macs, roofline_cycles, efficiency, ...) and for the host
  row executor "host", "wall_us" and null for the simulated fields],
  "total": {"cycles", "latency_us", "dma_bytes_in", "dma_bytes_out",
  "compulsory_bytes", "ddr_traffic_ratio", "lram_peak_bytes", "macs",
  "roofline_cycles", "efficiency", "host_wall_us", "estimated_us"}}.
  Totals are sums over Torq dispatches (LRAM peak: the max); traffic ratio =
  (in + out) / compulsory; efficiency = roofline / cycles;
  estimated_us = latency_us + host_wall_us. Also "layers" (the per-layer rows
  below) and "summary" (the network summary, `layer_report.network_summary`).
- `--csv`: the per-layer report (`layer_report`), one row per dispatch of
  the function, NPU and host, in program order, from the compile record the
  .vmfb carries (contract/dispatch_records.py) and the last call's stats:
  index, name, executor, source (where it came from in the model: torch
  `file:line`s, ONNX node names; empty when the input had no locations),
  ops, cycles, cycles_pct (of the network's NPU cycles, summing to 100),
  time_us (simulated latency; host: measured wall time of its host segment),
  macs (the compiler's count), mac_util_pct (MACs / (cycles x peak MACs per
  cycle at its dtype, `TorqHw`)), lram_peak_bytes, lram_pct (of the LRAM
  budget), dma_bytes_in, dma_bytes_out, traffic_ratio, note (a host
  dispatch's reason). Host rows leave the simulated fields empty.
- `--trace`: Chrome / Perfetto JSON (`chrome://tracing`, ui.perfetto.dev)
  of the last call on one estimated timeline in µs: host segments (measured
  wall time between Torq calls) on the host track, each Torq dispatch (its
  simulated latency) on the "dispatches" track, and its commands on one
  track per DMA engine and per slice, each inside its dispatch's span.
- `--report=DIR`: `cycles_vs_roofline.png` (per Torq dispatch),
  `lram_occupancy.png` (engine activity and LRAM occupancy over time of the
  dispatch with the most cycles) and `summary.md` (the totals, the table,
  and the per-layer report with the network summary).
- Errors: one line `torq-benchmark-module: error: <message>` on stderr,
  never a traceback; exit 1, or 2 for usage errors. The --csv, --json and
  --trace files are written together, atomically: a path that cannot be
  written leaves none of them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from typing import Any, NoReturn, Sequence

from torq.contract.hw import DEFAULT_HW, HwSpecError, TorqHw, describe_presets, parse_hw_spec

from . import layer_report
from .errors import InputError
from .tools import (
    ToolError,
    _one_line,
    _write_outputs,
    add_parameters_flag,
    check_common_args,
    input_flag_error,
    parse_input,
    tool_main,
)

PROG = "torq-benchmark-module"
HOST_NOTE = ("host: measured wall time of the call minus the wall time of the Torq dispatch calls "
             "(host dispatches, VM, buffer marshalling); IREE's Python runtime has no per-dispatch "
             "timing for host (llvm-cpu) dispatches")
SIM_FIELDS = ("tiles", "cycles", "latency_us", "dma_bytes_in", "dma_bytes_out", "compulsory_bytes",
              "lram_peak_bytes", "macs", "roofline_cycles", "efficiency", "ddr_traffic_ratio")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        print(f"{PROG}: error: {_one_line(message)}", file=sys.stderr)
        raise SystemExit(2)


def _parser() -> _Parser:
    p = _Parser(prog=PROG, allow_abbrev=False,
                description="Benchmarks a function of a .vmfb with its Torq dispatches on the Torq NPU simulator "
                            "(flags as iree-benchmark-module).")
    p.add_argument("--module", help="path of the .vmfb to benchmark")
    p.add_argument("--function", default="main", help="function to call (default: main)")
    p.add_argument("--device", default="torq", help="device: torq (IREE CPU for host code + Torq simulator)")
    p.add_argument("--input", action="append", default=[], help="an input, in order (as torq-run-module)")
    p.add_argument("--benchmark_repetitions", "--benchmark-repetitions", dest="repetitions", type=int, default=1,
                   help="timed calls (default 1)")
    add_parameters_flag(p)
    p.add_argument("--torq-hw", dest="torq_hw", default=None,
                   help="simulated hardware NAME[:key=value,...] (default: as compiled); 'list' to list")
    p.add_argument("--json", dest="json_path", default=None, help="write the figures as JSON to this file")
    p.add_argument("--trace", dest="trace_path", default=None, help="write a Chrome/Perfetto trace to this file")
    p.add_argument("--report", dest="report_dir", default=None, help="write PNG plots and summary.md to this directory")
    p.add_argument("--csv", dest="csv_path", default=None,
                   help="write the per-layer report (one row per dispatch, Vela's style) as CSV to this file")
    return p


# --------------------------------------------------------------------------
# Figures


def wall_stats(samples: list[float]) -> dict:
    return {"samples": samples, "mean": statistics.fmean(samples), "median": statistics.median(samples),
            "stddev": statistics.stdev(samples) if len(samples) > 1 else 0.0}


def _hw_of(stats: list[dict], override: TorqHw | None) -> TorqHw:
    if override is not None:
        return override
    specs = [s.get("hw_spec") for s in stats if s.get("hw_spec")]
    try:
        return parse_hw_spec(specs[0]) if specs else parse_hw_spec(DEFAULT_HW)
    except HwSpecError:
        return parse_hw_spec(DEFAULT_HW)


def build_figures(stats: list[dict], wall_us: float, samples: list[float], hw: TorqHw, module: str,
                  function: str) -> dict:
    """The --json object (see module docstring) from one call's `last_stats` and its wall time."""
    dispatches = []
    for s in stats:
        d = {k: v for k, v in s.items() if k != "timeline"}
        d["share"] = 0.0
        dispatches.append(d)
    torq_wall = sum(s.get("sim_wall_us", 0.0) for s in stats)
    host_wall = max(0.0, wall_us - torq_wall)
    host = {"name": "host", "executor": "host", **{k: None for k in SIM_FIELDS}, "wall_us": host_wall,
            "share": 0.0, "note": HOST_NOTE}
    dispatches.append(host)
    torq = [d for d in dispatches if d["executor"] == "torq"]
    total: dict[str, Any] = {k: sum(d[k] for d in torq) for k in
                             ("cycles", "latency_us", "dma_bytes_in", "dma_bytes_out", "compulsory_bytes", "macs",
                              "roofline_cycles")}
    total["lram_peak_bytes"] = max((d["lram_peak_bytes"] for d in torq), default=0)
    moved = total["dma_bytes_in"] + total["dma_bytes_out"]
    total["ddr_traffic_ratio"] = moved / total["compulsory_bytes"] if total["compulsory_bytes"] else 0.0
    total["efficiency"] = total["roofline_cycles"] / total["cycles"] if total["cycles"] else 0.0
    total["host_wall_us"] = host_wall
    total["estimated_us"] = total["latency_us"] + host_wall
    for d in dispatches:
        t = d["latency_us"] if d["executor"] == "torq" else d["wall_us"]
        d["share"] = t / total["estimated_us"] if total["estimated_us"] else 0.0
    return {"tool": PROG, "module": module, "function": function, "repetitions": len(samples),
            "hw": hw.to_dict(), "wall_us": wall_stats(samples), "dispatches": dispatches, "total": total}


# --------------------------------------------------------------------------
# Console output


def _fmt_time(us: float) -> str:
    if us >= 1e6:
        return f"{us / 1e6:.3f} s"
    if us >= 1e3:
        return f"{us / 1e3:.3f} ms"
    return f"{us:.3f} us"


def print_benchmark(fig: dict, out=None) -> None:
    from rich.console import Console
    from rich.table import Table

    out = out or sys.stdout
    fn = fig["function"]
    w = fig["wall_us"]
    lines = [f"Running {PROG} on {fig['module']} (@{fn}, Torq simulator {TorqHw.from_dict(fig['hw']).spec})",
             "-" * 70, f"{'Benchmark':<40}{'Time (wall)':>16}{'Iterations':>14}", "-" * 70]
    for x in w["samples"]:
        lines.append(f"{'BM_' + fn + '/real_time':<40}{_fmt_time(x):>16}{1:>14}")
    for agg in ("mean", "median", "stddev"):
        lines.append(f"{'BM_' + fn + '/real_time_' + agg:<40}{_fmt_time(w[agg]):>16}{len(w['samples']):>14}")
    t, hw = fig["total"], TorqHw.from_dict(fig["hw"])
    lines += [
        "",
        f"Simulated Torq totals ({hw.spec}, {hw.slices} slices, {hw.clock_mhz} MHz):",
        f"  cycles              {t['cycles']:,}",
        f"  latency             {t['latency_us']:,.3f} us",
        f"  DMA bytes in / out  {t['dma_bytes_in']:,} / {t['dma_bytes_out']:,}",
        f"  compulsory bytes    {t['compulsory_bytes']:,} (DDR traffic ratio {t['ddr_traffic_ratio']:.3f})",
        f"  LRAM peak           {t['lram_peak_bytes']:,} B (budget {hw.available_lram_bytes:,} B)",
        f"  MACs                {t['macs']:,}",
        f"  roofline cycles     {t['roofline_cycles']:,} (cycle efficiency {100 * t['efficiency']:.1f}%)",
        f"  host portion        {_fmt_time(t['host_wall_us'])} wall (see footnote)",
        f"  estimated total     {_fmt_time(t['estimated_us'])} (simulated NPU latency + host wall time)",
        "",
    ]
    out.write("\n".join(lines) + "\n")
    console = Console(file=out, width=max(150, Console().width))
    table = Table(title=f"Dispatches of @{fn} (last call)", caption_justify="left", title_justify="left")
    cols = ["name", "executor", "tiles", "cycles", "time", "share", "DMA in (B)", "DMA out (B)", "LRAM peak (B)",
            "efficiency"]
    width = min(48, max([len(d["name"]) + 2 for d in fig["dispatches"]] + [6]))
    for c in cols:
        if c == "name":
            table.add_column(c, justify="left", min_width=width, overflow="fold")
        else:
            table.add_column(c, justify="left" if c == "executor" else "right", no_wrap=True)
    for d in fig["dispatches"]:
        if d["executor"] == "torq":
            table.add_row(d["name"], "torq", f"{d['tiles']:,}", f"{d['cycles']:,}", _fmt_time(d["latency_us"]),
                          f"{100 * d['share']:.1f}%", f"{d['dma_bytes_in']:,}", f"{d['dma_bytes_out']:,}",
                          f"{d['lram_peak_bytes']:,}", f"{100 * d['efficiency']:.1f}%")
        else:
            table.add_row(d["name"] + " *", "host", "-", "-", _fmt_time(d["wall_us"]),
                          f"{100 * d['share']:.1f}%", "-", "-", "-", "-")
    table.add_row("total", "", "", f"{t['cycles']:,}", _fmt_time(t["estimated_us"]), "100.0%",
                  f"{t['dma_bytes_in']:,}", f"{t['dma_bytes_out']:,}", f"{t['lram_peak_bytes']:,}",
                  f"{100 * t['efficiency']:.1f}%", style="bold")
    table.caption = ("time: simulated latency at the device clock (torq), measured wall time (host); share of "
                     "their sum. * " + HOST_NOTE + ".")
    console.print(table)


# --------------------------------------------------------------------------
# Trace


_ENGINE_TIDS = {"dma_in": (1, "DMA in"), "dma_out": (2, "DMA out")}


def _engine_tid(engine: str) -> tuple[int, str]:
    if engine in _ENGINE_TIDS:
        return _ENGINE_TIDS[engine]
    k = int(engine.removeprefix("slice"))
    return 10 + k, f"slice {k}"


def build_trace(stats: list[dict], wall_us: float, hw: TorqHw) -> dict:
    """Chrome trace of one call (see module docstring); times in µs on one estimated timeline."""
    npu, host = 1, 2
    events: list[dict] = [
        {"ph": "M", "pid": npu, "name": "process_name", "args": {"name": f"Torq NPU (simulated, {hw.spec})"}},
        {"ph": "M", "pid": host, "name": "process_name", "args": {"name": "host (measured wall time)"}},
        {"ph": "M", "pid": npu, "tid": 0, "name": "thread_name", "args": {"name": "dispatches"}},
        {"ph": "M", "pid": host, "tid": 0, "name": "thread_name", "args": {"name": "host"}},
    ]
    tids: dict[int, str] = {}
    cursor = 0.0
    prev_end_wall = 0.0
    for s in stats:
        clock = parse_hw_spec(s["hw_spec"]).clock_mhz if s.get("hw_spec") else hw.clock_mhz
        gap = max(0.0, s.get("wall_start_us", prev_end_wall) - prev_end_wall)
        if gap > 0:
            events.append({"ph": "X", "pid": host, "tid": 0, "name": "host", "ts": cursor, "dur": gap,
                           "args": {"wall_us": gap}})
            cursor += gap
        prev_end_wall = s.get("wall_start_us", prev_end_wall) + s.get("sim_wall_us", 0.0)
        span = s["cycles"] / clock
        events.append({"ph": "X", "pid": npu, "tid": 0, "name": s["name"], "ts": cursor, "dur": span,
                       "args": {k: s.get(k) for k in ("tiles", "cycles", "dma_bytes_in", "dma_bytes_out", "macs",
                                                      "lram_peak_bytes", "efficiency", "sim_wall_us")}})
        for e in (s.get("timeline") or {}).get("events", []):
            tid, label = _engine_tid(e["engine"])
            tids[tid] = label
            name = e["kind"] if e["kind"].startswith("dma") else f"{e['kind']} tile {e['tile']}"
            args = {k: v for k, v in e.items() if k not in ("engine",)}
            events.append({"ph": "X", "pid": npu, "tid": tid, "name": name, "ts": cursor + e["start"] / clock,
                           "dur": (e["end"] - e["start"]) / clock, "args": args})
        cursor += span
    tail = max(0.0, wall_us - prev_end_wall)
    if tail > 0:
        events.append({"ph": "X", "pid": host, "tid": 0, "name": "host", "ts": cursor, "dur": tail,
                       "args": {"wall_us": tail}})
    for tid, label in sorted(tids.items()):
        events.append({"ph": "M", "pid": npu, "tid": tid, "name": "thread_name", "args": {"name": label}})
        events.append({"ph": "M", "pid": npu, "tid": tid, "name": "thread_sort_index", "args": {"sort_index": tid}})
    return {"traceEvents": events, "displayTimeUnit": "ns",
            "otherData": {"tool": PROG, "hw": hw.spec, "note": "NPU spans are simulated (cycles / clock); "
                          "host spans are measured wall time between Torq dispatch calls"}}


# --------------------------------------------------------------------------
# Report


def write_report(directory: str, fig: dict, stats: list[dict]) -> list[str]:
    """PNG plots and summary.md in `directory`; returns the paths written."""
    import matplotlib

    matplotlib.use("Agg")
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as e:
        raise ToolError(f"cannot create report directory {directory}: {e.strerror or e}") from None
    hw = TorqHw.from_dict(fig["hw"])
    written = [_plot_cycles_vs_roofline(os.path.join(directory, "cycles_vs_roofline.png"), fig, hw),
               _plot_lram_occupancy(os.path.join(directory, "lram_occupancy.png"), stats, hw)]
    path = os.path.join(directory, "summary.md")
    _write_files([(path, "\n".join(_summary_markdown(fig, hw)).encode(), False)])
    return written + [path]


def _plot_cycles_vs_roofline(path: str, fig: dict, hw: TorqHw) -> str:
    """Cycles against roofline, per Torq dispatch."""
    import matplotlib.pyplot as plt

    torq = [d for d in fig["dispatches"] if d["executor"] == "torq"]
    fig1, ax = plt.subplots(figsize=(9, 0.45 * max(4, len(torq)) + 1.5))
    names = [f"{i}: {d['name'][-40:]}" for i, d in enumerate(torq)]
    ys = range(len(torq))
    ax.barh([y + 0.2 for y in ys], [d["cycles"] for d in torq], height=0.4, label="simulated cycles")
    ax.barh([y - 0.2 for y in ys], [d["roofline_cycles"] for d in torq], height=0.4, label="roofline cycles")
    for y, d in zip(ys, torq):
        ax.text(d["cycles"], y + 0.2, f" {100 * d['efficiency']:.0f}%", va="center", fontsize=8)
    ax.set_yticks(list(ys), names, fontsize=8)
    ax.invert_yaxis()
    if torq and max(d["cycles"] for d in torq) > 50 * max(1, min(d["cycles"] for d in torq)):
        ax.set_xscale("log")
    ax.set_xlabel("cycles")
    ax.set_title(f"Torq dispatches of @{fig['function']}: simulated vs roofline ({hw.spec})")
    ax.legend(loc="lower right", fontsize=8)
    fig1.tight_layout()
    saved = _save(fig1, path)
    plt.close(fig1)
    return saved


def _plot_lram_occupancy(path: str, stats: list[dict], hw: TorqHw) -> str:
    """Engines and LRAM occupancy over time, for the dispatch with the most cycles."""
    import matplotlib.pyplot as plt

    heavy = max((s for s in stats if s.get("executor") == "torq"), key=lambda s: s["cycles"], default=None)
    fig2, (ax1, ax2) = plt.subplots(2, 1, figsize=(10, 6), sharex=True, gridspec_kw={"height_ratios": [1, 2]})
    if heavy is not None and heavy.get("timeline"):
        tl = heavy["timeline"]
        engines = sorted({e["engine"] for e in tl["events"]}, key=lambda x: _engine_tid(x)[0])
        for row, eng in enumerate(engines):
            bars = [(e["start"], e["end"] - e["start"]) for e in tl["events"] if e["engine"] == eng]
            ax1.broken_barh(bars, (row - 0.4, 0.8), color=f"C{row}")
        ax1.set_yticks(range(len(engines)), [_engine_tid(e)[1] for e in engines])
        tiles = heavy["tiles"]
        ax1.set_title(f"{heavy['name']}: {heavy['cycles']:,} cycles, {tiles} tile{'' if tiles == 1 else 's'}")
        occ = tl["lram_occupancy"]
        top = max([b for _, b in occ] + [heavy["lram_peak_bytes"], 1])
        budget = hw.available_lram_bytes
        ax2.step([t for t, _ in occ], [b / 1024 for _, b in occ], where="post", label="live LRAM (in time)")
        ax2.axhline(heavy["lram_peak_bytes"] / 1024, color="C1", ls="--", label="LRAM peak (program order)")
        if budget <= 2 * top:
            ax2.axhline(budget / 1024, color="C3", ls=":", label="budget")
            top = max(top, budget)
        ax2.set_ylim(0, top / 1024 * 1.15)
        ax2.set_title(f"LRAM occupancy (budget {budget / 1024:,.1f} KiB)", fontsize=10)
        ax2.legend(loc="upper right", fontsize=8)
    else:
        ax1.text(0.5, 0.5, "no Torq dispatch", ha="center", transform=ax1.transAxes)
    ax2.set_xlabel("cycle")
    ax2.set_ylabel("KiB")
    fig2.tight_layout()
    saved = _save(fig2, path)
    plt.close(fig2)
    return saved


def _summary_markdown(fig: dict, hw: TorqHw) -> list[str]:
    """summary.md's lines: totals, the per-dispatch table, the per-layer report and the plots."""
    t = fig["total"]
    md = [f"# {PROG}: @{fig['function']} of `{os.path.basename(fig['module'])}`", "",
          f"Device: {hw.spec} ({hw.slices} slices, {hw.clock_mhz} MHz, LRAM {hw.lram_kb} KiB). "
          f"Host wall time per call: mean {_fmt_time(fig['wall_us']['mean'])}, median "
          f"{_fmt_time(fig['wall_us']['median'])}, stddev {_fmt_time(fig['wall_us']['stddev'])} "
          f"({fig['repetitions']} repetitions).", "",
          "| total | value |", "|---|---|",
          f"| cycles | {t['cycles']:,} |", f"| latency | {t['latency_us']:,.3f} µs |",
          f"| DMA bytes in / out | {t['dma_bytes_in']:,} / {t['dma_bytes_out']:,} |",
          f"| compulsory bytes | {t['compulsory_bytes']:,} |",
          f"| DDR traffic ratio | {t['ddr_traffic_ratio']:.3f} |",
          f"| LRAM peak | {t['lram_peak_bytes']:,} B |", f"| MACs | {t['macs']:,} |",
          f"| roofline cycles | {t['roofline_cycles']:,} |", f"| cycle efficiency | {100 * t['efficiency']:.1f}% |",
          f"| host portion (wall) | {_fmt_time(t['host_wall_us'])} |", "",
          "| # | dispatch | executor | tiles | cycles | time | share | DMA in (B) | DMA out (B) | LRAM peak (B) | "
          "efficiency |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for i, d in enumerate(fig["dispatches"]):
        if d["executor"] == "torq":
            md.append(f"| {i} | `{d['name']}` | torq | {d['tiles']} | {d['cycles']:,} | {_fmt_time(d['latency_us'])} "
                      f"| {100 * d['share']:.1f}% | {d['dma_bytes_in']:,} | {d['dma_bytes_out']:,} | "
                      f"{d['lram_peak_bytes']:,} | {100 * d['efficiency']:.1f}% |")
        else:
            md.append(f"| {i} | host* | host | - | - | {_fmt_time(d['wall_us'])} wall | {100 * d['share']:.1f}% "
                      "| - | - | - | - |")
    md += ["", f"\\* {HOST_NOTE}.", ""]
    if "layers" in fig:
        md += layer_report.markdown_lines(fig["layers"], fig["summary"])
    md += ["![cycles vs roofline](cycles_vs_roofline.png)", "", "![LRAM occupancy](lram_occupancy.png)", ""]
    return md


def _write_files(writes: list[tuple[str, bytes, bool]]) -> None:
    """`tools._write_outputs` (atomic), then the usual permissions (its temporaries are 0600)."""
    _write_outputs(writes)
    umask = os.umask(0)
    os.umask(umask)
    for path, _, _ in writes:
        try:
            os.chmod(path, 0o666 & ~umask)
        except OSError:
            pass


def _save(figure, path: str) -> str:
    try:
        figure.savefig(path, dpi=110)
    except OSError as e:
        raise ToolError(f"cannot write {path}: {e.strerror or e}") from None
    return path


# --------------------------------------------------------------------------
# Entry point


def _run(args: argparse.Namespace, parser: _Parser) -> int:
    if args.torq_hw == "list":
        print(describe_presets())
        return 0
    hw = check_common_args(args, parser)
    if args.repetitions < 1:
        raise ToolError(f"--benchmark_repetitions must be at least 1, got {args.repetitions}")
    inputs = [parse_input(text, i) for i, text in enumerate(args.input)]

    from .api import load

    module = load(args.module, hw=hw, parameters=args.parameters)
    samples: list[float] = []
    try:
        module.record_timeline = bool(args.trace_path or args.report_dir)
        progress = None
        if sys.stdout.isatty() and args.repetitions > 1:
            from rich.progress import Progress

            progress = Progress(transient=True)
        try:
            if progress is not None:
                progress.start()
                task = progress.add_task(f"@{args.function}", total=args.repetitions + 1)
            module.call_raw(args.function, *inputs)  # warm-up: parses executables
            for _ in range(args.repetitions):
                if progress is not None:
                    progress.advance(task)
                module.call_raw(args.function, *inputs)
                samples.append(module.last_wall_us)
        finally:
            if progress is not None:
                progress.stop()
        stats = list(module.last_stats)
        wall = module.last_wall_us
    except InputError as e:
        raise input_flag_error(e, args.input) from None
    finally:
        module.close()

    device = _hw_of(stats, hw)
    fig = build_figures(stats, wall, samples, device, args.module, args.function)
    records = layer_report.read_dispatch_records(args.module, args.function)
    fig["layers"] = layer_report.layer_rows(records, stats, wall, device)
    fig["summary"] = layer_report.network_summary(fig["layers"], stats, wall, device)
    writes = []
    if args.csv_path:
        writes.append((args.csv_path, layer_report.csv_text(fig["layers"]).encode(), False))
    if args.json_path:
        writes.append((args.json_path, (json.dumps(fig, indent=1) + "\n").encode(), False))
    if args.trace_path:
        writes.append((args.trace_path, json.dumps(build_trace(stats, wall, device)).encode(), False))
    _write_files(writes)
    if args.report_dir:
        write_report(args.report_dir, fig, stats)
    print_benchmark(fig)
    print("\n" + "\n".join(layer_report.summary_lines(fig["summary"])))
    sys.stdout.flush()
    return 0


def benchmark_module_main(argv: Sequence[str] | None = None) -> int:
    """The `torq-benchmark-module` console script; returns the exit code."""
    return tool_main(PROG, _parser(), _run, argv)


if __name__ == "__main__":
    sys.exit(benchmark_module_main())
