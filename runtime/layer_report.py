"""Per-layer report in Arm Vela's style: one row per dispatch and a network summary.

Contract:
- `read_dispatch_records(vmfb, function)`: the compile record of the
  function's dispatches (contract/dispatch_records.py; NPU and host, in
  program order) from the .vmfb's reflection, or None for a module compiled
  without it.
- `layer_rows(records, stats, wall_us, hw)`: one dict per dispatch with the
  `COLUMNS` fields, in program order (without records: the Torq dispatches of
  `stats`, in call order). `stats` are one call's `last_stats`, `wall_us` its
  host wall time, `hw` the device. NPU rows: cycles, cycles_pct (share of the
  network's NPU cycles; they sum to 100), time_us (simulated latency at the
  device clock), MACs (the compiler's count of the model's MACs, else the
  simulator's), mac_util_pct (MACs / (cycles x the device's MACs per cycle
  at the dispatch's dtype, all slices: `DispatchStats.peak_macs_per_cycle`)),
  LRAM peak and its share of the LRAM budget (`TorqHw.available_lram_bytes`),
  DMA bytes in / out and the DDR traffic ratio ((in + out) / compulsory).
  Host rows: the simulated fields are None; time_us is the measured wall
  time of the host segment the dispatch runs in (between the Torq calls
  around it; VM and buffer work included), given on the segment's first host
  dispatch and None on the others, whose note names that first one.
- `network_summary(rows, stats, wall_us, hw)`: Vela's summary: inferences/s
  from the simulated NPU latency at the device clock (and with the host's
  measured wall time added), DDR MB (10^6 B) per inference, achieved TOPS
  (2 ops per MAC over the NPU latency), NPU MAC utilisation, and the NPU /
  host split of dispatches, time and MACs.
- `csv_text(rows)` (header `COLUMNS`; None as an empty cell),
  `markdown_lines(rows, summary)` and `summary_lines(summary)` render them.
"""

from __future__ import annotations

import csv
import io

from torq.contract import dispatch_records
from torq.contract.hw import TorqHw

COLUMNS = ("index", "name", "executor", "source", "ops", "cycles", "cycles_pct", "time_us", "macs",
           "mac_util_pct", "lram_peak_bytes", "lram_pct", "dma_bytes_in", "dma_bytes_out", "traffic_ratio", "note")
_SUMMED = ("cycles", "latency_us", "dma_bytes_in", "dma_bytes_out", "compulsory_bytes", "macs", "sim_wall_us")
HOST_TIME_NOTE = ("host time: measured wall time of the host segment (between the Torq calls around it, VM and "
                  "buffer work included), on the segment's first host dispatch")


def read_dispatch_records(vmfb: str | bytes, function: str) -> list[dict] | None:
    """The function's dispatch records from the .vmfb (a path or its bytes), or None."""
    import iree.runtime as rt

    instance = rt.VmInstance()
    try:
        module = (rt.VmModule.copy_buffer(instance, vmfb) if isinstance(vmfb, bytes)
                  else rt.VmModule.mmap(instance, vmfb))
        fn = module.lookup_function(function)
    except (OSError, RuntimeError, ValueError):
        return None
    return dispatch_records.from_reflection(fn.reflection) if fn is not None else None


def _stats_by_name(stats: list[dict]) -> dict[str, dict]:
    """One call's Torq stats by program name; a dispatch called more than once is summed."""
    out: dict[str, dict] = {}
    for s in stats:
        if s.get("executor", "torq") != "torq":
            continue
        d = out.get(s["name"])
        if d is None:
            out[s["name"]] = dict(s)
            continue
        for k in _SUMMED:
            d[k] = d.get(k, 0) + s.get(k, 0)
        d["lram_peak_bytes"] = max(d["lram_peak_bytes"], s["lram_peak_bytes"])
        d["sim_end_us"] = s.get("wall_start_us", 0.0) + s.get("sim_wall_us", 0.0)
    return out


def _pct(part: float, whole: float) -> float | None:
    return round(100.0 * part / whole, 3) if whole else None


