"""The top-level CMakeLists.txt: `ctest` lists and runs lit, pytest and the sample."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _tool(name: str) -> str:
    # The venv's bin first (the `cmake` PyPI package of the test extra); not
    # resolved, since a venv's python is a symlink out of the venv.
    local = Path(sys.executable).parent / name
    if local.is_file() and os.access(local, os.X_OK):
        return str(local)
    found = shutil.which(name)
    if not found:
        pytest.fail(f"{name} not found next to {sys.executable} or on PATH; "
                    "install the test extra (bash build_tools/setup.sh, or pip install -e '.[test]')")
    return found


def _run(cmd: list[str], timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def _configure(build: Path, *defs: str) -> Path:
    r = _run([_tool("cmake"), "-S", str(REPO), "-B", str(build), *defs], timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    return build


def _ctest(build: Path, *args: str) -> subprocess.CompletedProcess:
    return _run([_tool("ctest"), "--test-dir", str(build), *args], timeout=600)


def _results(out: str) -> dict[str, str]:
    """{test name: Passed/Failed/...} from ctest's per-test lines (its summary
    line differs between CMake 3 and 4)."""
    return dict(re.findall(r"Test\s+#\d+: (\S+) \.+\s*\**(\w+)", out))


@pytest.fixture(scope="module")
def build(tmp_path_factory) -> Path:
    return _configure(tmp_path_factory.mktemp("cmake") / "build")


def test_lists_lit_pytest_and_sample(build):
    r = _ctest(build, "-N")
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.findall(r"Test\s+#\d+: (\S+)", r.stdout) == ["lit", "pytest", "sample"]

    info = json.loads(_ctest(build, "-N", "--show-only=json-v1").stdout)
    tests = {t["name"]: t for t in info["tests"]}
    # By default the pytest entry runs the whole suite, the tests marked slow too.
    assert tests["pytest"]["command"][1:] == ["-m", "pytest", "-q", "tests"]
    for t in tests.values():
        props = {p["name"]: p["value"] for p in t["properties"]}
        assert Path(props["WORKING_DIRECTORY"]) == REPO
        assert props["TIMEOUT"] > 0 and props["LABELS"]
    venv_python = REPO / ".venv" / "bin" / "python"
    if venv_python.exists():
        assert tests["sample"]["command"][0] == str(venv_python)


@pytest.mark.slow  # 68 s: lit and the sample again, which the README's two commands run
def test_lit_and_sample_pass(build):
    r = _ctest(build, "-R", "^(lit|sample)$", "--output-on-failure")
    assert r.returncode == 0, r.stdout + r.stderr
    assert _results(r.stdout) == {"lit": "Passed", "sample": "Passed"}, r.stdout


def test_pytest_entry_runs_the_given_args(tmp_path):
    # Not the whole suite: that would run this file again, recursively.
    build = _configure(tmp_path / "build", "-DTORQ_PYTEST_ARGS=-q tests/runtime/test_executable.py")
    r = _ctest(build, "-R", "^pytest$", "-V")
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.search(r"\d+ passed", r.stdout), r.stdout
    assert _results(r.stdout) == {"pytest": "Passed"}, r.stdout


def test_failing_entry_fails_ctest(tmp_path):
    build = _configure(tmp_path / "build", "-DTORQ_PYTEST_ARGS=-q tests/no_such_test_file.py")
    r = _ctest(build, "-R", "^pytest$")
    assert r.returncode != 0, r.stdout + r.stderr
    assert _results(r.stdout) == {"pytest": "Failed"}, r.stdout
