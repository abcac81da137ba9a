"""torq-benchmark-module: stdout, --json, --trace, --report, and one-line errors.

A small tiled conv (linalg, f32 -> bf16 on the NPU) is compiled once per
module. Expected figures are computed here from the shapes and `TorqHw`
(compulsory bytes, MACs, roofline) or from the other figures of the same
output (totals are sums of the dispatches), never captured from a run.
"""

import json
import math
import os
import statistics
import subprocess
import sys

import numpy as np
import pytest
from mlir_inputs import TILED_CONV_F32

from torq.contract.hw import parse_hw_spec

BIN = os.path.dirname(sys.executable)
HW = "SL2610:lram_kb=24"  # small LRAM: the conv needs several tiles
CONV = TILED_CONV_F32
# Independent figures of the conv (bf16 on the NPU: 2 bytes per element).
X_BYTES = 8 * 24 * 24 * 2
W_BYTES = 16 * 8 * 3 * 3 * 2
Y_BYTES = 16 * 22 * 22 * 2
MACS = 16 * 22 * 22 * 8 * 3 * 3


def run(*args, cwd=None):
    return subprocess.run([os.path.join(BIN, "torq-benchmark-module"), *args], capture_output=True, text=True,
                          cwd=cwd)


@pytest.fixture(scope="module")
def art(tmp_path_factory):
    d = tmp_path_factory.mktemp("bench")
    (d / "conv.mlir").write_text(CONV)
    r = subprocess.run([os.path.join(BIN, "torq-compile"), str(d / "conv.mlir"), f"--torq-hw={HW}",
                        "-o", str(d / "conv.vmfb")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    np.save(d / "x.npy", np.random.default_rng(0).standard_normal((1, 8, 24, 24)).astype(np.float32))
    out = d / "out"
    r = run(f"--module={d / 'conv.vmfb'}", "--function=main", f"--input=@{d / 'x.npy'}", "--device=torq",
            "--benchmark_repetitions=2", f"--json={d / 'stats.json'}", f"--trace={d / 'trace.json'}",
            f"--report={out}")
    assert r.returncode == 0, r.stderr
    return {"dir": d, "stdout": r.stdout, "stats": json.loads((d / "stats.json").read_text()),
            "trace": json.loads((d / "trace.json").read_text()), "report": out}


def test_stdout_has_wall_stats_totals_and_table(art):
    out = art["stdout"]
    assert out.count("BM_main/real_time ") == 2
    for agg in ("mean", "median", "stddev"):
        assert f"BM_main/real_time_{agg}" in out
    for label in ("cycles", "latency", "DMA bytes in / out", "compulsory bytes", "DDR traffic ratio", "LRAM peak",
                  "MACs", "cycle efficiency", "host portion"):
        assert label in out
    assert "main_dispatch_0" in out and "host *" in out and "no per-dispatch timing" in out


def test_json_schema_and_independent_figures(art):
    s = art["stats"]
    hw = parse_hw_spec(HW)
    assert s["hw"] == hw.to_dict()
    torq = [d for d in s["dispatches"] if d["executor"] == "torq"]
    host = [d for d in s["dispatches"] if d["executor"] == "host"]
    assert len(torq) == 1 and len(host) == 1
    (d,) = torq
    for key in ("name", "executor", "tiles", "cycles", "dma_bytes_in", "dma_bytes_out", "compulsory_bytes",
                "lram_peak_bytes", "macs"):
        assert key in d and key in host[0]
    assert d["tiles"] > 2
    assert d["compulsory_bytes"] == X_BYTES + W_BYTES + Y_BYTES
    assert d["macs"] == MACS
    assert d["dma_bytes_out"] == Y_BYTES  # each output element written once
    assert d["dma_bytes_in"] >= X_BYTES + W_BYTES  # halo rows and weights re-read per tile
    assert 0 < d["lram_peak_bytes"] <= hw.available_lram_bytes
    # DESIGN §7 roofline, from the shapes: max(MACs / (64 x 2 slices), compulsory / (8 x 0.65)).
    roofline = math.ceil(max(MACS / (hw.macs_per_cycle_bf16 * hw.slices), (X_BYTES + W_BYTES + Y_BYTES) / 5.2))
    assert d["roofline_cycles"] == roofline
    assert d["cycles"] >= roofline and d["efficiency"] == pytest.approx(roofline / d["cycles"])
    assert d["latency_us"] == pytest.approx(d["cycles"] / hw.clock_mhz)
    # Engines cannot be busier than the makespan; two slices share the tiles.
    assert all(0 <= b <= d["cycles"] for b in d["engine_busy_cycles"].values())
    assert d["slices_used"] == 2
    assert host[0]["cycles"] is None and host[0]["wall_us"] >= 0


def test_json_totals_are_sums_of_parts(art):
    s = art["stats"]
    torq = [d for d in s["dispatches"] if d["executor"] == "torq"]
    t = s["total"]
    for key in ("cycles", "dma_bytes_in", "dma_bytes_out", "compulsory_bytes", "macs", "roofline_cycles"):
        assert t[key] == sum(d[key] for d in torq), key
    assert t["latency_us"] == pytest.approx(sum(d["latency_us"] for d in torq))
    assert t["lram_peak_bytes"] == max(d["lram_peak_bytes"] for d in torq)
    assert t["ddr_traffic_ratio"] == pytest.approx((t["dma_bytes_in"] + t["dma_bytes_out"]) / t["compulsory_bytes"])
    assert t["efficiency"] == pytest.approx(t["roofline_cycles"] / t["cycles"])
    host = next(d for d in s["dispatches"] if d["executor"] == "host")
    assert t["host_wall_us"] == pytest.approx(host["wall_us"])
    assert t["estimated_us"] == pytest.approx(t["latency_us"] + t["host_wall_us"])
    assert sum(d["share"] for d in s["dispatches"]) == pytest.approx(1.0)
    w = s["wall_us"]
    assert len(w["samples"]) == s["repetitions"] == 2
    assert w["mean"] == pytest.approx(float(np.mean(w["samples"])))
    assert w["median"] == pytest.approx(float(np.median(w["samples"])))
    assert w["stddev"] == pytest.approx(statistics.stdev(w["samples"]))


def test_trace_events_lie_inside_their_dispatch(art):
    tr = art["trace"]
    events = tr["traceEvents"]
    names = {(e["pid"], e.get("tid")): e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    # "slice 1" has a track when a compute runs on it alone; one split over both slices
    # (a tiling with one buffer set) is drawn on its first slice.
    assert {"dispatches", "DMA in", "DMA out", "slice 0", "host"} <= set(names.values())
    spans = [e for e in events if e["ph"] == "X" and names.get((e["pid"], e["tid"])) == "dispatches"]
    cmds = [e for e in events if e["ph"] == "X" and names.get((e["pid"], e["tid"])) in
            ("DMA in", "DMA out", "slice 0", "slice 1")]
    stats = art["stats"]
    torq = [d for d in stats["dispatches"] if d["executor"] == "torq"]
    assert len(spans) == len(torq)
    assert len(cmds) == sum(d["commands"] for d in torq)
    eps = 1e-6
    for e in cmds:
        assert e["dur"] >= 0
        assert any(s["ts"] - eps <= e["ts"] and e["ts"] + e["dur"] <= s["ts"] + s["dur"] + eps for s in spans), e
    # Dispatch spans last cycles / clock; host segments are on the host track, not overlapping them.
    hw = parse_hw_spec(HW)
    for s, d in zip(spans, torq):
        assert s["dur"] == pytest.approx(d["cycles"] / hw.clock_mhz)
    hosts = [e for e in events if e["ph"] == "X" and names.get((e["pid"], e["tid"])) == "host"]
    for h in hosts:
        for s in spans:
            assert h["ts"] + h["dur"] <= s["ts"] + eps or s["ts"] + s["dur"] <= h["ts"] + eps


def test_report_writes_plots_and_summary(art):
    out = art["report"]
    for name in ("cycles_vs_roofline.png", "lram_occupancy.png"):
        data = (out / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 1000
    md = (out / "summary.md").read_text()
    assert "main_dispatch_0" in md and "cycles_vs_roofline.png" in md and "lram_occupancy.png" in md


def test_last_stats_has_the_json_fields(art):
    import torq

    d = art["dir"]
    with torq.load(d / "conv.vmfb") as m:
        m.main(np.load(d / "x.npy"))
        (s,) = m.last_stats
    (j,) = [x for x in art["stats"]["dispatches"] if x["executor"] == "torq"]
    measured = {"share", "wall_start_us", "sim_wall_us"}  # per-run wall times and the tool's share column
    assert set(j) - measured <= set(s)
    for key in set(j) - measured:
        assert s[key] == j[key], key


@pytest.mark.parametrize("args,code,message", [
    (["--benchmark_frobnicate=1"], 2, "unrecognized arguments: --benchmark_frobnicate=1"),
    (["--input=@{d}/missing.npy"], 1, "--input #0 '@{d}/missing.npy': cannot read {d}/missing.npy"),
    (["--input=1x8x24x24xi8=0"], 1, "--input #0 '1x8x24x24xi8=0': main: input 0: expected 1x8x24x24xf32"),
    (["--input=@{d}/x.npy", "--benchmark_repetitions=0"], 1, "--benchmark_repetitions must be at least 1"),
    (["--input=@{d}/x.npy", "--device=cuda"], 1, "unsupported --device=cuda"),
    (["--input=@{d}/x.npy", "--torq-hw=XYZ"], 1, "unknown Torq hardware 'XYZ'"),
])
def test_bad_input_one_line_error(art, args, code, message):
    d = art["dir"]
    r = run(f"--module={d / 'conv.vmfb'}", *[a.format(d=d) for a in args], f"--json={d / 'bad.json'}")
    assert r.returncode == code
    assert r.stderr.startswith("torq-benchmark-module: error: ") and r.stderr.count("\n") == 1, r.stderr
    assert message.format(d=d) in r.stderr
    assert "Traceback" not in r.stderr and not (d / "bad.json").exists()


def test_missing_module_is_usage_error():
    r = run("--function=main")
    assert r.returncode == 2 and "the following argument is required: --module" in r.stderr
