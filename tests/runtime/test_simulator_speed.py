"""The simulator's per-call speed-ups (issue 12: an LLM decode step) keep every bit.

- `kernels._contract` is `np.einsum(..., optimize=True)` bit for bit (it skips the
  per-call path search of a two-operand contraction).
- An input converted to its DDR dtype of which the DMA-ins read only a part (one
  layer's slice of a KV cache) converts only that part: the outputs are those of
  converting it all, and NaNs, infinities and values to round outside the part
  change nothing.
- A matmul's checks are remembered per distinct command, its errors are not.
- An epilogue-free compute stores its principal result as it is.
"""

from __future__ import annotations

import numpy as np
import pytest
from nss_builders import ProgramBuilder, bf16_round, opnd, step, val

from torq.contract.hw import TorqHw
from torq.contract.program import Epilogue
from torq.runtime import kernels
from torq.runtime.epilogue import eval_epilogue
from torq.runtime.simulator import Simulator

EQUATIONS = [
    ("mk,kn->mn", (3, 5), (5, 7)),
    ("bmk,bkn->bmn", (2, 1, 64), (2, 64, 9)),
    ("bmk,bnk->bmn", (3, 4, 16), (3, 6, 16)),
    ("mk,nk->nm", (1, 576), (192, 576)),
    ("bkm,kn->bnm", (2, 8, 3), (8, 5)),
]


@pytest.mark.parametrize("equation,a_shape,b_shape", EQUATIONS)
def test_contract_is_einsum_bit_for_bit(equation, a_shape, b_shape):
    rng = np.random.default_rng(len(equation))
    a = bf16_round(rng.normal(0, 1, a_shape)).astype(np.float32)
    b = bf16_round(rng.normal(0, 1, b_shape)).astype(np.float32)
    want = np.einsum(equation, a, b, optimize=True)
    got = kernels._contract(equation, a, b)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert got.tobytes() == want.tobytes()


def _slice_program():
    """Reads rows 2..4 of a (6, 8) f32 input (bf16 in DDR) and doubles them."""
    pb = ProgramBuilder("window")
    x, y = pb.input((6, 8)), pb.output((2, 8))
    b = pb.dma_in(x, (2, 0), (2, 8))
    r = pb.compute("elementwise", [(b, (2, 8), "bf16")], (2, 8), "bf16",
                   steps=[step("add", opnd(0, 0, 1), opnd(0, 0, 1))])
    pb.dma_out(r, y)
    return pb.build()


def test_input_read_in_part_converts_only_that_part():
    p = _slice_program()
    sim = Simulator(TorqHw())
    plan = sim.prepare(p)
    assert list(plan.windows) == [p.inputs()[0].index]
    x = np.random.default_rng(1).normal(0, 3, (6, 8)).astype(np.float32)
    x[2, 3], x[3, 4], x[3, 5] = np.nan, np.inf, 1.00390625  # a tie rounds to even
    (y,), _ = sim.run(p, [x], plan=plan)
    want = x[2:4].astype(kernels.NP_DTYPES["bf16"]).astype(np.float32)
    assert np.array_equal(y, (want + want).astype(kernels.NP_DTYPES["bf16"]).astype(np.float32), equal_nan=True)
    outside = x.copy()
    outside[[0, 1, 4, 5]] = np.nan
    (y2,), _ = sim.run(p, [outside], plan=plan)
    assert y2.tobytes() == y.tobytes()


def test_matmul_checks_are_remembered_but_not_their_errors():
    a, b = np.ones((2, 3), np.float32), np.ones((3, 4), np.float32)
    attrs = {"lhs_dims": "MK", "rhs_dims": "KN", "output_dims": "MN"}
    for _ in range(2):
        out, macs = kernels.matmul(a, b, attrs)
        assert out.shape == (2, 4) and macs == 24
    bad = {"lhs_dims": "MK", "rhs_dims": "KN", "output_dims": "MK"}
    for _ in range(2):
        with pytest.raises(kernels.KernelError, match="not a contraction over K"):
            kernels.matmul(a, b, bad)
    with pytest.raises(kernels.KernelError, match="does not name the dims"):
        kernels.matmul(a, b, {"lhs_dims": ["M", "K"], "rhs_dims": "KN", "output_dims": "MN"})
    with pytest.raises(kernels.KernelError, match="mixes integer and float"):
        kernels.matmul(a.astype(np.int8), b, attrs)


def test_epilogue_free_result_is_the_principal_and_steps_still_broadcast():
    principal = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert eval_epilogue(Epilogue([]), principal, [], (2, 3)) is principal
    row = np.arange(3, dtype=np.float32)
    out = eval_epilogue(Epilogue([step("add", val(0), val(0))]), row, [], (2, 3))
    assert out.shape == (2, 3) and np.array_equal(out, np.stack([row * 2] * 2))
    with pytest.raises(kernels.KernelError, match="does not fit the result shape"):
        eval_epilogue(Epilogue([]), principal, [], (3, 3))


def test_reused_lram_starts_zeroed_and_a_busy_one_is_not_shared():
    """A plan keeps its views of the simulator's LRAM; every run starts from zero bytes,
    and a run while the LRAM is held (another thread's run) gets its own."""
    p = _slice_program()
    sim = Simulator(TorqHw())
    plan = sim.prepare(p)
    x = np.random.default_rng(2).normal(0, 1, (6, 8)).astype(np.float32)
    (first,), _ = sim.run(p, [x], plan=plan)
    assert plan.views is not None and plan.views[0] is sim._lram
    sim._lram[:] = 0xFF  # what a failed run could leave behind
    (again,), _ = sim.run(p, [x], plan=plan)
    assert again.tobytes() == first.tobytes()
    with sim._lram_lock:
        sim._lram[:] = 0xFF
        (busy,), _ = sim.run(p, [x], plan=plan)
        assert np.all(sim._lram == 0xFF)  # not touched: the run had its own LRAM
    assert busy.tobytes() == first.tobytes()
