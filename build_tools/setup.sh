#!/usr/bin/env bash
# Idempotent setup: a .venv with torch 2.13.0 (CPU, first, so nothing pulls a
# CUDA build), the pinned IREE packages and this package (editable).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
stamp=.venv/.torq-setup-stamp
want=$(cat pyproject.toml build_tools/setup.sh | sha256sum | cut -c1-16)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
pip() { .venv/bin/python -m pip "$@" --disable-pip-version-check -q; }
pip install "torch==2.13.0"
pip install "iree-base-compiler==3.13.0" "iree-base-runtime==3.13.0" "iree-turbine==3.9.0"
pip install -e ".[torch,test]"
# torch's PT2E quantization (tests/e2e/test_pt2e_int8.py): torchao's own pins would replace torch.
pip install "torchao==0.18.0" --no-deps
echo "$want" > "$stamp"
