"""Kernels of the transformer ops: table steps (exp, log, tanh, erf, rsqrt,
sqrt) and the reduce + elementwise chains softmax, layer norm and GELU
lower to.

References are independent: torch in float64 (torch.special / torch.nn.functional).
A table entry must be the bf16 nearest to the float64 function of its bf16
index (checked against the two neighbouring bf16 values, over all 65536 bit
patterns); a step on an f32 value must meet the error bound of
`program.py` (argument rounded to bf16, then one rounding of the result).
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from nss_builders import ProgramBuilder, bf16_round, const, opnd, step, val

from torq.contract.hw import TorqHw
from torq.contract.program import TABLE_OPS, Epilogue
from torq.contract.program_validator import ExecutableError, validate_program
from torq.runtime import epilogue
from torq.runtime.epilogue import eval_epilogue
from torq.runtime.kernels import KernelError, run_principal, store
from torq.runtime.simulator import Simulator

U = 2.0**-8  # bf16 unit roundoff (8 significant bits): relative rounding error <= U

TORCH_FNS = {
    "exp": torch.exp,
    "log": torch.log,
    "tanh": torch.tanh,
    "erf": torch.special.erf,
    "rsqrt": torch.rsqrt,
    "sqrt": torch.sqrt,
}


def rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def all_bf16() -> np.ndarray:
    """Every non-NaN bf16 value, as float64."""
    with np.errstate(invalid="ignore"):  # the NaN patterns
        x = np.arange(1 << 16, dtype=np.uint16).view(ml_dtypes.bfloat16).astype(np.float64)
    return x[~np.isnan(x)]


def bf16_neighbours(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The bf16 values just below and just above each finite bf16 `v` (float64)."""
    b = v.astype(np.float32).astype(ml_dtypes.bfloat16)
    down = np.nextafter(b, ml_dtypes.bfloat16(-np.inf)).astype(np.float64)
    up = np.nextafter(b, ml_dtypes.bfloat16(np.inf)).astype(np.float64)
    return down, up


@pytest.mark.parametrize("fn", sorted(TABLE_OPS))
def test_table_entries_are_the_nearest_bf16(fn):
    x = all_bf16()
    got = epilogue.table(fn)[x.astype(np.float32).astype(ml_dtypes.bfloat16).view(np.uint16)].astype(np.float64)
    with np.errstate(all="ignore"):
        ref = TORCH_FNS[fn](torch.from_numpy(x)).numpy()
    # Every entry is a bf16 value.
    assert np.array_equal(got, got.astype(np.float32).astype(ml_dtypes.bfloat16).astype(np.float64),
                          equal_nan=True)
    nan = np.isnan(ref)
    assert np.array_equal(np.isnan(got), nan)
    inf = np.isinf(ref)
    assert np.array_equal(got[inf], ref[inf])
    fin = ~nan & ~inf & np.isfinite(got)
    down, up = bf16_neighbours(got[fin])
    err = np.abs(got[fin] - ref[fin])
    assert np.all(err <= np.abs(down - ref[fin])) and np.all(err <= np.abs(up - ref[fin])), fn
    # Finite results beyond the bf16 range round to inf, as IEEE round to nearest does.
    big = ~nan & ~inf & ~np.isfinite(got)
    assert np.all(np.abs(ref[big]) >= float(ml_dtypes.finfo(ml_dtypes.bfloat16).max))


def test_table_special_values():
    x = np.array([0.0, -0.0, np.inf, -np.inf, -1.0, 1.0], np.float32)
    look = epilogue.table_lookup
    # exp(-1) = 0.36788: bf16 neighbours 188/512 and 189/512; e = 2.71828: 174/64 and 173/64.
    np.testing.assert_array_equal(look("exp", x), [1, 1, np.inf, 0, 188 / 512, 174 / 64])
    np.testing.assert_array_equal(look("rsqrt", x[:4]), [np.inf, -np.inf, 0, np.nan])
    assert np.isnan(look("log", x[4:5])).all() and look("log", x[:1])[0] == -np.inf
    np.testing.assert_array_equal(look("tanh", x[2:4]), [1, -1])


