"""torq-benchmark-module --csv: the per-layer report (Vela's style) of a small torch model.

The model is exported with iree-turbine from this file, so its MLIR locations name this
file's lines; the CSV must carry them to each dispatch's row. Expected MACs are computed
here from the model's shapes, the line numbers from this file's text, the per-dispatch
figures from the benchmark's own JSON (`last_stats` of the same call), never from the report.
"""

import csv
import io
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import torq
from torq.compiler.source_locations import join_frames, location_frames
from torq.contract.hw import TorqHw

BIN = os.path.dirname(sys.executable)
C_IN, C_OUT, H, W, K, N_OUT = 3, 8, 8, 8, 3, 5


class SinConvFc(torch.nn.Module):
    """sin (no NPU form: a host dispatch), a padded conv + ReLU, a Linear (NPU dispatches)."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(C_IN, C_OUT, K, padding=1)
        self.fc = torch.nn.Linear(C_OUT * H * W, N_OUT)

    def forward(self, x):
        x = torch.sin(x)  # LINE: sin
        y = torch.relu(self.conv(x))  # LINE: conv
        return self.fc(y.flatten(1))  # LINE: fc


def _line(tag: str) -> int:
    with open(__file__) as f:
        return next(i for i, text in enumerate(f, 1) if text.rstrip().endswith(f"# LINE: {tag}"))


CONV_MACS = C_OUT * H * W * C_IN * K * K  # output elements x (input channels x kernel window)
FC_MACS = N_OUT * C_OUT * H * W


def bench(*args):
    return subprocess.run([os.path.join(BIN, "torq-benchmark-module"), *args], capture_output=True, text=True)


@pytest.fixture(scope="module")
def art(tmp_path_factory):
    import iree.turbine.aot as aot

    d = tmp_path_factory.mktemp("layers")
    torch.manual_seed(0)
    x = torch.randn(1, C_IN, H, W)
    aot.export(SinConvFc().eval(), args=(x,)).save_mlir(str(d / "model.mlirbc"))  # bytecode keeps locations
    remarks = io.StringIO()
    cm = torq.compile(str(d / "model.mlirbc"), remarks=remarks)
    cm.save(d / "model.vmfb")
    np.save(d / "x.npy", x.numpy())
    r = bench(f"--module={d / 'model.vmfb'}", f"--input=@{d / 'x.npy'}", f"--csv={d / 'layers.csv'}",
              f"--json={d / 'stats.json'}", f"--report={d / 'report'}")
    assert r.returncode == 0, r.stderr
    rows = list(csv.DictReader(io.StringIO((d / "layers.csv").read_text())))
    return {"dir": d, "report": cm.report, "remarks": remarks.getvalue(), "stdout": r.stdout, "rows": rows,
            "stats": json.loads((d / "stats.json").read_text())}


def test_one_row_per_dispatch_in_program_order(art):
    rows, report = art["rows"], art["report"]
    assert [(r["name"], r["executor"]) for r in rows] == [(d.name, d.executor) for d in report.dispatches]
    assert {r["executor"] for r in rows} == {"torq", "host"}
    # NPU rows carry the simulator's figures of the same call (last_stats in the JSON).
    torq_stats = {d["name"]: d for d in art["stats"]["dispatches"] if d["executor"] == "torq"}
    npu = [r for r in rows if r["executor"] == "torq"]
    assert {r["name"] for r in npu} == set(torq_stats)
    for r in npu:
        s = torq_stats[r["name"]]
        for col in ("cycles", "lram_peak_bytes", "dma_bytes_in", "dma_bytes_out"):
            assert int(r[col]) == s[col], (r, col)


def test_cycle_shares_sum_to_100_and_host_rows_have_no_simulated_fields(art):
    npu = [r for r in art["rows"] if r["executor"] == "torq"]
    assert abs(sum(float(r["cycles_pct"]) for r in npu) - 100.0) < 0.001 * len(npu) + 1e-9
    total = sum(int(r["cycles"]) for r in npu)
    for r in npu:
        assert float(r["cycles_pct"]) == pytest.approx(100 * int(r["cycles"]) / total, abs=1e-3)
    (host,) = [r for r in art["rows"] if r["executor"] == "host"]
    for col in ("cycles", "cycles_pct", "mac_util_pct", "lram_peak_bytes", "lram_pct", "dma_bytes_in",
                "dma_bytes_out", "traffic_ratio"):
        assert host[col] == "", (col, host)
    assert float(host["time_us"]) > 0 and "math.sin" in host["note"]


def test_macs_match_the_model_shapes(art):
    by_ops = {r["ops"]: r for r in art["rows"]}
    conv = next(r for ops, r in by_ops.items() if "conv2d" in ops)
    fc = next(r for ops, r in by_ops.items() if "matmul" in ops)
    assert int(conv["macs"]) == CONV_MACS and int(fc["macs"]) == FC_MACS
    # Utilisation: MACs over cycles x the device's bf16 MACs per cycle (all slices), from TorqHw.
    device = TorqHw.from_dict(art["stats"]["hw"])
    peak = device.macs_per_cycle("bf16") * device.slices
    assert float(conv["mac_util_pct"]) == pytest.approx(100 * CONV_MACS / (int(conv["cycles"]) * peak), abs=1e-3)
    assert float(conv["lram_pct"]) == pytest.approx(
        100 * int(conv["lram_peak_bytes"]) / device.available_lram_bytes, abs=1e-3)


def test_source_names_the_model_file_and_line(art):
    rows = art["rows"]
    conv = next(r for r in rows if "conv2d" in r["ops"])
    fc = next(r for r in rows if "matmul" in r["ops"])
    host = next(r for r in rows if r["executor"] == "host")
    assert conv["source"] == f"{__file__}:{_line('conv')}"
    assert fc["source"].startswith(f"{__file__}:") and str(_line("fc")) in fc["source"].split(":")[-1].split(",")
    assert host["source"] == f"{__file__}:{_line('sin')}"
    # The compiler's remark for the host dispatch starts at that line and names it.
    (remark,) = [line for line in art["remarks"].splitlines() if "stays on host" in line]
    assert remark.startswith(f"{__file__}:{_line('sin')}: remark: dispatch ")
    assert remark.endswith(f"[source: {__file__}:{_line('sin')}]")


def test_summary_in_stdout_json_and_report(art):
    s, stats = art["stats"]["summary"], art["stats"]
    latency = sum(d["latency_us"] for d in stats["dispatches"] if d["executor"] == "torq")
    assert s["inferences_per_s"] == pytest.approx(1e6 / latency, rel=1e-4)
    ddr = sum(d["dma_bytes_in"] + d["dma_bytes_out"] for d in stats["dispatches"] if d["executor"] == "torq")
    assert s["ddr_mb_per_inference"] == pytest.approx(ddr / 1e6)
    assert s["achieved_tops"] == pytest.approx(2 * (CONV_MACS + FC_MACS) / (latency * 1e6), rel=1e-4)
    assert (s["npu_dispatches"], s["host_dispatches"]) == (len(art["rows"]) - 1, 1)
    assert s["npu_macs"] == CONV_MACS + FC_MACS and s["host_macs"] == 0
    assert stats["layers"][0].keys() >= {"name", "source", "cycles_pct", "mac_util_pct"}
    assert "inferences/s" in art["stdout"] and "achieved TOPS" in art["stdout"]
    md = (art["dir"] / "report" / "summary.md").read_text()
    assert "## Per-layer report" in md and "| index | name | executor | source |" in md
    assert f"{os.path.basename(__file__)}:{_line('conv')}" in md


@pytest.mark.parametrize("where", ["missing/layers.csv", "adir"])
def test_bad_csv_path_is_one_line_and_writes_nothing(art, tmp_path, where):
    (tmp_path / "adir").mkdir()
    target = tmp_path / where
    r = bench(f"--module={art['dir'] / 'model.vmfb'}", f"--input=@{art['dir'] / 'x.npy'}", f"--csv={target}",
              f"--json={tmp_path / 'stats.json'}")
    assert r.returncode == 1
    assert r.stderr.startswith("torq-benchmark-module: error: cannot write output ") and str(target) in r.stderr
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adir"]  # no CSV, no JSON, no temporaries
    assert not list((tmp_path / "adir").iterdir())


def test_locations_of_torch_onnx_and_fused_ops():
    torch_loc = ('loc(callsite("/m/model.py":9:0 at '
                 '"/v/lib/python3.11/site-packages/torch/_dynamo/functional_export.py":232:0))')
    assert location_frames(torch_loc) == ["/m/model.py:9"]
    nested = 'loc(callsite("/m/block.py":4:0 at callsite("/m/net.py":12:0 at "/v/site-packages/torch/x.py":1:0)))'
    assert location_frames(nested) == ["/m/block.py:4"]  # the innermost frame of the model
    assert location_frames('loc("/layer1/conv/Conv")') == ["/layer1/conv/Conv"]  # an ONNX node name
    assert location_frames('loc(fused["/a/Relu", "/m/model.py":3:1])') == ["/a/Relu", "/m/model.py:3"]
    assert location_frames("loc(unknown)") == []
    assert join_frames(["/m/a.py:9", "/m/a.py:3", "/n/Conv", "/m/b.py:1"]) == "/m/a.py:3,9; /m/b.py:1; /n/Conv"
