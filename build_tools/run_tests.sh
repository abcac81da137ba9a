#!/usr/bin/env bash
# The test suite: the linter (ruff, configured in pyproject.toml), lit pass tests, then
# pytest (runtime, e2e, unit) without the tests marked slow; `-m ""` runs those too,
# `-m slow` only them (a later -m wins). Pytest runs one worker per core, four at most
# (pytest-xdist; `-n 0` runs in this process): on CI's two cores the suite takes 15 min
# instead of 23.
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"
status=0
ruff check . || status=1
lit -q tests/compiler || status=1
workers=(-n auto --maxprocesses=4)
python -c "import xdist" 2>/dev/null || workers=()  # a venv set up before pytest-xdist was a test dependency
python -m pytest -q tests -m "not slow" ${workers[@]+"${workers[@]}"} "$@" || status=1
exit $status
