#!/usr/bin/env bash
# The test suite: the linter (ruff, configured in pyproject.toml), lit pass tests, then
# pytest (runtime, e2e, unit) without the tests marked slow; `-m ""` runs those too,
# `-m slow` only them (a later -m wins).
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"
status=0
ruff check . || status=1
lit -q tests/compiler || status=1
python -m pytest -q tests -m "not slow" "$@" || status=1
exit $status
