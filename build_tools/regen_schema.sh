#!/usr/bin/env bash
# Regenerates contract/schemas/torq_fb/ (the Python FlatBuffers code for the Torq
# executable) from contract/schemas/torq_executable.fbs. Run after editing the
# schema and commit the result. Uses $FLATC or `flatc` (checked in with 2.0.8).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
flatc="${FLATC:-flatc}"
schemas="$root/contract/schemas"
version="$("$flatc" --version)"
if [[ "$version" != *"2.0.8"* ]]; then
  echo "note: generated code was committed with flatc 2.0.8, this is: $version" >&2
fi
rm -rf "$schemas/torq_fb"
"$flatc" --python -o "$schemas" "$schemas/torq_executable.fbs"
# flatc emits absolute `from torq_fb.X import X`; the package is imported as
# torq.contract.schemas.torq_fb, so make those imports package-relative.
sed -i -E 's/^( *)from torq_fb\.([A-Za-z0-9_]+) import /\1from .\2 import /' "$schemas"/torq_fb/*.py
if grep -rn "torq_fb\." "$schemas"/torq_fb/*.py | grep -n import; then
  echo "error: absolute torq_fb imports left in generated code" >&2
  exit 1
fi
echo "regenerated $schemas/torq_fb"
