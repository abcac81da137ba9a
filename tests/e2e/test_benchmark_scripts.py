"""Smoke tests of build_tools/benchmarks/run.py and tiling.py on tiny models (quick sizes)."""

import os
import re
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
BENCH = os.path.join(ROOT, "build_tools", "benchmarks")
sys.path.insert(0, os.path.join(ROOT, "samples"))
from cnn import within_limits  # noqa: E402


def _run(script: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, os.path.join(BENCH, script), *args], capture_output=True, text=True,
                          timeout=300)


def _rows(text: str, prefix: str) -> list[list[str]]:
    return [[c.strip() for c in line.strip("|").split("|")] for line in text.splitlines() if line.startswith(prefix)]


def test_run_quick_mlp(tmp_path):
    out = tmp_path / "RESULTS.md"
    proc = _run("run.py", "--quick", "--models", "mlp", "--output", str(out))
    assert proc.returncode == 0, proc.stderr[-2000:]
    text = out.read_text()
    assert "Machine:" in text and "iree-base-compiler 3.13.0" in text
    header = _rows(text, "| model")[0]
    (row,) = _rows(text, "| mlp")
    assert len(header) == len(row)
    fields = dict(zip(header, row))  # the later of the two "ratio" columns: simulator vs llvm-cpu run
    assert re.fullmatch(r"\d+\.\d×", row[header.index("ratio")])  # torq-compile vs iree-compile
    assert fields["NPU share of MACs"] == "100.0%"  # three Linear layers, all on the NPU
    assert fields["dispatches torq/host"] == "3/0"
    assert within_limits(float(fields["rel L2 vs torch"]), float(fields["cosine vs torch"]))
    assert int(fields["simulated cycles"].replace(",", "")) > 0
    assert re.fullmatch(r"\d+\.\d×", fields["ratio"])


def test_tiling_quick_mlp_with_a_failing_budget(tmp_path):
    out = tmp_path / "RESULTS-tiling.md"
    # 15 KiB leaves 1 KiB usable: the seed strategy cannot fit the matmul; with the
    # host fallback its dispatch is counted as refused and the run goes on.
    proc = _run("tiling.py", "--quick", "--models", "mlp", "--budgets", "15,64", "--strategies", "seed,default",
                "--no-depth", "--output", str(out))
    assert proc.returncode == 0, proc.stderr[-2000:]
    text = out.read_text()
    rows = _rows(text, "| mlp")
    assert [(r[1].split()[0], r[2]) for r in rows] == [("15", "seed"), ("15", "default"), ("64", "seed"),
                                                       ("64", "default")]
    refused, run_overflows = (int(x) for x in rows[0][8].split(" / "))
    assert refused >= 1 and run_overflows == 0
    for r in rows[1:]:
        ratio, peak_kib = float(r[3]), int(r[6])
        refused, overflows = (int(x) for x in r[8].split(" / "))
        assert ratio >= 1.0 and overflows == 0 and refused == 0
        assert peak_kib <= int(r[1].split("(")[1].rstrip(")"))  # peak within the usable budget