# Condition number |a f'(a) / f(a)| of each function (program.py error bound).
CONDITION = {
    "exp": lambda a: np.abs(a),
    "tanh": lambda a: np.ones_like(a),
    "erf": lambda a: np.ones_like(a),
    "rsqrt": lambda a: np.full_like(a, 0.5),
    "sqrt": lambda a: np.full_like(a, 0.5),
}


@pytest.mark.parametrize("fn", sorted(CONDITION))
def test_table_step_on_f32_meets_the_documented_bound(fn):
    # f32 values between bf16 values: the step rounds the argument to bf16 first.
    a = rng(1).uniform(-6, 6, 4096).astype(np.float32)
    if fn in ("rsqrt", "sqrt"):
        a = np.abs(a) + np.float32(1e-3)
    got = eval_epilogue(Epilogue([step(fn, opnd(0, 0))], 0), None, [a], a.shape).astype(np.float64)
    ref = TORCH_FNS[fn](torch.from_numpy(a.astype(np.float64))).numpy()
    bound = (U + CONDITION[fn](a.astype(np.float64)) * U) * np.abs(ref) * (1 + 2 * U)
    assert np.all(np.abs(got - ref) <= bound + 1e-38)
    # ... and is not an f32 evaluation: the result is a bf16 value.
    np.testing.assert_array_equal(got, bf16_round(got))


def test_log_error_is_absolute_near_one():
    a = np.float32(1.0) + rng(2).uniform(-0.05, 0.05, 1000).astype(np.float32)
    got = eval_epilogue(Epilogue([step("log", opnd(0, 0))], 0), None, [a], a.shape).astype(np.float64)
    ref = np.log(a.astype(np.float64))
    assert np.all(np.abs(got - ref) <= U * (1 + np.abs(ref)) * 1.01)


def test_table_steps_refuse_integers():
    with pytest.raises(KernelError, match="table step exp on an integer value"):
        eval_epilogue(Epilogue([step("exp", opnd(0, 0))], 0), None, [np.arange(4, dtype=np.int32)], (4,))


# ---------------------------------------------------------------- op chains vs torch.nn.functional


def _bf16(x: np.ndarray) -> np.ndarray:
    """A value stored to a bf16 LRAM buffer and read back by the next op."""
    return store(x, "bf16").astype(np.float32)


def softmax_chain(x: np.ndarray) -> np.ndarray:
    """The ops a softmax over the last dim lowers to: reduce max, elementwise
    exp(x - max), reduce sum, elementwise divide; each result stored as bf16."""
    last = x.ndim - 1
    m, _ = run_principal("reduce", [x], {"mode": "max", "axes": [last]})
    axes = tuple(range(last))
    e = _bf16(eval_epilogue(Epilogue([step("sub", opnd(0, *range(x.ndim)), opnd(1, *axes)), step("exp", val(0))]),
                            None, [x, _bf16(m)], x.shape))
    s, _ = run_principal("reduce", [e], {"mode": "sum", "axes": [last]})
    return _bf16(eval_epilogue(Epilogue([step("div", opnd(0, *range(x.ndim)), opnd(1, *axes))]), None,
                               [e, _bf16(s)], x.shape))


