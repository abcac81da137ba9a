"""Simulator refusals (SimulatorError) and dispatch statistics."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from nss_builders import ProgramBuilder, const, conv_tiled_program, opnd, step

from torq.contract.hw import TorqHw
from torq.runtime.simulator import DispatchStats, Simulator, SimulatorError


def x_conv() -> np.ndarray:
    return np.zeros((1, 4, 10, 10), np.float32)


def scale_program(n: int = 26, offsets: tuple[int, int] | None = None, live_override=None):
    """x (n,) bf16 -> DmaIn -> x * 3 -> DmaOut."""
    pb = ProgramBuilder("scale")
    x, y = pb.input((n,)), pb.output((n,))
    bx = pb.buffer(2 * n, None if offsets is None else offsets[0])
    by = pb.buffer(2 * n, None if offsets is None else offsets[1])
    pb.dma_in(x, buffer=bx)
    pb.compute("elementwise", [(bx, (n,), "bf16")], (n,), "bf16", steps=[step("mul", opnd(0), const(3.0))],
               result_buffer=by)
    pb.dma_out(by, y)
    return pb.build()


# ---------------------------------------------------------------- errors


def test_overlapping_live_buffers_refused():
    p = scale_program(offsets=(0, 32))  # 52-byte buffers at 0 and 32, both live at command 1
    with pytest.raises(SimulatorError, match=r"buffers 0 \[0, 52\) and 1 \[32, 84\) overlap"):
        Simulator(TorqHw()).run(p, [np.ones(26, np.float32)])


def test_buffer_beyond_device_lram_refused():
    p = scale_program(offsets=(0, 100000))
    Simulator(TorqHw()).run(p, [np.ones(26, np.float32)])  # fits 512 KiB
    with pytest.raises(SimulatorError, match=r"buffer 1 .*100052.* 65536 bytes"):
        Simulator(TorqHw(lram_kb=64)).run(p, [np.ones(26, np.float32)])


def test_negative_offset_refused():
    p = scale_program(offsets=(-64, 64))
    with pytest.raises(SimulatorError, match="buffer 0 has offset -64"):
        Simulator(TorqHw()).run(p, [np.ones(26, np.float32)])


def test_wrong_input_shape_dtype_and_count_refused():
    sim, p = Simulator(TorqHw()), conv_tiled_program()
    with pytest.raises(SimulatorError, match=r"input 0: expected shape \(1, 4, 10, 10\) f32, got \(1, 4, 10, 9\)"):
        sim.run(p, [np.zeros((1, 4, 10, 9), np.float32)])
    with pytest.raises(SimulatorError, match=r"input 0: .* got \(1, 4, 10, 10\) float64"):
        sim.run(p, [np.zeros((1, 4, 10, 10))])
    with pytest.raises(SimulatorError, match="expected 1 inputs, got 2"):
        sim.run(p, [x_conv(), x_conv()])


def test_command_outside_live_range_refused():
    p = scale_program()
    p.buffers[1] = dataclasses.replace(p.buffers[1], live_end=1)  # DmaOut at command 2 still reads it
    with pytest.raises(SimulatorError, match=r"command 2: DmaOut uses LRAM buffer 1 outside its live range \[1, 1\]"):
        Simulator(TorqHw()).run(p, [np.ones(26, np.float32)])


def test_operand_larger_than_buffer_refused():
    p = scale_program()
    p.buffers[0] = dataclasses.replace(p.buffers[0], size=50)
    with pytest.raises(SimulatorError, match="command 0: DmaIn needs 52 bytes but LRAM buffer 0 has 50"):
        Simulator(TorqHw()).run(p, [np.ones(26, np.float32)])


def test_wrong_macs_and_bad_attrs_refused():
    p = conv_tiled_program()
    p.commands[3].macs += 1
    with pytest.raises(SimulatorError, match=r"command 3 \(conv2d\): macs field is 9217, shapes give 9216"):
        Simulator(TorqHw()).run(p, [x_conv()])
    p = conv_tiled_program()
    p.commands[3].attrs["input_dims"] = "NCHQ"
    with pytest.raises(SimulatorError, match=r"command 3 \(conv2d\): attr input_dims='NCHQ'"):
        Simulator(TorqHw()).run(p, [x_conv()])


# ---------------------------------------------------------------- stats


def test_conv_stats_dma_bytes_peak_compulsory():
    (_,), s = Simulator(TorqHw()).run(conv_tiled_program(), [x_conv()])
    w_bytes, b_bytes = 8 * 4 * 3 * 3 * 2, 8 * 2
    x_box, y_box = 1 * 4 * 6 * 10 * 2, 1 * 8 * 4 * 8 * 2  # per tile (2-row halo on the input)
    assert s.dma_bytes_in == w_bytes + b_bytes + 2 * x_box
    assert s.dma_bytes_out == 2 * y_box
    assert s.compulsory_bytes == 4 * 10 * 10 * 2 + w_bytes + b_bytes + 8 * 8 * 8 * 2
    # Commands: 0 w, 1 b, 2 x0, 3 conv0, 4 out0, 5 x1, 6 conv1, 7 out1. Weights and bias
    # stay live to command 6; at command 3 (and 6) input tile + output tile are live too.
    assert s.lram_peak_bytes == w_bytes + b_bytes + x_box + y_box
    assert s.macs == 2 * 8 * 4 * 8 * 4 * 9
    assert (s.tiles, s.commands, s.name) == (2, 8, "conv_tiled")
    d = s.to_dict()
    # Every field except the timeline (only recorded on request), plus the two derived measures.
    fields = {f.name for f in dataclasses.fields(DispatchStats)} - {"timeline"}
    assert d["dma_bytes_in"] == s.dma_bytes_in and set(d) == fields | {"ddr_traffic_ratio", "efficiency"}
    assert s.ddr_traffic_ratio == pytest.approx((s.dma_bytes_in + s.dma_bytes_out) / s.compulsory_bytes)


def test_compulsory_bytes_count_the_input_bytes_read_once():
    # x (10,) bf16; two DMA-ins read x[0:6] and x[4:8] (overlapping at 4, 5); x[8:10]
    # is never read. Compulsory = union of the boxes, 8 elements = 16 B, plus the
    # output (6,) = 12 B: 28 B, although the program moves 12 + 8 in and 12 out.
    pb = ProgramBuilder("partial")
    x, y = pb.input((10,)), pb.output((6,))
    b0 = pb.dma_in(x, (0,), (6,))
    b1 = pb.dma_in(x, (4,), (4,))
    r = pb.compute("elementwise", [(b0, (6,), "bf16")], (6,), "bf16", steps=[step("mul", opnd(0), const(2.0))])
    pb.compute("elementwise", [(b1, (4,), "bf16")], (4,), "bf16", steps=[step("mul", opnd(0), const(2.0))])
    pb.dma_out(r, y)
    (_,), s = Simulator(TorqHw()).run(pb.build(), [np.arange(10, dtype=np.float32)])
    assert s.dma_bytes_in == 20 and s.dma_bytes_out == 12
    assert s.compulsory_bytes == 16 + 12


def test_lram_peak_hand_computed_from_live_ranges():
    # Live ranges: buffer 0 (52 B) [0,1], buffer 1 (52 B) [1,2]  -> both live at command 1.
    (_,), s = Simulator(TorqHw()).run(scale_program(), [np.ones(26, np.float32)])
    assert s.lram_peak_bytes == 104


def test_cycles_dependent_chain_uses_hw():
    # DmaIn -> compute -> DmaOut on the same data: each waits for the previous one (RAW).
    hw = TorqHw(dma_setup_cycles=10, dma_bytes_per_cycle=8, dma_efficiency=0.65, compute_overhead_cycles=3, lanes_bf16=16)
    (_,), s = Simulator(hw).run(scale_program(26), [np.ones(26, np.float32)])
    dma = 10 + math.ceil(52 / 5.2)  # 52 bytes at 8 * 0.65 = 5.2 B/cycle: exactly 10 cycles
    ew = 3 + math.ceil(26 * 1 / 16)  # 26 elements, 1 step, 16 lanes
    assert s.cycles == 2 * dma + ew == 2 * 20 + 5
    assert s.engine_busy_cycles == {"dma_in": 20, "dma_out": 20, "slice0": 5, "slice1": 0}
    assert s.latency_us == pytest.approx(45 / hw.clock_mhz)
