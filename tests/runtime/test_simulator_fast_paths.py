"""The simulator's speed-ups keep its results: prepared plans, window matrices
reused across computes on unchanged LRAM bytes, in-place epilogue steps, and
numpy's BLAS limited to one thread during a run (restored afterwards).

References are independent: torch f32 convolutions, plain numpy f32 steps.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from nss_builders import ProgramBuilder, bf16_round, const, conv_tiled_program, opnd, step, val

from torq.contract.hw import TorqHw
from torq.contract.program import Epilogue
from torq.runtime import simulator as sim_module
from torq.runtime.epilogue import eval_epilogue
from torq.runtime.simulator import Simulator, SimulatorError

HALF_ULP_BF16 = 2.0**-8


def t(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32))


def assert_bf16_close(sim: np.ndarray, ref: np.ndarray, abs_terms: np.ndarray) -> None:
    bound = HALF_ULP_BF16 * np.abs(ref) + 1e-5 * abs_terms + 1e-30
    err = np.abs(sim.astype(np.float64) - ref.astype(np.float64))
    assert np.all(err <= bound), f"max excess {np.max(err - bound)}"


CONV = {"input_dims": "NCHW", "weight_dims": "OCHW", "output_dims": "NOHW", "stride": [1, 1], "dilation": [1, 1],
        "pad": [1, 1, 1, 1]}


def reused_input_program():
    """Two images through one LRAM input buffer, each convolved with two weight tiles
    (the second read of a buffer reuses its window matrix); then the buffer is
    overwritten in place (x * 2) by a compute and convolved again."""
    w = bf16_round(np.random.default_rng(3).normal(0, 0.5, (8, 4, 3, 3)))
    pb = ProgramBuilder("reused_input")
    x, tw = pb.input((2, 4, 10, 10)), pb.constant(w, "bf16")
    y, z = pb.output((2, 8, 10, 10)), pb.output((1, 4, 10, 10))
    bw = [pb.dma_in(tw, (4 * h, 0, 0, 0), (4, 4, 3, 3)) for h in range(2)]
    bx = pb.buffer(4 * 10 * 10 * 2)
    macs = 4 * 10 * 10 * 4 * 9
    for img in range(2):
        pb.dma_in(x, (img, 0, 0, 0), (1, 4, 10, 10), buffer=bx)  # same bytes, new data
        for h in range(2):
            by = pb.compute("conv2d", [(bx, (1, 4, 10, 10), "bf16"), (bw[h], (4, 4, 3, 3), "bf16")],
                            (1, 4, 10, 10), "bf16", CONV, macs=macs)
            pb.dma_out(by, y, (img, 4 * h, 0, 0), (1, 4, 10, 10))
    pb.compute("elementwise", [(bx, (1, 4, 10, 10), "bf16")], (1, 4, 10, 10), "bf16",
               steps=[step("mul", opnd(0, 0, 1, 2, 3), const(2.0))], result_buffer=bx)
    bz = pb.compute("conv2d", [(bx, (1, 4, 10, 10), "bf16"), (bw[0], (4, 4, 3, 3), "bf16")],
                    (1, 4, 10, 10), "bf16", CONV, macs=macs)
    pb.dma_out(bz, z)
    return pb.build(), w


def test_window_matrix_reuse_follows_lram_writes():
    program, w = reused_input_program()
    x = np.random.default_rng(4).normal(0, 1, (2, 4, 10, 10)).astype(np.float32)
    xb = bf16_round(x)
    (y, z), _ = Simulator(TorqHw()).run(program, [x])
    ref = F.conv2d(t(xb), t(w), padding=1).numpy()
    terms = F.conv2d(t(np.abs(xb)), t(np.abs(w)), padding=1).numpy()
    assert_bf16_close(y, ref, terms)
    ref_z = F.conv2d(t(2 * xb[1:]), t(w[:4]), padding=1).numpy()
    terms_z = F.conv2d(t(np.abs(2 * xb[1:])), t(np.abs(w[:4])), padding=1).numpy()
    assert_bf16_close(z, ref_z, terms_z)


def test_prepared_plan_gives_the_same_run_and_is_bound_to_its_program():
    sim, program = Simulator(TorqHw()), conv_tiled_program()
    plan = sim.prepare(program)
    rng = np.random.default_rng(5)
    for _ in range(2):
        x = rng.normal(0, 1, (1, 4, 10, 10)).astype(np.float32)
        (a,), sa = sim.run(program, [x], plan=plan)
        (b,), sb = sim.run(program, [x], record_timeline=True)
        np.testing.assert_array_equal(a, b)
        assert sa.to_dict() == {k: v for k, v in sb.to_dict().items() if k != "timeline"}
        assert sb.timeline["events"] and sa.timeline is None
    with pytest.raises(SimulatorError, match="prepared for another program or device"):
        sim.run(conv_tiled_program(), [x], plan=plan)
    with pytest.raises(SimulatorError, match="prepared for another program or device"):
        Simulator(TorqHw(lram_kb=256)).run(program, [x], plan=plan)


def test_epilogue_intermediates_read_later_are_not_overwritten():
    rng = np.random.default_rng(6)
    p, a, b = (rng.normal(0, 1, (3, 5)).astype(np.float32) for _ in range(3))
    c = rng.normal(0, 1, (5,)).astype(np.float32)
    steps = [
        step("sub", val(0), opnd(0, 0, 1)),  # v1
        step("mul", val(1), opnd(1, 0, 1)),  # v2 (v1 is read again below)
        step("add", val(1), val(2)),  # v3
        step("select_gt", val(3), const(0.0), val(3), val(1)),  # v4
        step("mul", val(4), opnd(2, 1)),  # v5
        step("div", val(5), val(4)),  # v6
    ]
    principal = p.copy()
    got = eval_epilogue(Epilogue(steps, 5), principal, [a, b, c], p.shape)
    with np.errstate(all="ignore"):
        v1 = p - a
        v2 = v1 * b
        v3 = v1 + v2
        v4 = np.where(v3 > 0, v3, v1)
        v5 = v4 * c
    np.testing.assert_array_equal(got, v5)  # result 5 (not the last value), float32 steps
    np.testing.assert_array_equal(principal, p)  # the caller's principal is not written


def test_blas_thread_setting_is_restored_after_a_run():
    fn = sim_module._blas_set_threads_fn()
    if fn is None:
        pytest.skip("numpy's BLAS is not an OpenBLAS with openblas_set_num_threads_local")
    previous = fn(2)
    try:
        Simulator(TorqHw()).run(conv_tiled_program(), [np.zeros((1, 4, 10, 10), np.float32)])
        assert fn(2) == 2
    finally:
        fn(previous)
