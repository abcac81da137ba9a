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
pip install -e ".[torch,test,ray]"  # ray: torq-sweep --ray, tested on a local Ray
# Before iree-torq used IREE's own launcher (python/_torq_iree_compile_hook.py), it shipped a
# bin/iree-compile over IREE's, and the reinstall above deleted it along with the old iree-torq.
# Put IREE's back, byte for byte what pip writes for iree-base-compiler's console script (its
# RECORD hash), rather than reinstalling 350 MB of IREE.
if ! grep -qx "from iree.compiler.tools.scripts.iree_compile.__main__ import main" .venv/bin/iree-compile 2>/dev/null; then
  cat > .venv/bin/iree-compile <<EOF
#!$PWD/.venv/bin/python
# -*- coding: utf-8 -*-
import re
import sys
from iree.compiler.tools.scripts.iree_compile.__main__ import main
if __name__ == '__main__':
    sys.argv[0] = re.sub(r'(-script\.pyw|\.exe)?\$', '', sys.argv[0])
    sys.exit(main())
EOF
  chmod +x .venv/bin/iree-compile
fi
# torch's PT2E quantization (tests/e2e/test_pt2e_int8.py): torchao's own pins would replace torch.
pip install "torchao==0.18.0" --no-deps
echo "$want" > "$stamp"