def _npu_row(record: dict, s: dict | None, total_cycles: int, hw: TorqHw) -> dict:
    row = {"executor": "torq", "note": ""}
    if s is None:
        return {**row, "note": "not called in this run"}
    macs = record.get("macs")
    macs = s["macs"] if macs is None else macs
    peak = s.get("peak_macs_per_cycle", 0)
    ratio = (s["dma_bytes_in"] + s["dma_bytes_out"]) / s["compulsory_bytes"] if s["compulsory_bytes"] else None
    return {**row, "cycles": s["cycles"], "cycles_pct": _pct(s["cycles"], total_cycles),
            "time_us": round(s["latency_us"], 3), "macs": macs,
            "mac_util_pct": _pct(macs, s["cycles"] * peak) if peak and macs else None,
            "lram_peak_bytes": s["lram_peak_bytes"], "lram_pct": _pct(s["lram_peak_bytes"], hw.available_lram_bytes),
            "dma_bytes_in": s["dma_bytes_in"], "dma_bytes_out": s["dma_bytes_out"],
            "traffic_ratio": round(ratio, 4) if ratio is not None else None}


def _host_segments(records: list[dict], by_name: dict[str, dict],
                   wall_us: float) -> dict[str, tuple[float | None, str]]:
    """Host dispatch name -> (wall time of its segment or None, first host dispatch of the segment).

    A segment is the host time between two Torq calls (before the first, after the last);
    the host dispatches between two NPU dispatches in program order run in it."""
    out: dict[str, tuple[float | None, str]] = {}
    pending: list[str] = []
    prev_end = 0.0

    def close(end: float) -> None:
        for k, name in enumerate(pending):
            out[name] = (max(0.0, end - prev_end) if k == 0 else None, pending[0])
        pending.clear()

    for r in records:
        if r["executor"] != "torq":
            pending.append(r["name"])
            continue
        s = by_name.get(r["name"])
        if s is None:
            continue
        start = s.get("wall_start_us", prev_end)
        close(start)
        prev_end = s.get("sim_end_us", start + s.get("sim_wall_us", 0.0))
    close(wall_us)
    return out


def layer_rows(records: list[dict] | None, stats: list[dict], wall_us: float, hw: TorqHw) -> list[dict]:
    """One row per dispatch (see module docstring)."""
    by_name = _stats_by_name(stats)
    if records is None:  # a module without the compile record: its Torq dispatches as called
        records = [{"name": n, "executor": "torq", "ops": "", "macs": None, "source": s.get("source", ""),
                    "reason": ""} for n, s in by_name.items()]
    known = {r["name"] for r in records}
    records = records + [{"name": n, "executor": "torq", "ops": "", "macs": None, "source": s.get("source", ""),
                          "reason": ""} for n, s in by_name.items() if n not in known]
    total_cycles = sum(s["cycles"] for s in by_name.values())
    segments = _host_segments(records, by_name, wall_us)
    rows = []
    for i, r in enumerate(records):
        row = {c: None for c in COLUMNS}
        row.update(index=i, name=r["name"], source=r.get("source") or "", ops=r.get("ops") or "")
        if r["executor"] == "torq":
            s = by_name.get(r["name"])
            row.update(_npu_row(r, s, total_cycles, hw))
            if not row["source"] and s is not None:
                row["source"] = s.get("source", "")
        else:
            wall, first = segments.get(r["name"], (None, r["name"]))
            note = r.get("reason") or ""
            if first != r["name"]:
                note = f"host time with {first}; {note}" if note else f"host time with {first}"
            row.update(executor="host", macs=r.get("macs"), time_us=round(wall, 3) if wall is not None else None,
                       note=note)
        rows.append(row)
    return rows


