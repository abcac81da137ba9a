"""Slice distribution in torq-build-nss-program (compiler/slice_distribution.py).

Expected slice lists are written out by hand from the strategy definitions.
"""

import os
import re
import subprocess
import sys

import numpy as np
import pytest
from iree.compiler import ir
from mlir_inputs import TILED_CONV_F32

from torq.compiler.ir_utils import record_value
from torq.compiler.slice_distribution import DistributionError, form, parse_distribution, slice_of

BIN = os.path.dirname(sys.executable)


def slices(n, s, spec):
    d = parse_distribution(spec)
    return [slice_of(k, n, s, d) for k in range(n)]


def test_general_forms_by_hand():
    # 5 tiles on 2 slices.
    assert slices(5, 2, "cyclic") == [0, 1, 0, 1, 0]  # k mod 2
    assert slices(5, 2, "block") == [0, 0, 0, 1, 1]  # blocks of ceil(5/2) = 3
    assert slices(5, 2, "block-cyclic") == [0, 0, 1, 1, 0]  # blocks of 2, dealt cyclically
    assert slices(7, 3, "block-cyclic:2") == [0, 0, 1, 1, 2, 2, 0]
    assert slices(5, 2, "block-cyclic:1") == slices(5, 2, "cyclic")
    assert slices(6, 2, "block-cyclic:3") == slices(6, 2, "block") == [0, 0, 0, 1, 1, 1]
    assert form(5, 2) == "general"


def test_simplified_forms_when_tiles_fit_the_slices():
    # n <= S: tile k on slice k, whatever the strategy (block-cyclic:2 would otherwise put both on 0).
    for spec in ("cyclic", "block", "block-cyclic:2"):
        assert slices(2, 2, spec) == [0, 1]
        assert slices(3, 4, spec) == [0, 1, 2]
    assert (form(2, 2), form(3, 4), form(1, 2)) == ("exact", "oversubscribed", "oversubscribed")


@pytest.mark.parametrize("bad", ["foo", "block:2", "block-cyclic:0", "block-cyclic:x"])
def test_bad_spec(bad):
    with pytest.raises(DistributionError):
        parse_distribution(bad)


# Five tiles of 2 rows (scf.for 0 to 10 step 2), one elementwise op per tile, two LRAM
# buffer sets (a body with one set splits each compute over the slices instead:
# tests/compiler/build_nss_program.mlir).
FIVE_TILES = """
func.func @five(%x: tensor<10x16xbf16>) -> tensor<10x16xbf16> attributes {torq.lram_end = 256 : i64, torq.lram_peak = 128 : i64} {
  %c0 = arith.constant 0 : index
  %c2 = arith.constant 2 : index
  %c10 = arith.constant 10 : index
  %e = tensor.empty() : tensor<10x16xbf16>
  %r = scf.for %i = %c0 to %c10 step %c2 iter_args(%acc = %e) -> (tensor<10x16xbf16>) {
    %s = tensor.extract_slice %x[%i, 0] [2, 16] [1, 1] : tensor<10x16xbf16> to tensor<2x16xbf16>
    %t = "torq_hl.elementwise"(%s) {epilogue = {result = 0, steps = [{args = [{axes = [0, 1], operand = 0}, 1.0], op = "add"}]}, macs = 0 : i64, torq.lram_operands = [0], torq.lram_result = 64 : i64, torq.lram_resident = [0], torq.lram_set_stride = 128 : i64, torq.lram_sets = 2 : i64} : (tensor<2x16xbf16>) -> tensor<2x16xbf16>
    %u = tensor.insert_slice %t into %acc[%i, 0] [2, 16] [1, 1] : tensor<2x16xbf16> into tensor<10x16xbf16>
    scf.yield %u : tensor<10x16xbf16>
  }
  return %r : tensor<10x16xbf16>
}
"""


def nss(tmp_path, *flags):
    src = tmp_path / "five.mlir"
    src.write_text(FIVE_TILES)
    return subprocess.run([os.path.join(BIN, "torq-opt"), str(src), *flags,
                           "--pass-pipeline=builtin.module(torq-build-nss-program)"], capture_output=True, text=True)


@pytest.mark.parametrize("spec,hw,expect,form_", [
    ("cyclic", "SL2610", [0, 1, 0, 1, 0], "general"),
    ("block", "SL2610", [0, 0, 0, 1, 1], "general"),
    ("block-cyclic:2", "SL2610", [0, 0, 1, 1, 0], "general"),
    ("block-cyclic:2", "SL2610:slices=5", [0, 1, 2, 3, 4], "exact"),
    ("block", "SL2610:slices=8", [0, 1, 2, 3, 4], "oversubscribed"),
])
def test_pass_assigns_slices(tmp_path, spec, hw, expect, form_):
    r = nss(tmp_path, f"--torq-slice-distribution={spec}", f"--torq-hw={hw}")
    assert r.returncode == 0, r.stderr
    got = [int(k) for k in re.findall(r'"torq_nss.compute"\(\) \{spec = \{.*, slice = (\d+) : i64', r.stdout)]
    assert got == expect
    summary = _distribution(r.stdout)
    assert summary["strategy"] == spec and summary["bodies"] == [
        {"tiles": 5, "form": form_, "slices_used": len(set(expect))}]


def _distribution(printed: str) -> dict:
    """The torq.distribution dictionary of the one function in torq-opt's output."""
    with ir.Context() as ctx:
        ctx.allow_unregistered_dialects = True
        func = ir.Module.parse(printed).body.operations[0].operation
        return record_value(func.attributes["torq.distribution"])


def test_bad_flag_is_a_usage_error(tmp_path):
    r = nss(tmp_path, "--torq-slice-distribution=diagonal")
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    assert "unknown --torq-slice-distribution 'diagonal' (cyclic, block, block-cyclic[:B])" in r.stderr


def test_strategies_give_identical_outputs(tmp_path):
    """The same tiled conv compiled with each strategy computes the same bits (simulator, 2 slices)."""
    import torq

    x = np.random.default_rng(0).standard_normal((1, 8, 24, 24)).astype(np.float32)
    outs, slices_used = {}, {}
    for spec in ("cyclic", "block", "block-cyclic:3"):
        cm = torq.compile(TILED_CONV_F32, hw="SL2610:lram_kb=24", flags=[f"--torq-slice-distribution={spec}"])
        outs[spec] = cm(x)
        (s,) = cm.last_stats
        assert s["tiles"] > 2
        slices_used[spec] = s["slices_used"]
    assert slices_used == {"cyclic": 2, "block": 2, "block-cyclic:3": 2}
    np.testing.assert_array_equal(outs["cyclic"], outs["block"])
    np.testing.assert_array_equal(outs["cyclic"], outs["block-cyclic:3"])
