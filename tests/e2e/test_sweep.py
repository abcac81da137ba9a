"""torq-sweep (python/torq/sweep.py): a tiny sweep through the process pool (and Ray when installed),
its rows against direct torq.compile + call of the same points, its files and its errors."""

import io
import json
import os
import subprocess
import sys
import time

import pytest

from torq import sweep as torq_sweep

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "samples"))

# hidden 256: its 256x256 weights exceed 32 KiB of LRAM (18 KiB usable), so that point tiles.
MODEL = "mlp:batch=2,features=64,hidden=256"
GOOD_HW = ["SL2610:lram_kb=32", "SL2610:lram_kb=512"]
BAD_HW = "SL2610:lram_kb=lots"
STRATEGIES = ["default", "seed"]


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep")
    argv = ["--model", MODEL, "--strategies", ",".join(STRATEGIES), "--vary", "lram_kb=32,512,lots",
            "--jobs", "2", "--out", str(out)]
    assert torq_sweep.main(argv) == 0
    with open(out / "sweep.json") as f:
        return out, json.load(f)


def test_one_row_per_point_and_files(swept):
    out, rows = swept
    points = {(r["hw"], r["strategy"]) for r in rows}
    assert len(rows) == len(points) == 3 * len(STRATEGIES)
    assert points == {(h, s) for h in [*GOOD_HW, BAD_HW] for s in STRATEGIES}
    for name in ("sweep.csv", "latency_vs_lram.png", "pareto.png"):
        assert (out / name).stat().st_size > 0
    with open(out / "sweep.csv") as f:
        assert f.readline().strip().split(",") == torq_sweep.FIELDS
        assert len(f.readlines()) == len(rows)


def test_bad_hw_spec_is_an_error_row(swept):
    _, rows = swept
    bad = [r for r in rows if r["hw"] == BAD_HW]
    assert len(bad) == len(STRATEGIES)
    for r in bad:
        assert r["status"] == "error" and "lram_kb" in r["error"] and r["cycles"] is None and not r["pareto"]


def test_lram_peak_within_budget(swept):
    _, rows = swept
    ok = [r for r in rows if r["status"] == "ok"]
    assert len(ok) == len(GOOD_HW) * len(STRATEGIES), [r["error"] for r in rows if r["status"] != "ok"]
    for r in ok:
        assert 0 < r["lram_peak_bytes"] <= r["lram_budget_bytes"], r
        assert r["lram_budget_bytes"] == (r["lram_kb"] - 14) * 1024
    # the smaller LRAM forces tiling: a smaller peak than at 512 KiB for the same strategy
    for s in STRATEGIES:
        small, large = (next(r for r in ok if r["hw"] == h and r["strategy"] == s) for h in GOOD_HW)
        assert small["lram_peak_bytes"] < large["lram_peak_bytes"]
    assert any(r["pareto"] for r in ok)


def test_rows_equal_direct_compile(swept):
    """Each ok row's figures against torq.compile + one call in this process (no pool, no sweep code)."""
    from run_model import build, export_mlir

    import torq

    _, rows = swept
    model, x, _ = build("mlp", batch=2, features=64, hidden=256)
    mlir = export_mlir(model, x)
    for r in (r for r in rows if r["status"] == "ok"):
        cm = torq.compile(mlir, hw=r["hw"], flags=[f"--torq-super-tiling-strategy={r['strategy']}"],
                          remarks=io.StringIO())
        cm(x.numpy())
        stats = cm.last_stats
        cycles = sum(s["cycles"] for s in stats)
        ddr = sum(s["dma_bytes_in"] + s["dma_bytes_out"] for s in stats)
        assert r["cycles"] == cycles and r["ddr_bytes"] == ddr
        assert r["latency_us"] == pytest.approx(sum(s["latency_us"] for s in stats))
        assert r["traffic_ratio"] == pytest.approx(ddr / sum(s["compulsory_bytes"] for s in stats))
        assert r["lram_peak_bytes"] == max(s["lram_peak_bytes"] for s in stats)
        assert r["npu_mac_share"] == pytest.approx(cm.report.npu_mac_share)
        assert r["host_dispatches"] == sum(d.executor == "host" for d in cm.report.dispatches)


@pytest.mark.parametrize("argv, message", [
    (["--model", "mlp", "--bogus"], "unrecognized arguments: --bogus"),
    (["--model", "mlp", "--strategies", "fastest"], "unknown strategy 'fastest'"),
    (["--model", "no_such_model", "--out", "/nonexistent"], "unknown model 'no_such_model'"),
    (["--model", "mlp", "--timeout", "0"], "--timeout must be a positive number of seconds"),
])
def test_user_errors_are_one_line(argv, message):
    proc = subprocess.run([sys.executable, "-m", "torq.sweep", *argv], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith("torq-sweep: error:") and message in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) <= 2


def test_timeout_fails_the_point_and_the_sweep_goes_on():
    """A point that cannot compile and run in 0.3 s is a failed row naming the timeout; its
    worker is killed and the next point (a bad spec, which fails at once) runs in a fresh one."""
    t0 = time.monotonic()
    rows = torq_sweep.sweep([MODEL], [GOOD_HW[1], BAD_HW], ["default"], jobs=1, timeout=0.3)
    assert [(r["hw"], r["status"]) for r in rows] == [(GOOD_HW[1], "error"), (BAD_HW, "error")]
    assert rows[0]["error"] == "timed out: still running after --timeout 0.3 s"
    assert "lram_kb" in rows[1]["error"] and not any(r["pareto"] for r in rows)
    assert time.monotonic() - t0 < 60


def test_timer_inside_the_task():
    """Ray's path: the timer runs inside the task (run_point_timed, here in this main thread)."""
    model = torq_sweep.ModelSource("slow", "", None)
    slow = lambda *a: time.sleep(5) or {}  # noqa: E731  (a point that cannot finish in time)
    t0 = time.monotonic()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(torq_sweep, "run_point", slow)
        row = torq_sweep.run_point_timed(model, GOOD_HW[1], "default", (), timeout=0.2)
    assert time.monotonic() - t0 < 2
    assert row["status"] == "error" and row["error"] == "timed out: still running after --timeout 0.2 s"


def test_ray_local_cluster(tmp_path):
    """The same points as Ray tasks on a local Ray (setup.sh installs the ray extra; skipped without it)."""
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, log_to_driver=False)
    try:
        rows = torq_sweep.sweep([MODEL], [*GOOD_HW, BAD_HW], ["default"], str(tmp_path), ray_address="auto")
        # 10 ms: no point finishes that fast (0.3 s did, once the caches the first sweep filled
        # made this MLP compile in under 0.3 s)
        timed = torq_sweep.sweep([MODEL], [GOOD_HW[1]], ["default"], ray_address="auto", timeout=0.01)
    finally:
        ray.shutdown()
    assert [(r["hw"], r["status"]) for r in rows] == [(GOOD_HW[0], "ok"), (GOOD_HW[1], "ok"), (BAD_HW, "error")]
    assert all(r["lram_peak_bytes"] <= r["lram_budget_bytes"] for r in rows[:2])
    assert (tmp_path / "sweep.csv").exists() and (tmp_path / "pareto.png").exists()
    assert timed[0]["error"] == "timed out: still running after --timeout 0.01 s"
