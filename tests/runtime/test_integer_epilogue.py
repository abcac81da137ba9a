"""Fixed-width integer epilogue steps against Python's unbounded ints.

The reference wraps with plain modular arithmetic, independent of the
kernels' numpy implementation.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from torq.contract.program import Epilogue, EpilogueStep, Ref
from torq.runtime.epilogue import eval_epilogue
from torq.runtime.kernels import KernelError

WIDTHS = {"i8": 8, "i16": 16, "i32": 32, "i64": 64}


def wrap(v: int, bits: int) -> int:
    v &= (1 << bits) - 1
    return v - (1 << bits) if v >> (bits - 1) else v


def reference(op: str, a: int, b: int, bits: int) -> int:
    if op == "add":
        return wrap(a + b, bits)
    if op == "sub":
        return wrap(a - b, bits)
    if op == "mul":
        return wrap(a * b, bits)
    if op == "shl":
        return wrap(a << b, bits)
    if op == "shr_s":
        return wrap(a, bits) >> b
    if op == "shr_u":
        return wrap((a & ((1 << bits) - 1)) >> b, bits)
    if op == "trunc":
        return wrap(a, bits)
    if op == "zext":
        return a & ((1 << bits) - 1)
    raise AssertionError(op)


def run_step(op: str, a: int, b: int, to: str) -> int:
    args = [Ref("operand", 0)] if op in ("trunc", "zext") else [Ref("operand", 0), Ref("operand", 1)]
    e = Epilogue([EpilogueStep(op, args, to=to)], 0)
    out = eval_epilogue(e, None, [np.array([a], np.int64), np.array([b], np.int64)], (1,))
    return int(out[0])


@settings(max_examples=300, deadline=None)
@given(op=st.sampled_from(["add", "sub", "mul", "shl", "shr_s", "shr_u", "trunc", "zext"]),
       to=st.sampled_from(list(WIDTHS)), data=st.data())
def test_integer_steps_wrap_like_fixed_width_registers(op, to, data):
    bits = WIDTHS[to]
    if op == "zext" and bits == 64:
        return  # refused: see test_zext_from_64_bits_is_an_error
    # Operands are values of the step's own type (as in MLIR), except trunc/zext
    # whose operand comes from a wider type.
    src_bits = 64 if op in ("trunc", "zext") else bits
    a = data.draw(st.integers(-(1 << (src_bits - 1)), (1 << (src_bits - 1)) - 1))
    if op in ("shl", "shr_s", "shr_u"):
        b = data.draw(st.integers(0, bits - 1))
    else:
        b = data.draw(st.integers(-(1 << (bits - 1)), (1 << (bits - 1)) - 1))
    assert run_step(op, a, b, to) == reference(op, a, b, bits)


def test_tosa_double_round_requant_chain():
    """The arith chain TOSA rescale (DOUBLE_ROUND, shift 38) lowers to, step by step."""
    acc, mult, shift = -123456, 1500000000, 38
    # x*m + (1 << (s-1)); then +/- 2**30 since s > 31; arithmetic shift; trunc to i32
    r = acc * mult + (1 << (shift - 1)) + (1 << 30 if acc >= 0 else -(1 << 30))
    expected = wrap(r >> shift, 32)
    steps = [
        EpilogueStep("mul", [Ref("operand", 0), Ref("const", const=mult)], to="i64"),
        EpilogueStep("zext", [Ref("operand", 1)], to="i8"),
        EpilogueStep("shl", [Ref("const", const=1), Ref("value", 1)], to="i64"),
        EpilogueStep("shr_u", [Ref("value", 2), Ref("const", const=1)], to="i64"),
        EpilogueStep("add", [Ref("value", 0), Ref("value", 3)], to="i64"),
        EpilogueStep("add", [Ref("value", 4), Ref("const", const=-(1 << 30))], to="i64"),
        EpilogueStep("shr_s", [Ref("value", 5), Ref("value", 1)], to="i64"),
        EpilogueStep("trunc", [Ref("value", 6)], to="i32"),
    ]
    out = eval_epilogue(Epilogue(steps, 7), None,
                        [np.array([acc], np.int64), np.array([shift], np.int8)], (1,))
    assert int(out[0]) == expected


@pytest.mark.parametrize("amount", [-1, 32])
def test_shift_out_of_range_is_an_error(amount):
    with pytest.raises(KernelError, match="outside"):
        run_step("shl", 1, amount, "i32")


def test_zext_from_64_bits_is_an_error():
    with pytest.raises(KernelError, match="64-bit"):
        run_step("zext", -1, 0, "i64")


def test_lut_step_reads_the_entry_at_its_index():
    """Step "lut": value i -> entry i of its constant arguments (an int8 activation's table)."""
    table = [(v * max(0, min(6, v + 3))) // 6 for v in range(-128, 128)]  # an integer hardswish
    idx = np.arange(256, dtype=np.int64)
    e = Epilogue([EpilogueStep("lut", [Ref("operand", 0)] + [Ref("const", const=float(t)) for t in table], to="i8")], 0)
    out = eval_epilogue(e, None, [idx], (256,))
    assert out.tolist() == table


@pytest.mark.parametrize("index", [-1, 3])
def test_lut_index_outside_the_table_is_an_error(index):
    e = Epilogue([EpilogueStep("lut", [Ref("operand", 0)] + [Ref("const", const=1.0)] * 3, to="i8")], 0)
    with pytest.raises(KernelError, match=r"lut step: index outside \[0, 3\)"):
        eval_epilogue(e, None, [np.array([index], np.int64)], (1,))


def test_float_quantize_chain_rounds_ties_to_even_and_saturates():
    """The quantize of a float (QuantizeLinear: divide, round half to even, zero point, clamp,
    convert) as epilogue steps, against Python's round (ties to even) on the same f32 quotient."""
    x = np.array([0.5, 1.5, 2.5, -0.5, -2.5, 0.49, 100.0, -100.0, 3.0], np.float32) * np.float32(0.25)
    steps = [EpilogueStep("div", [Ref("operand", index=0), Ref("const", const=0.25)]),
             EpilogueStep("round", [Ref("value", index=0)]),
             EpilogueStep("add", [Ref("value", index=1), Ref("const", const=-3.0)]),
             EpilogueStep("max", [Ref("value", index=2), Ref("const", const=-128.0)]),
             EpilogueStep("min", [Ref("value", index=3), Ref("const", const=127.0)]),
             EpilogueStep("cast", [Ref("value", index=4)], to="i8")]
    got = eval_epilogue(Epilogue(steps, 5), None, [x], x.shape)
    want = [min(127, max(-128, round(float(v / np.float32(0.25))) - 3)) for v in x]
    assert got.tolist() == want == [-3, -1, -1, -3, -5, -3, 97, -103, 0]
