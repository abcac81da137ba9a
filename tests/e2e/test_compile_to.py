"""`--compile-to=torq-hl|nss`: stop inside the Torq dispatch pipeline and print it.

The printed module must be what the next Torq pass consumes: continuing it
with torq-opt gives the same NSS program as compiling straight to `nss`.
"""

import os
import subprocess
import sys

from mlir_inputs import conv_f32_ops

BIN = os.path.dirname(sys.executable)
# CONV_F32's conv, and a sin of a second input that has no Torq lowering.
MODEL = """
func.func @main(%x: tensor<1x4x10x10xf32>, %y: tensor<1x8x8x8xf32>) -> (tensor<1x8x8x8xf32>, tensor<1x8x8x8xf32>) {
""" + conv_f32_ops(4, 8, 10, 0.125) + """  %t = linalg.generic {indexing_maps = [affine_map<(a, b, c, d) -> (a, b, c, d)>, affine_map<(a, b, c, d) -> (a, b, c, d)>],
       iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%y : tensor<1x8x8x8xf32>) outs(%e : tensor<1x8x8x8xf32>) {
  ^bb0(%in: f32, %o: f32):
    %s = math.sin %in : f32
    linalg.yield %s : f32
  } -> tensor<1x8x8x8xf32>
  return %c, %t : tensor<1x8x8x8xf32>, tensor<1x8x8x8xf32>
}
"""


def run(tool, *args):
    return subprocess.run([os.path.join(BIN, tool), *args], capture_output=True, text=True)


def test_compile_to_torq_hl_then_nss(tmp_path):
    src = tmp_path / "m.mlir"
    src.write_text(MODEL)
    hl = run("torq-compile", str(src), "--compile-to=torq-hl")
    assert hl.returncode == 0, hl.stderr
    # The conv is one TorqHL op with LRAM addresses; the sin stays on host (no Torq lowering) with a remark.
    assert hl.stdout.count('"torq_hl.conv2d"') == 1 and "torq.lram_operands" in hl.stdout
    assert "linalg." not in hl.stdout and "torq_nss." not in hl.stdout
    assert "remark: dispatch main_dispatch_1 stays on host" in hl.stderr and "math.sin" in hl.stderr
    (tmp_path / "hl.mlir").write_text(hl.stdout)
    cont = run("torq-opt", str(tmp_path / "hl.mlir"), "--pass-pipeline=builtin.module(torq-build-nss-program)")
    assert cont.returncode == 0, cont.stderr
    nss = run("torq-compile", str(src), "--compile-to=nss")
    assert nss.returncode == 0, nss.stderr
    assert "torq_nss.compute" in nss.stdout and "torq_hl." not in nss.stdout
    assert cont.stdout.strip() == nss.stdout.strip()


def test_compile_to_torq_phase_needs_torq_target(tmp_path):
    src = tmp_path / "m.mlir"
    src.write_text(MODEL)
    r = run("iree-compile", str(src), "--compile-to=nss")
    assert r.returncode != 0
    assert r.stderr.strip() == "iree-compile: error: --compile-to=nss needs the Torq target"
    r = run("torq-compile", str(src), "--compile-to=bogus")
    assert r.returncode != 0 and "torq-hl" in r.stderr and "Traceback" not in r.stderr
