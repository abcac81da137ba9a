"""End to end: narrow channel dims are padded in LRAM (compiler/vector_layout.py), results unchanged.

A conv with 3 input and 24 output channels, bf16 (vs torch fp32: rel L2 <= 1e-2,
cosine >= 0.9999) and int8 TOSA (bit-exact vs IREE llvm-cpu). In the executable
the conv's input and weight buffers store C = 3 as 4 (narrow: next power of two)
and its result stores O = 24 as 32 (narrow for 32 bf16 / 64 i8 lanes; an
output-channel tile of O channels as the rule pads O), the DMAs move unpadded
boxes, each conv compute's padded work is its MACs x 4/3 x padded(O)/O, and the simulator's LRAM peak counts the padded bytes (above the dense
peak, within the budget).
"""

from __future__ import annotations

import math
import os
import sys

import numpy as np
import torch
import torch.nn as nn
from test_int8_tosa import check_bit_exact, random_int8
from tosa_int8 import conv_rescale_clamp

import torq
from torq.contract.measures import measure_lram_peak
from torq.contract.program import DTYPE_BYTES, Compute, DmaIn, DmaOut

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "samples"))
from cnn import error_figures, within_limits  # noqa: E402

# Hand-computed from the rule: C = 3 < 32 (bf16) or 64 (i8) lanes -> 4; O = 24 -> 32
# (super tiling may split O into tiles; each tile's O is padded by the same rule).
PADDED = {3: 4, 24: 32}


def _pad(n: int, width: int) -> int:
    """The rule of issue 5, written out independently: whole vectors, narrow dims to a power of two."""
    if n % width == 0:
        return n
    if n < width:
        p = 1
        while p < n:
            p *= 2
        return p
    return (n + width - 1) // width * width


def _programs(cm):
    return list(cm.module._res.torq._state.programs.values())


def _check_conv_program(cm, macs: int) -> None:
    progs = [p for p in _programs(cm) if any(isinstance(c, Compute) and c.op == "conv2d" for c in p.commands)]
    assert len(progs) == 1
    p = progs[0]
    bufs = {b.id: b for b in p.buffers}
    convs = [c for c in p.commands if isinstance(c, Compute) and c.op == "conv2d"]
    assert sum(c.macs for c in convs) == macs  # useful MACs stay unpadded
    lanes = 64 if convs[0].operands[0].dtype == "i8" else 32  # TorqHw SL2610 lanes_i8 / lanes_bf16
    for c in convs:
        x, w, y = bufs[c.operands[0].buffer], bufs[c.operands[1].buffer], bufs[c.result.buffer]
        assert x.shape[c.attrs["input_dims"].index("C")] == 3
        assert x.padded_shape[c.attrs["input_dims"].index("C")] == PADDED[3]
        for b, operand, dims, letter in ((x, c.operands[0], c.attrs["input_dims"], "C"),
                                         (w, c.operands[1], c.attrs["weight_dims"], "C"),
                                         (y, c.result, c.attrs["output_dims"], "O")):
            d = dims.index(letter)
            if not b.padded_shape:  # dense: a tile whose vector dim needs no padding (e.g. 2 of 24 channels)
                assert _pad(operand.shape[d], lanes) == operand.shape[d], (b, operand, dims)
                continue
            assert b.padded_shape[d] == _pad(b.shape[d], lanes), (b, dims)
            assert [s for i, s in enumerate(b.padded_shape) if i != d] == [s for i, s in enumerate(b.shape) if i != d]
            dtype = c.result.dtype if b is y else c.operands[0].dtype
            assert b.size >= math.prod(b.padded_shape) * DTYPE_BYTES[dtype]
        o = c.result.shape[c.attrs["output_dims"].index("O")]
        assert c.padded_work == c.macs // (3 * o) * (PADDED[3] * _pad(o, lanes))
    # DMAs move the unpadded boxes.
    for c in p.commands:
        if isinstance(c, (DmaIn, DmaOut)) and bufs[c.buffer].padded_shape:
            assert [s for s in c.sizes if s != 1] == [s for s in bufs[c.buffer].shape if s != 1]
    stats = [s for s in cm.last_stats if s["macs"] == macs]
    assert len(stats) == 1
    peak = stats[0]["lram_peak_bytes"]
    dense = measure_lram_peak([type(b)(b.id, b.offset, _dense_bytes(p, b), b.live_start, b.live_end)
                               for b in p.buffers], len(p.commands))
    assert dense < peak <= torq.parse_hw_spec(p.hw["name"]).available_lram_bytes


def _dense_bytes(p, b) -> int:
    """A buffer's unpadded bytes: its data shape in the dtype of the commands using it."""
    if not b.padded_shape:
        return b.size
    for c in p.commands:
        if isinstance(c, Compute):
            for o in [*c.operands, c.result]:
                if o.buffer == b.id:
                    return math.prod(b.shape) * DTYPE_BYTES[o.dtype]
    return b.size


def test_conv_3_to_24_channels_bf16_vs_torch():
    torch.manual_seed(0)
    m = nn.Conv2d(3, 24, 3, padding=1).eval()
    x = torch.randn(1, 3, 16, 16)
    cm = torq.compile(m, x)
    y = np.asarray(cm(x.numpy()))
    with torch.no_grad():
        ref = m(x).numpy()
    rel, cos = error_figures(y, ref)
    assert within_limits(rel, cos), (rel, cos)
    _check_conv_program(cm, 16 * 16 * 24 * 3 * 9)


def test_conv_3_to_24_channels_int8_bit_exact():
    mlir = conv_rescale_clamp(seed=5, x_shape=(1, 16, 16, 3), out_ch=24)
    x = random_int8((1, 16, 16, 3), seed=6)
    cm = check_bit_exact(mlir, x, "SL2610", 1)
    _check_conv_program(cm, 16 * 16 * 24 * 3 * 9)
