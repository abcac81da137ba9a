"""Per-dispatch tables for the CLI tools and samples (rich)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table


def print_dispatch_table(report, stats: list[dict], console: Console | None = None) -> None:
    """One row per dispatch: executor, tiles, LRAM peak, DMA bytes, MACs, cycles, efficiency vs roofline.

    `report` is the compiler's TargetReport (every dispatch, torq or host);
    `stats` the runtime's per-call counters of NPU dispatches, in call order.
    """
    if console is None:
        # Piped output (CI logs, files) would wrap at 80 columns and truncate names.
        probe = Console()
        console = probe if probe.is_terminal else Console(width=160)
    by_name: dict[str, dict] = {}
    for s in stats:
        by_name.setdefault(s.get("name", ""), s)
    t = Table(title="dispatches")
    for col in ("dispatch", "executor", "tiles", "LRAM peak (B)", "DMA in (B)", "DMA out (B)", "MACs",
                "cycles", "efficiency", "note"):
        t.add_column(col, justify="left" if col in ("dispatch", "executor", "note") else "right")
    totals = [0, 0, 0, 0]
    roofline = 0
    for d in report.dispatches:
        s = by_name.get(d.name)
        if d.executor == "torq" and s is not None:
            vals = [s.get("dma_bytes_in", 0), s.get("dma_bytes_out", 0), s.get("macs", 0), s.get("cycles", 0)]
            totals = [a + b for a, b in zip(totals, vals)]
            roofline += s.get("roofline_cycles", 0)
            t.add_row(d.name, "torq", str(s.get("tiles", d.tiles)), f"{s.get('lram_peak_bytes', 0):,}",
                      *(f"{v:,}" for v in vals), f"{100 * s.get('efficiency', 0.0):.1f}%", "")
        else:
            t.add_row(d.name, d.executor, "-", "-", "-", "-", "-", "-", "-", d.reason[:60])
    eff = f"{100 * roofline / totals[3]:.1f}%" if totals[3] else "-"
    t.add_row("total", "", "", "", *(f"{v:,}" for v in totals), eff, "", end_section=True)
    console.print(t)
    n_torq = sum(d.executor == "torq" for d in report.dispatches)
    console.print(f"{n_torq} dispatches on torq, {len(report.dispatches) - n_torq} on host")
