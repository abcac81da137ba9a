"""--torq-check-dispatches on in-place updates: a concatenation's first piece written into a
fresh result (compiler/target.py `_define_updated_operands`).

Each piece of an inner-dim concat is a dispatch that updates its box of one read-write
operand in place (compiler/passes/mark_in_place_updates.py); the check compares the whole
updated operand with the host copy's. The first piece's operand is a `tensor.empty`, whose
contents are undefined: the NPU call and the host copy got separate allocations, and once a
dead intermediate had left values in one of them, every element outside the box differed
(efficientvit_m0's attention Concat_20: 8546 of 12544 int8 elements, up to 177 steps). The
models below keep such an intermediate alive before the concat, so they reproduce that.
"""

from __future__ import annotations

import io
import os
import sys

import numpy as np
import pytest
import torch
import torch.nn as nn

import torq

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "samples"))
from cnn import error_figures, within_limits  # noqa: E402
from llvm_cpu import TOSA, llvm_cpu  # noqa: E402

# An int8 concat, clamped and split again (an intermediate that dies), then a concat of
# two computed pieces: each concat's first piece updates an empty.
TOSA_CONCATS = """
func.func @main(%x: tensor<1x6x7x16xi8>, %y: tensor<1x6x7x16xi8>) -> tensor<1x6x7x32xi8> {
  %t = "tosa.concat"(%x, %y) <{axis = 3 : i32}> : (tensor<1x6x7x16xi8>, tensor<1x6x7x16xi8>) -> tensor<1x6x7x32xi8>
  %c = "tosa.clamp"(%t) <{min_val = -50 : i8, max_val = 60 : i8}> : (tensor<1x6x7x32xi8>) -> tensor<1x6x7x32xi8>
  %o0 = "tosa.const_shape"() <{values = dense<[0, 0, 0, 0]> : tensor<4xindex>}> : () -> !tosa.shape<4>
  %o1 = "tosa.const_shape"() <{values = dense<[0, 0, 0, 16]> : tensor<4xindex>}> : () -> !tosa.shape<4>
  %sz = "tosa.const_shape"() <{values = dense<[1, 6, 7, 16]> : tensor<4xindex>}> : () -> !tosa.shape<4>
  %a = "tosa.slice"(%c, %o0, %sz) : (tensor<1x6x7x32xi8>, !tosa.shape<4>, !tosa.shape<4>) -> tensor<1x6x7x16xi8>
  %b = "tosa.slice"(%c, %o1, %sz) : (tensor<1x6x7x32xi8>, !tosa.shape<4>, !tosa.shape<4>) -> tensor<1x6x7x16xi8>
  %p = "tosa.clamp"(%a) <{min_val = -20 : i8, max_val = 100 : i8}> : (tensor<1x6x7x16xi8>) -> tensor<1x6x7x16xi8>
  %q = "tosa.clamp"(%b) <{min_val = -90 : i8, max_val = 30 : i8}> : (tensor<1x6x7x16xi8>) -> tensor<1x6x7x16xi8>
  %r = "tosa.concat"(%p, %q) <{axis = 3 : i32}> : (tensor<1x6x7x16xi8>, tensor<1x6x7x16xi8>) -> tensor<1x6x7x32xi8>
  return %r : tensor<1x6x7x32xi8>
}
"""


class SoftmaxThenConcat(nn.Module):
    """f32: a softmax over a concat (an intermediate that dies), then a concat of two computed halves."""

    def forward(self, x, y):
        a = torch.softmax(torch.cat([x, y], dim=-1) * 3.0, dim=-1)
        return torch.cat([a[..., :16] * 0.5, torch.relu(a[..., 16:]) - 1.0], dim=-1)


def _int8_inputs() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(4)
    return tuple(rng.integers(-128, 128, (1, 6, 7, 16)).astype(np.int8) for _ in range(2))


@pytest.fixture(scope="module")
def int8_concats():
    """TOSA_CONCATS compiled with the check, all on the NPU."""
    cm = torq.compile(TOSA_CONCATS, flags=(*TOSA, "--torq-check-dispatches"), remarks=io.StringIO())
    assert all(d.executor == "torq" for d in cm.report.dispatches), cm.report.dispatches
    return cm