def layer_norm_chain(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    """IREE's layer norm: reduce sum, x - sum / n; then reduce of squares, then
    (x - mean) * rsqrt(sum / n + eps) * w + b."""
    n = x.shape[-1]
    s, _ = run_principal("reduce", [x], {"mode": "sum", "axes": [1]})
    c = _bf16(eval_epilogue(Epilogue([step("div", opnd(1, 0), const(float(n))), step("sub", opnd(0, 0, 1), val(0))]),
                            None, [x, _bf16(s)], x.shape))
    sq = _bf16(eval_epilogue(Epilogue([step("mul", opnd(0, 0, 1), opnd(0, 0, 1))]), None, [c], c.shape))
    v, _ = run_principal("reduce", [sq], {"mode": "sum", "axes": [1]})
    steps = [step("div", opnd(1, 0), const(float(n))), step("add", val(0), const(eps)), step("rsqrt", val(1)),
             step("mul", opnd(0, 0, 1), val(2)), step("mul", val(3), opnd(2, 1)), step("add", val(4), opnd(3, 1))]
    return _bf16(eval_epilogue(Epilogue(steps), None, [c, _bf16(v), w, b], x.shape))


def gelu_erf_steps() -> list:
    # torch: x * 0.5 * (1 + erf(x / sqrt(2)))
    return [step("div", opnd(0, 0, 1), const(math.sqrt(2))), step("erf", val(0)), step("add", val(1), const(1.0)),
            step("mul", val(2), const(0.5)), step("mul", opnd(0, 0, 1), val(3))]


def gelu_tanh_steps() -> list:
    # torch approximate="tanh": 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
    return [step("mul", opnd(0, 0, 1), opnd(0, 0, 1)), step("mul", val(0), opnd(0, 0, 1)),
            step("mul", val(1), const(0.044715)), step("add", opnd(0, 0, 1), val(2)),
            step("mul", val(3), const(math.sqrt(2 / math.pi))), step("tanh", val(4)),
            step("add", val(5), const(1.0)), step("mul", val(6), const(0.5)), step("mul", opnd(0, 0, 1), val(7))]


def rel_l2(got: np.ndarray, ref: np.ndarray) -> float:
    return float(np.linalg.norm(got.astype(np.float64) - ref) / np.linalg.norm(ref))


def test_softmax_chain_matches_torch():
    x = bf16_round(rng(3).normal(0, 2, (6, 16, 40)))
    got = softmax_chain(x)
    ref = F.softmax(torch.from_numpy(x.astype(np.float64)), -1).numpy()
    # Per element: exp's argument and result roundings, the sum's and the quotient's.
    assert np.all(np.abs(got - ref) <= (4 + np.abs(x - x.max(-1, keepdims=True))) * U * ref + 1e-30)
    assert rel_l2(got, ref) < 4e-3
    np.testing.assert_allclose(got.sum(-1), 1.0, atol=0.02)


def test_softmax_chain_is_shift_invariant_and_handles_large_logits():
    x = bf16_round(rng(4).normal(0, 1, (4, 32)))
    big = bf16_round(x + np.float32(512))  # exp(x) would overflow without the max subtraction
    ref = F.softmax(torch.from_numpy(big.astype(np.float64)), -1).numpy()
    got = softmax_chain(big)
    assert np.isfinite(got).all() and rel_l2(got, ref) < 1e-2


def test_layer_norm_chain_matches_torch():
    x = bf16_round(rng(5).normal(0.5, 2, (12, 96)))
    w = bf16_round(rng(6).uniform(0.5, 1.5, 96))
    b = bf16_round(rng(7).normal(0, 0.1, 96))
    got = layer_norm_chain(x, w, b, 1e-5)
    x64, w64, b64 = (torch.from_numpy(a.astype(np.float64)) for a in (x, w, b))
    ref = F.layer_norm(x64, (96,), w64, b64, eps=1e-5).numpy()
    assert rel_l2(got, ref) < 1e-2
    assert np.max(np.abs(got - ref)) < 0.05


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_chains_match_torch(approximate):
    x = bf16_round(rng(8).normal(0, 2, (8, 64)))
    steps = gelu_erf_steps() if approximate == "none" else gelu_tanh_steps()
    got = _bf16(eval_epilogue(Epilogue(steps), None, [x], x.shape))
    ref = F.gelu(torch.from_numpy(x.astype(np.float64)), approximate=approximate).numpy()
    assert rel_l2(got, ref) < 5e-3
    # Absolute error within a few bf16 ulps of |x| (the final x * ... dominates).
    assert np.all(np.abs(got - ref) <= 4 * U * np.abs(x) + 1e-6)


def test_sigmoid_and_silu_from_exp_match_torch():
    x = bf16_round(rng(9).normal(0, 3, (256,)))
    sig = [step("neg", opnd(0, 0)), step("exp", val(0)), step("add", val(1), const(1.0)),
           step("div", const(1.0), val(2))]
    got = _bf16(eval_epilogue(Epilogue(sig), None, [x], x.shape))
    ref = torch.sigmoid(torch.from_numpy(x.astype(np.float64))).numpy()
    assert np.all(np.abs(got - ref) <= (2 + np.abs(x)) * U * ref * 1.01)
    silu = _bf16(eval_epilogue(Epilogue(sig + [step("mul", val(3), opnd(0, 0))]), None, [x], x.shape))
    assert rel_l2(silu, F.silu(torch.from_numpy(x.astype(np.float64))).numpy()) < 5e-3


# ---------------------------------------------------------------- simulator and validator


def _exp_program(ops: list[str], to: str = ""):
    pb = ProgramBuilder("table")
    x = pb.input((8, 32))
    y = pb.output((8, 32))
    bx = pb.dma_in(x)
    steps = [step(ops[0], opnd(0, 0, 1), to=to)] + [step(o, val(k)) for k, o in enumerate(ops[1:])]
    by = pb.compute("elementwise", [(bx, (8, 32), "bf16")], (8, 32), "bf16", {}, steps)
    pb.dma_out(by, y)
    return pb.build()


def test_simulator_runs_table_steps_and_times_them_as_steps():
    program = _exp_program(["tanh", "exp"])
    x = rng(10).normal(0, 1, (8, 32)).astype(np.float32)
    (y,), stats = Simulator(TorqHw()).run(program, [x])
    ref = torch.exp(torch.tanh(torch.from_numpy(bf16_round(x).astype(np.float64)))).numpy()
    assert np.all(np.abs(y - ref) <= 3 * U * ref)
    one = Simulator(TorqHw()).run(_exp_program(["exp"]), [x])[1]
    # elements x steps / lanes: the second step costs 8 * 32 / 32 more cycles on the slice.
    assert stats.cycles - one.cycles == 8 * 32 // TorqHw().lanes_bf16


def test_validator_checks_table_steps():
    validate_program(_exp_program(["rsqrt"]))
    with pytest.raises(ExecutableError, match=r"epilogue step 0 \(erf\): a table lookup is float only"):
        validate_program(_exp_program(["erf"], to="i32"))
    program = _exp_program(["exp"])
    program.commands[1].epilogue.steps[0].args.append(const(1.0))
    with pytest.raises(ExecutableError, match=r"epilogue step 0 \(exp\): 2 arguments, expected 1"):
        validate_program(program)


def test_reduce_result_axes_transposes_the_kept_dims():
    # MobileViT's layer norm: the sum over channels (outermost) of patches read [C, N, P],
    # written [P, N]; against numpy's sum, transposed.
    x = np.random.default_rng(0).standard_normal((8, 5, 3)).astype(np.float32)
    y, macs = run_principal("reduce", [x], {"mode": "sum", "axes": [0], "result_axes": [2, 1]})
    np.testing.assert_allclose(y, x.sum(0).T, rtol=1e-6)
    assert y.shape == (3, 5) and macs == x.size
    with pytest.raises(KernelError, match="result_axes"):
        run_principal("reduce", [x], {"mode": "sum", "axes": [0], "result_axes": [0, 1]})


def test_matmul_roles_of_two_dims():
    # Patches x heads (A, B) with the heads written beside the tokens ("AMBN"), and grouped
    # queries (L, M) over one K per KV head: against numpy's einsum in float64.
    rng = np.random.default_rng(1)
    q, k = (rng.standard_normal((4, 2, 6, 8)).astype(np.float32) for _ in range(2))
    out, macs = run_principal("matmul", [q, k], {"lhs_dims": "ABMK", "rhs_dims": "ABNK", "output_dims": "AMBN"})
    ref = np.einsum("abmk,abnk->ambn", q.astype(np.float64), k.astype(np.float64))
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)
    assert macs == ref.size * 8
    g, kv = rng.standard_normal((2, 3, 6, 8)).astype(np.float32), rng.standard_normal((2, 5, 8)).astype(np.float32)
    out, _ = run_principal("matmul", [g, kv], {"lhs_dims": "BLMK", "rhs_dims": "BNK", "output_dims": "BLMN"})
    np.testing.assert_allclose(out, np.einsum("blmk,bnk->blmn", g.astype(np.float64), kv.astype(np.float64)),
                               rtol=1e-5, atol=1e-5)
