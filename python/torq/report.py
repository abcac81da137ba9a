"""Per-dispatch tables and summaries for the CLI tools, samples and benchmarks (rich)."""

from __future__ import annotations

import os

from rich.console import Console
from rich.table import Table


def _console(console: Console | None) -> Console:
    if console is not None:
        return console
    # Piped output (CI logs, files) would wrap at 80 columns and truncate names.
    probe = Console()
    return probe if probe.is_terminal else Console(width=160)


def mac_share_line(report) -> str:
    """'NPU share of MACs: 98.9% (146,987,008 of 148,559,872)' from the compile report, saying
    how many host dispatches of unknown MACs (dynamic shapes) the count leaves out."""
    line = (f"NPU share of MACs: {100 * report.npu_mac_share:.1f}% "
            f"({report.torq_macs:,} of {report.total_macs:,})")
    uncounted = report.uncounted_host_dispatches
    if uncounted:
        line += (f", not counting {uncounted} host dispatch{'es' if uncounted > 1 else ''} of unknown MACs "
                 f"(dynamic shapes)")
    return line


def host_dispatches(report) -> list[tuple[str, int | None, str]]:
    """(name, MACs, reason) of each dispatch left on the host, in program order."""
    return [(d.name, d.macs, d.reason) for d in report.dispatches if d.executor == "host"]


def short_source(source: str) -> str:
    """A dispatch's source in the model (`DispatchDecision.source`) with file names for paths."""
    return "; ".join(os.path.basename(part) if "/" in part.split(":")[0] and part.rsplit(":", 1)[-1][:1].isdigit()
                     else part for part in source.split("; "))


def print_host_dispatches(report, console: Console | None = None) -> None:
    """The dispatches left on the host with the compiler's reason (its remark) and their source."""
    console = _console(console)
    rows = [d for d in report.dispatches if d.executor == "host"]
    if not rows:
        console.print("no dispatch left on the host")
        return
    t = Table(title=f"{len(rows)} dispatch{'es' if len(rows) > 1 else ''} on the host")
    for col in ("dispatch", "source", "MACs", "reason"):
        t.add_column(col, justify="right" if col == "MACs" else "left", overflow="fold")
    for d in rows:
        t.add_row(d.name, short_source(d.source), "?" if d.macs is None else f"{d.macs:,}", d.reason)
    console.print(t)


def print_dispatch_table(report, stats: list[dict], console: Console | None = None) -> None:
    """One row per dispatch: executor, tiles, LRAM peak, DMA bytes, MACs, cycles, efficiency vs roofline.

    `report` is the compiler's TargetReport (every dispatch, torq or host);
    `stats` the runtime's per-call counters of NPU dispatches, in call order.
    MACs are the compiler's count of the model's MACs (compiler/macs.py), known
    for host dispatches too; the simulator's own count (padded shapes) drives
    cycles and efficiency.
    """
    console = _console(console)
    by_name: dict[str, dict] = {}
    for s in stats:
        by_name.setdefault(s.get("name", ""), s)
    t = Table(title="dispatches")
    for col in ("dispatch", "source", "executor", "tiles", "LRAM peak (B)", "DMA in (B)", "DMA out (B)", "MACs",
                "cycles", "efficiency", "note"):
        t.add_column(col, justify="left" if col in ("dispatch", "source", "executor", "note") else "right")
    dma_in = dma_out = cycles = roofline = 0
    for d in report.dispatches:
        s = by_name.get(d.name)
        macs = "?" if d.macs is None else f"{d.macs:,}"
        if d.executor == "torq" and s is not None:
            dma_in += s.get("dma_bytes_in", 0)
            dma_out += s.get("dma_bytes_out", 0)
            cycles += s.get("cycles", 0)
            roofline += s.get("roofline_cycles", 0)
            t.add_row(d.name, short_source(d.source), "torq", str(s.get("tiles", d.tiles)), f"{s.get('lram_peak_bytes', 0):,}",
                      f"{s.get('dma_bytes_in', 0):,}", f"{s.get('dma_bytes_out', 0):,}", macs,
                      f"{s.get('cycles', 0):,}", f"{100 * s.get('efficiency', 0.0):.1f}%", "")
        else:
            t.add_row(d.name, short_source(d.source), d.executor, "-", "-", "-", "-", macs, "-", "-", d.reason[:60])
    eff = f"{100 * roofline / cycles:.1f}%" if cycles else "-"
    t.add_row("total", "", "", "", "", f"{dma_in:,}", f"{dma_out:,}", f"{report.total_macs:,}", f"{cycles:,}", eff,
              "", end_section=True)
    console.print(t)
    n_torq = sum(d.executor == "torq" for d in report.dispatches)
    console.print(f"{n_torq} dispatches on torq, {len(report.dispatches) - n_torq} on host; {mac_share_line(report)}")