def network_summary(rows: list[dict], stats: list[dict], wall_us: float, hw: TorqHw) -> dict:
    """Vela's network summary (see module docstring)."""
    npu = [r for r in rows if r["executor"] == "torq" and r["cycles"] is not None]
    host = [r for r in rows if r["executor"] == "host"]
    by_name = _stats_by_name(stats)
    cycles = sum(r["cycles"] for r in npu)
    latency_us = sum(s["latency_us"] for s in by_name.values())
    host_us = max(0.0, wall_us - sum(s.get("sim_wall_us", 0.0) for s in by_name.values()))
    npu_macs = sum(r["macs"] or 0 for r in npu)
    host_macs = sum(r["macs"] or 0 for r in host)
    peak_cycles = sum(s["cycles"] * s.get("peak_macs_per_cycle", 0) for s in by_name.values())
    ddr = sum(s["dma_bytes_in"] + s["dma_bytes_out"] for s in by_name.values())
    return {
        "device": hw.spec, "clock_mhz": hw.clock_mhz, "slices": hw.slices,
        "npu_cycles": cycles, "npu_latency_us": round(latency_us, 3),
        "inferences_per_s": round(1e6 / latency_us, 3) if latency_us else None,
        "host_wall_us": round(host_us, 3),
        "inferences_per_s_with_host": round(1e6 / (latency_us + host_us), 3) if latency_us + host_us else None,
        "ddr_mb_per_inference": round(ddr / 1e6, 6),
        "achieved_tops": round(2 * npu_macs / (latency_us * 1e6), 6) if latency_us else None,
        "npu_mac_util_pct": _pct(npu_macs, peak_cycles),
        "npu_dispatches": len([r for r in rows if r["executor"] == "torq"]), "host_dispatches": len(host),
        "npu_time_pct": _pct(latency_us, latency_us + host_us),
        "npu_macs": npu_macs, "host_macs": host_macs, "npu_mac_pct": _pct(npu_macs, npu_macs + host_macs),
    }


def _cell(v) -> str:
    return "" if v is None else str(v)


def csv_text(rows: list[dict]) -> str:
    """The rows as CSV, header `COLUMNS`; a None field is an empty cell."""
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(COLUMNS)
    for r in rows:
        w.writerow([_cell(r[c]) for c in COLUMNS])
    return out.getvalue()


def summary_lines(s: dict) -> list[str]:
    """The network summary as text lines (printed by the tool, and in summary.md)."""
    def opt(v, fmt):
        return "-" if v is None else format(v, fmt)

    return [
        f"Network summary ({s['device']}, {s['slices']} slices, {s['clock_mhz']} MHz):",
        f"  NPU cycles            {s['npu_cycles']:,} ({s['npu_latency_us']:,.3f} us simulated)",
        f"  inferences/s          {opt(s['inferences_per_s'], ',.1f')} (NPU latency); "
        f"{opt(s['inferences_per_s_with_host'], ',.1f')} with the measured host time",
        f"  DDR MB / inference    {s['ddr_mb_per_inference']:.6f} (DMA in + out, 10^6 B)",
        f"  achieved TOPS         {opt(s['achieved_tops'], '.6f')} (2 ops per MAC over the NPU latency)",
        f"  NPU MAC utilisation   {opt(s['npu_mac_util_pct'], '.1f')}%",
        f"  NPU / host dispatches {s['npu_dispatches']} / {s['host_dispatches']}",
        f"  NPU / host time       {s['npu_latency_us']:,.3f} us simulated / {s['host_wall_us']:,.3f} us wall "
        f"(NPU {opt(s['npu_time_pct'], '.1f')}%)",
        f"  NPU / host MACs       {s['npu_macs']:,} / {s['host_macs']:,} (NPU {opt(s['npu_mac_pct'], '.1f')}%)",
    ]


def markdown_lines(rows: list[dict], summary: dict) -> list[str]:
    """The per-layer table and the network summary as markdown (summary.md)."""
    md = ["## Per-layer report", "", "```", *summary_lines(summary), "```", "",
          "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in rows:
        cells = [_cell(r[c]).replace("|", "\\|") for c in COLUMNS]
        md.append("| " + " | ".join(cells) + " |")
    md += ["", f"cycles_pct: share of the network's NPU cycles; time_us: simulated latency (torq), {HOST_TIME_NOTE} "
           "(host); mac_util_pct: MACs / (cycles x peak MACs per cycle at the dispatch's dtype); lram_pct: of the "
           "LRAM budget; traffic_ratio: DMA bytes / compulsory bytes.", ""]
    return md
