#!/usr/bin/env bash
# The whole test suite: lit pass tests, then pytest (runtime, e2e).
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"
status=0
lit -q tests/compiler || status=1
python -m pytest -q tests "$@" || status=1
exit $status
