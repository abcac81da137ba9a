"""The padding rule of narrow dims (compiler/vector_layout.py) and a padded program on the simulator.

Expectations are hand-computed from the rule and TorqHw (SL2610: 32 bf16 lanes,
64 bf16 MACs/cycle/slice, 16 cycles compute overhead); the conv result is
checked against a float64 numpy convolution, not the simulator's kernels.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from nss_builders import ProgramBuilder, bf16_round

from torq.compiler.vector_layout import padded, padded_work, role_layout, vector_dim
from torq.contract.executable import ExecutableError, parse_executable, serialize_program
from torq.contract.hw import TorqHw
from torq.contract.ops import RESULT
from torq.contract.timing import command_cycles
from torq.runtime.simulator import Simulator, SimulatorError

HW = TorqHw()


@pytest.mark.parametrize("n, width, expected", [
    (3, 32, 4), (17, 32, 32), (24, 32, 32), (40, 32, 64), (64, 32, 64), (1, 32, 1),
    (3, 64, 4), (24, 64, 32), (65, 64, 128), (32, 32, 32), (5, 16, 8),
])  # fmt: skip
def test_padding_rule(n, width, expected):
    assert padded(n, width) == expected


def test_vector_dims_per_op():
    conv = {"input_dims": "NCHW", "weight_dims": "OCHW", "output_dims": "NOHW"}
    assert vector_dim("conv2d", conv, 0, 4) == 1  # C
    assert vector_dim("conv2d", conv, 1, 4) == 1  # weight C
    assert vector_dim("conv2d", conv, RESULT, 4) == 1  # O
    nhwc = {"input_dims": "NHWC", "weight_dims": "OHWC", "output_dims": "NHWO"}
    assert vector_dim("conv2d", nhwc, 0, 4) == 3 and vector_dim("conv2d", nhwc, RESULT, 4) == 3
    mm = {"lhs_dims": "MK", "rhs_dims": "KN", "output_dims": "MN"}
    assert [vector_dim("matmul", mm, r, 2) for r in (0, 1, RESULT)] == [1, 1, 1]
    assert vector_dim("matmul", {"lhs_dims": "KM", "rhs_dims": "NK", "output_dims": "NM"}, 1, 2) == 0
    assert vector_dim("elementwise", {}, 0, 3) == 2
    assert vector_dim("conv2d", conv, 2, 1) == 0  # bias (an epilogue operand): innermost
    assert vector_dim("elementwise", {}, RESULT, 0) is None
    # bf16 conv 1x3x8x8: C 3 -> 4; i8 O 24 -> 32 (24 < 64 lanes: narrow).
    assert role_layout("conv2d", conv, 0, (1, 3, 8, 8), "bf16", HW) == (1, 4, 8, 8)
    assert role_layout("conv2d", conv, RESULT, (1, 24, 6, 6), "i8", HW) == (1, 32, 6, 6)
    # conv padded work: MACs x 4/3 x 32/24; elementwise: padded result elements (50 -> 64).
    macs = 24 * 36 * 3 * 9
    assert padded_work("conv2d", conv, [((1, 3, 8, 8), "bf16"), ((24, 3, 3, 3), "bf16")],
                       ((1, 24, 6, 6), "bf16"), macs, HW) == 32 * 36 * 4 * 9
    assert padded_work("elementwise", {}, [((50,), "bf16")], ((50,), "bf16"), 0, HW) == 64


CONV = {"input_dims": "NCHW", "weight_dims": "OCHW", "output_dims": "NOHW", "stride": [1, 1], "dilation": [1, 1]}


def padded_conv_program():
    """conv2d bf16 1x3x8x8 * 4x3x3x3 -> 1x4x6x6 with C = 3 stored as 4 in LRAM.

    Buffers (hand-computed): input (1,3,8,8) in (1,4,8,8): 4 x 64 x 2 = 512 bytes at 0;
    weight (4,3,3,3) in (4,4,3,3): 4 x 4 x 9 x 2 = 288 bytes at 512; result 1x4x6x6
    dense (O = 4 is a power of two below 32): 4 x 36 x 2 = 288 bytes at 832.
    MACs = 4 x 36 x 3 x 9 = 3888; padded work = 3888 / 3 x 4 = 5184.
    """
    rng = np.random.default_rng(3)
    x = bf16_round(rng.normal(0, 1, (1, 3, 8, 8)))
    w = bf16_round(rng.normal(0, 0.5, (4, 3, 3, 3)))
    pb = ProgramBuilder("padded_conv")
    tx, tw, ty = pb.input((1, 3, 8, 8)), pb.constant(w, "bf16"), pb.output((1, 4, 6, 6))
    bx, bw = pb.buffer(512), pb.buffer(288)
    pb.dma_in(tx, buffer=bx)
    pb.dma_in(tw, buffer=bw)
    by = pb.compute("conv2d", [(bx, (1, 3, 8, 8), "bf16"), (bw, (4, 3, 3, 3), "bf16")], (1, 4, 6, 6), "bf16",
                    CONV, macs=3888)
    pb.dma_out(by, ty)
    p = pb.build()
    p.buffers[bx] = dataclasses.replace(p.buffers[bx], shape=(1, 3, 8, 8), padded_shape=(1, 4, 8, 8))
    p.buffers[bw] = dataclasses.replace(p.buffers[bw], shape=(4, 3, 3, 3), padded_shape=(4, 4, 3, 3))
    p.commands[2].padded_work = 5184
    return p, x, w


def _conv_ref(x, w):
    out = np.zeros((1, 4, 6, 6))
    for o in range(4):
        for i in range(3):
            for j in range(3):
                out[0, o] += np.einsum("chw,c->hw", x[0, :, i:i + 6, j:j + 6].astype(np.float64), w[o, :, i, j])
    return out


def test_padded_buffers_occupancy_cycles_and_numerics():
    p, x, w = padded_conv_program()
    assert [b.offset for b in p.buffers] == [0, 512, 832]
    # The executable carries the layout and the padded work.
    p = parse_executable(serialize_program(p), HW)
    assert p.buffers[0].padded_shape == (1, 4, 8, 8) and p.commands[2].padded_work == 5184
    (y,), stats = Simulator(HW).run(p, [x.astype(np.float32)])
    ref = _conv_ref(x, w)
    assert np.abs(y - ref).max() <= 2 ** -7 * np.abs(ref).max()  # bf16 store rounding
    # Occupancy: all three buffers live at the compute: 512 + 288 + 288 = 1088 (dense: 384 + 216 + 288).
    assert stats.lram_peak_bytes == 1088
    # DMAs move unpadded bytes: input 3 x 64 x 2 = 384, weight 4 x 27 x 2 = 216; output 288.
    assert (stats.dma_bytes_in, stats.dma_bytes_out) == (384 + 216, 288)
    # Compute: overhead 16 + ceil(5184 / 64) = 97 cycles (unpadded: 16 + ceil(3888 / 64) = 77);
    # the useful MACs stay 3888.
    assert command_cycles(p.commands[2], p, HW) == (16, 81)
    assert stats.macs == 3888


def test_padded_buffer_too_small_or_bad_access_is_refused():
    p, x, _ = padded_conv_program()
    p.buffers[0] = dataclasses.replace(p.buffers[0], size=511)  # padded input needs 512 bytes
    with pytest.raises(SimulatorError, match="needs 512 bytes but LRAM buffer 0 has 511"):
        Simulator(HW).prepare(p)
    p, _, _ = padded_conv_program()
    p.buffers[0] = dataclasses.replace(p.buffers[0], shape=(1, 3, 8, 8), padded_shape=(1, 2, 8, 8))
    with pytest.raises(ExecutableError, match="does not fit its padded shape"):
        serialize_program(p)