def _in_place_names(cm) -> list[str]:
    """The NPU dispatches that only copy a piece into its box (the concats' pieces)."""
    return [d.name for d in cm.report.dispatches if d.ops == "copy"]


def test_int8_concat_pieces_check_exact(int8_concats):
    """Every NPU result, the pieces written into an empty included, equals llvm-cpu's copy."""
    x, y = _int8_inputs()
    out = int8_concats(x, y)
    np.testing.assert_array_equal(out, llvm_cpu(TOSA_CONCATS, x, y, flags=TOSA))
    checks = int8_concats.last_checks
    assert {c["name"] for c in checks} >= set(_in_place_names(int8_concats)) and len(_in_place_names(int8_concats)) >= 4
    assert all(c["differing"] == 0 for c in checks), [c for c in checks if c["differing"]]


def test_f32_concat_pieces_check_exact():
    """The same for f32 (bf16 on the NPU): every result within bf16 rounding of llvm-cpu's, a
    piece differing at most in its half (a copy of an f32 input rounds it to bf16, one of a
    bf16 result does not); the output within the bf16 bounds of torch's and equal to an
    unchecked compile's."""
    m = SoftmaxThenConcat().eval()
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(1, 8, 8, 16, generator=g), torch.randn(1, 8, 8, 16, generator=g)
    cm = torq.compile(m, x, y, flags=("--torq-check-dispatches",), remarks=io.StringIO())
    out = cm(x.numpy(), y.numpy())
    copies = {c["name"]: c for c in cm.last_checks if c["name"] in _in_place_names(cm)}
    assert len(copies) >= 4 and all(c["differing"] <= c["elements"] // 2 for c in copies.values()), copies
    assert all(c["rel_l2"] < 1e-2 for c in cm.last_checks), cm.last_checks
    with torch.no_grad():
        assert within_limits(*error_figures(out, m(x, y).numpy()))
    np.testing.assert_array_equal(out, torq.compile(m, x, y, remarks=io.StringIO())(x.numpy(), y.numpy()))


@pytest.mark.parametrize("where", ["written", "unwritten"])
def test_check_catches_a_wrong_element(int8_concats, monkeypatch, where):
    """One element of the first in-place result off by one step, inside the box the dispatch
    writes or outside it: that dispatch's check reports exactly that element."""
    from torq.runtime.simulator import Simulator

    run, hit = Simulator.run, []

    def wrong(self, program, inputs, **kw):
        outputs, stats = run(self, program, inputs, **kw)
        out_desc = next((t for t in program.outputs() if t.aliases >= 0), None)
        if out_desc is not None and not hit:
            prior = next(x for t, x in zip(program.inputs(), inputs) if t.arg_index == out_desc.aliases)
            k = program.outputs().index(out_desc)
            outputs[k] = _off_by_one(outputs[k], np.asarray(prior), where)
            hit.append(k)
        return outputs, stats

    monkeypatch.setattr(Simulator, "run", wrong)
    int8_concats(*_int8_inputs())
    (bad,) = [c for c in int8_concats.last_checks if c["differing"]]
    assert len(hit) == 1 and bad["name"] in _in_place_names(int8_concats), bad
    assert (bad["differing"], bad["max_steps"]) == (1, 1), bad


def _off_by_one(out: np.ndarray, prior: np.ndarray, where: str) -> np.ndarray:
    """`out` (an int8 piece written into its half of the last dim of `prior`) with one element
    xor 1: the first the dispatch changed, or the first of the half it left alone."""
    out = np.array(out)
    half = out.shape[-1] // 2
    changed = [(out[..., s] != prior[..., s]).any() for s in (slice(0, half), slice(half, None))]
    assert changed.count(True) == 1, changed  # one half written, the other kept
    if where == "written":
        i = int(np.flatnonzero(out != prior)[0])
    else:
        i = int(np.ravel_multi_index((0,) * (out.ndim - 1) + (half if changed[0] else 0,), out.shape))
    out.flat[i] ^= 1
    return out
