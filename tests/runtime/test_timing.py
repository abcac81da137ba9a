"""Timing model (contract/timing.py) against hand-computed schedules.

Every expected cycle count below is worked out by hand in the comments, from
the hardware parameters of `HW` (round numbers so the arithmetic is easy to
check), never captured from the simulator.
"""

from __future__ import annotations

import numpy as np
import pytest
from nss_builders import ProgramBuilder, bf16_round, const, opnd, step, val

from torq.contract.hw import TorqHw
from torq.contract.timing import CommandTime, Timeline, TimingError, _Link, check_slice_sharing, schedule
from torq.runtime.simulator import Simulator, SimulatorError

# DMA: 8 B/cycle x 0.5 = 4 B/cycle effective, 10 cycles setup.
# Compute: 5 cycles overhead; bf16: 64 MACs/cycle, 32 lanes.
HW = TorqHw(dma_bytes_per_cycle=8, dma_efficiency=0.5, dma_setup_cycles=10, compute_overhead_cycles=5,
            macs_per_cycle_bf16=64, lanes_bf16=32, slices=2)

CONV_ATTRS = {"input_dims": "NCHW", "weight_dims": "OCHW", "output_dims": "NOHW", "stride": [1, 1],
              "dilation": [1, 1]}


def weights() -> np.ndarray:
    return bf16_round(np.random.default_rng(3).normal(0, 0.5, (8, 4, 3, 3)))


def spans(stats) -> dict[int, tuple[str, int, int]]:
    return {e["cmd"]: (e["engine"], e["start"], e["end"]) for e in stats.timeline["events"]}


def run(program, hw=HW, x_shape=(1, 4, 10, 10)):
    x = np.random.default_rng(0).standard_normal(x_shape).astype(np.float32)
    outs, stats = Simulator(hw).run(program, [x], record_timeline=True)
    return outs, stats


# ---------------------------------------------------------------- single commands


def test_single_dma():
    pb = ProgramBuilder("one_dma", HW)
    x = pb.input((500,))  # bf16 in DDR: 1000 bytes
    pb.dma_in(x)
    p = pb.build()
    _, s = Simulator(HW).run(p, [np.zeros(500, np.float32)], record_timeline=True)
    # 10 setup + 1000 B / 4 B/cycle = 10 + 250 = 260
    assert s.cycles == 260
    assert spans(s) == {0: ("dma_in", 0, 260)}
    assert s.engine_busy_cycles == {"dma_in": 260, "dma_out": 0, "slice0": 0, "slice1": 0}
    assert s.latency_us == pytest.approx(260 / HW.clock_mhz)
    # Default SL2610: 32 setup + ceil(1000 / (8 * 0.65 = 5.2)) = 32 + ceil(192.3) = 32 + 193 = 225
    default = TorqHw()
    p.hw = default.to_dict()
    _, s = Simulator(default).run(p, [np.zeros(500, np.float32)])
    assert s.cycles == 225


def single_conv_program(split: int = 1):
    pb = ProgramBuilder("one_conv", HW)
    x = pb.input((1, 4, 10, 10))  # 800 B
    tw = pb.constant(weights(), "bf16")  # 8*4*3*3*2 = 576 B
    y = pb.output((1, 8, 8, 8))  # 1024 B
    bx = pb.dma_in(x)
    bw = pb.dma_in(tw)
    by = pb.compute("conv2d", [(bx, (1, 4, 10, 10), "bf16"), (bw, (8, 4, 3, 3), "bf16")], (1, 8, 8, 8), "bf16",
                    CONV_ATTRS, macs=8 * 8 * 8 * 4 * 9, split=split)
    pb.dma_out(by, y)
    return pb.build()


def test_single_conv():
    (y,), s = run(single_conv_program())
    # cmd 0 DmaIn x: 10 + 800/4  = 210        -> [0, 210)
    # cmd 1 DmaIn w: 10 + 576/4  = 154        -> [210, 364)  (in-order DMA-in engine)
    # cmd 2 conv:    5 + 18432/64 = 5 + 288 = 293, waits for x and w -> [364, 657)
    # cmd 3 DmaOut:  10 + 1024/4 = 266, waits for the conv -> [657, 923)
    assert spans(s) == {0: ("dma_in", 0, 210), 1: ("dma_in", 210, 364), 2: ("slice0", 364, 657),
                        3: ("dma_out", 657, 923)}
    assert s.cycles == 923
    assert s.engine_busy_cycles == {"dma_in": 364, "dma_out": 266, "slice0": 293, "slice1": 0}
    # Roofline (DESIGN §7): max(18432 / (64 * 2 slices) = 144, (800 + 576 + 1024) / 4 = 600) = 600
    assert s.roofline_cycles == 600
    assert s.efficiency == pytest.approx(600 / 923)
    # All three buffers live over [364, 657): 800 + 576 + 1024 bytes.
    assert s.lram_occupancy_peak_bytes == 2400 == s.lram_peak_bytes
    # Waits: the conv started when its last input (cmd 1) arrived; the DmaOut after the conv.
    waits = {e["cmd"]: e["waited_for"] for e in s.timeline["events"]}
    assert waits[2] == 1 and waits[3] == 2


def test_split_conv_takes_half_the_mac_cycles_on_both_slices():
    (y,), s = run(single_conv_program(split=2))
    # As test_single_conv, but the conv is split over slices 0 and 1 (4 output channels each):
    # cmd 2 conv: 5 overhead + ceil(18432 / 64 / 2) = 5 + 144 = 149 on both slices -> [364, 513)
    # cmd 3 DmaOut: 266 -> [513, 779)
    assert spans(s) == {0: ("dma_in", 0, 210), 1: ("dma_in", 210, 364), 2: ("slice0", 364, 513),
                        3: ("dma_out", 513, 779)}
    assert s.cycles == 779 == 923 - 144
    assert s.engine_busy_cycles == {"dma_in": 364, "dma_out": 266, "slice0": 149, "slice1": 149}
    assert s.timeline["events"][2]["split"] == 2 and s.slices_used == 2
    # Roofline unchanged: max(144, 600) = 600; no extra DMA bytes, no extra LRAM.
    assert s.roofline_cycles == 600
    assert s.dma_bytes_in == 800 + 576 and s.dma_bytes_out == 1024 and s.lram_peak_bytes == 2400
    # Numerics unchanged: the kernel runs once on the whole result.
    np.testing.assert_allclose(y, reference_conv(np.random.default_rng(0).standard_normal((1, 4, 10, 10))
                                                 .astype(np.float32)), rtol=2e-2, atol=5e-2)


def split_after_busy_slice1_program(split: int):
    """x (64 bf16) in; a 4-step elementwise on slice 1; then a 1-step elementwise on
    slice 0 (split = 1) or on slices 0 and 1 (split = 2), both reading x."""
    pb = ProgramBuilder("split_waits", HW)
    x, y1, y2 = pb.input((64,)), pb.output((64,)), pb.output((64,))
    bx = pb.dma_in(x)
    chain = [step("mul", opnd(0), const(2.0)), step("add", val(0), const(1.0)), step("mul", val(1), const(0.5)),
             step("sub", val(2), const(3.0))]
    b1 = pb.compute("elementwise", [(bx, (64,), "bf16")], (64,), "bf16", steps=chain, slice=1)
    b2 = pb.compute("elementwise", [(bx, (64,), "bf16")], (64,), "bf16", steps=[step("neg", opnd(0))],
                    split=split)
    pb.dma_out(b1, y1)
    pb.dma_out(b2, y2)
    return pb.build()


def test_split_compute_waits_for_all_its_slices():
    x = np.arange(64, dtype=np.float32)
    (_, one), s1 = Simulator(HW).run(split_after_busy_slice1_program(1), [x], record_timeline=True)
    (_, two), s2 = Simulator(HW).run(split_after_busy_slice1_program(2), [x], record_timeline=True)
    # cmd 0 DmaIn x: 10 + 128/4 = 42 -> [0, 42)
    # cmd 1 on slice 1: 64 elements x 4 steps / 32 lanes: 5 + 8 = 13 -> [42, 55)
    # cmd 2 unsplit on slice 0: 5 + 64/32 = 7, starts when x lands -> [42, 49)
    # cmd 2 split over slices 0-1: 5 + ceil(2 / 2) = 6, but slice 1 is busy until 55 -> [55, 61)
    assert spans(s1)[2] == ("slice0", 42, 49)
    assert spans(s2)[2] == ("slice0", 55, 61)
    assert s2.engine_busy_cycles["slice0"] == 6 and s2.engine_busy_cycles["slice1"] == 13 + 6
    np.testing.assert_array_equal(one, two)
    np.testing.assert_array_equal(two, -x)


def test_split_compute_writes_accepted_by_slice_sharing_check():
    # A buffer written by a split compute (slices 0-1) and later in place by slice 0: the
    # slice-0 queue orders them, so it is no race; a slice-1-only writer next to slice 0 still is.
    pb = ProgramBuilder("split_writes", HW)
    x, y = pb.input((64,)), pb.output((64,))
    b0 = pb.dma_in(x)
    b1 = pb.compute("elementwise", [(b0, (64,), "bf16")], (64,), "bf16", steps=[step("mul", opnd(0), const(2.0))],
                    split=2)
    pb.compute("elementwise", [(b1, (64,), "bf16")], (64,), "bf16", steps=[step("add", opnd(0), const(1.0))],
               result_buffer=b1)
    pb.dma_out(b1, y)
    (out,), s = Simulator(HW).run(pb.build(), [np.arange(64, dtype=np.float32)])
    np.testing.assert_array_equal(out, bf16_round(np.arange(64) * 2.0 + 1.0))
    pb.commands[1].slice, pb.commands[1].split = 1, 1
    with pytest.raises(SimulatorError, match=r"LRAM buffer 1 is written by slices 1 and 0 while live"):
        Simulator(HW).run(pb.build(), [np.zeros(64, np.float32)])


def test_split_beyond_device_refused():
    one_slice = TorqHw(**{**HW.to_dict(), "slices": 1})
    p = single_conv_program(split=2)
    with pytest.raises(SimulatorError, match=r"command 2 \(conv2d\) runs on slices 0..1 \(split over 2\) but the "
                                             r"device .* has 1 slice;"):
        Simulator(one_slice).run(p, [np.zeros((1, 4, 10, 10), np.float32)])


def test_maxpool_runs_on_lanes_not_mac_array():
    pb = ProgramBuilder("pool", HW)
    x = pb.input((1, 4, 10, 10))
    y = pb.output((1, 4, 4, 4))
    bx = pb.dma_in(x)
    attrs = {"input_dims": "NCHW", "output_dims": "NCHW", "kernel": [3, 3], "stride": [2, 2], "dilation": [1, 1]}
    by = pb.compute("maxpool2d", [(bx, (1, 4, 10, 10), "bf16")], (1, 4, 4, 4), "bf16", attrs, macs=4 * 16 * 9)
    pb.dma_out(by, y)
    (out,), s = run(pb.build(tiles=1))
    # cmd 0 DmaIn x: 10 + 800/4 = 210                       -> [0, 210)
    # cmd 1 pool: 576 window reads on 32 bf16 lanes: 5 + 18 -> [210, 233)  (on the MAC array it would be 5 + 9)
    # cmd 2 DmaOut: 10 + 128/4 = 42                          -> [233, 275)
    assert spans(s) == {0: ("dma_in", 0, 210), 1: ("slice0", 210, 233), 2: ("dma_out", 233, 275)}
    # Roofline: no MAC-array work, so the compulsory bytes decide: (800 + 128) / 4 = 232.
    assert s.roofline_cycles == 232
    xb = bf16_round(np.random.default_rng(0).standard_normal((1, 4, 10, 10)).astype(np.float32))
    ref = np.lib.stride_tricks.sliding_window_view(xb, (3, 3), axis=(2, 3))[:, :, ::2, ::2].max(axis=(-2, -1))
    np.testing.assert_array_equal(out, ref)


# ---------------------------------------------------------------- two tiles


def two_tile_conv(double_buffered: bool, slices=(0, 0), hw=HW):
    """conv 1x4x10x10 * 8x4x3x3 tiled over 2 x 4 output rows; weights loaded once.

    Commands: 0 DmaIn w, then per tile t: DmaIn x_t, conv_t, DmaOut y_t.
    double_buffered: each tile has its own x and y buffers; otherwise both tiles
    reuse the same two buffers.
    """
    pb = ProgramBuilder("two_tiles", hw)
    x = pb.input((1, 4, 10, 10))
    tw = pb.constant(weights(), "bf16")
    y = pb.output((1, 8, 8, 8))
    bw = pb.dma_in(tw)
    shared = (None, None) if double_buffered else (pb.buffer(4 * 6 * 10 * 2), pb.buffer(8 * 4 * 8 * 2))
    for t in range(2):
        bx_in, by_in = shared
        bx = pb.dma_in(x, (0, 0, 4 * t, 0), (1, 4, 6, 10), buffer=bx_in)  # 480 B
        by = pb.compute("conv2d", [(bx, (1, 4, 6, 10), "bf16"), (bw, (8, 4, 3, 3), "bf16")], (1, 8, 4, 8),
                        "bf16", CONV_ATTRS, macs=8 * 4 * 8 * 4 * 9, tile=t, result_buffer=by_in,
                        slice=slices[t])
        pb.dma_out(by, y, (0, 0, 4 * t, 0), (1, 8, 4, 8))  # 512 B
    return pb.build(tiles=2)


SLOW = TorqHw(**{**HW.to_dict(), "macs_per_cycle_bf16": 16})  # compute-bound: 9216 MACs / 16 = 576


def reference_conv(x: np.ndarray) -> np.ndarray:
    xb = bf16_round(x).astype(np.float64)
    win = np.lib.stride_tricks.sliding_window_view(xb, (3, 3), axis=(2, 3))
    return np.einsum("nchwij,ocij->nohw", win, weights().astype(np.float64))


def test_double_buffered_overlaps_dma_and_compute():
    (y,), s = run(two_tile_conv(True, hw=SLOW), SLOW)
    # w: 10 + 576/4 = 154; x_t: 10 + 480/4 = 130; conv_t: 5 + 9216/16 = 581; y_t: 10 + 512/4 = 138.
    # cmd 0 DmaIn w  [0, 154)      link [10, 154)
    # cmd 1 DmaIn x0 [154, 284)    link [164, 284)
    # cmd 2 conv0    [284, 865)
    # cmd 3 DmaOut y0 [865, 1003)  link [875, 1003)
    # cmd 4 DmaIn x1: own buffer, so no wait for conv0: engine free at 284 -> [284, 414), link [294, 414)
    # cmd 5 conv1: slice0 free at 865 (x1 ready at 414) -> [865, 1446)
    # cmd 6 DmaOut y1 [1446, 1584)
    assert spans(s) == {0: ("dma_in", 0, 154), 1: ("dma_in", 154, 284), 2: ("slice0", 284, 865),
                        3: ("dma_out", 865, 1003), 4: ("dma_in", 284, 414), 5: ("slice0", 865, 1446),
                        6: ("dma_out", 1446, 1584)}
    # Sequential sum 154 + 2 * (130 + 581 + 138) = 1852; x1 (130) hides under conv0, y0 (138) under conv1.
    assert s.cycles == 1584 == 1852 - 130 - 138
    # Live in time (first use start to last use end): w [0,1446), x0 [154,865), y0 [284,1003),
    # x1 [284,1446), y1 [865,1584). Over [284,865): w + x0 + y0 + x1 = 576 + 480 + 512 + 480 = 2048;
    # over [865,1003): w + y0 + x1 + y1 = 576 + 512 + 480 + 512 = 2080, the peak; more than the
    # program-order peak (one tile's w + x + y = 576 + 480 + 512 = 1568).
    assert (s.lram_occupancy_peak_bytes, s.lram_peak_bytes) == (2080, 1568)
    occupancy = dict(map(tuple, s.timeline["lram_occupancy"]))
    assert occupancy[284] == 2048 and occupancy[865] == 2080 and occupancy[1584] == 0
    np.testing.assert_allclose(y, reference_conv(np.random.default_rng(0).standard_normal((1, 4, 10, 10))
                                                 .astype(np.float32)), rtol=2e-2, atol=5e-2)


def test_single_buffered_does_not_overlap():
    (_, ), s = run(two_tile_conv(False, hw=SLOW), SLOW)
    # cmds 0-3 as in the double-buffered case: w [0,154), x0 [154,284), conv0 [284,865), y0 [865,1003).
    # cmd 4 DmaIn x1 rewrites x0's bytes: waits for conv0, its last reader (WAR) -> starts at 865;
    #   setup [865, 875), but the link carries y0 over [875, 1003): transfer [1003, 1123).
    # cmd 5 conv1 rewrites y0's bytes: waits for x1 (RAW, 1123) and y0's DmaOut (WAR, 1003) -> [1123, 1704)
    # cmd 6 DmaOut y1 [1704, 1842)
    assert spans(s) == {0: ("dma_in", 0, 154), 1: ("dma_in", 154, 284), 2: ("slice0", 284, 865),
                        3: ("dma_out", 865, 1003), 4: ("dma_in", 865, 1123), 5: ("slice0", 1123, 1704),
                        6: ("dma_out", 1704, 1842)}
    # Only x1's setup runs next to y0's: the sequential sum 1852 minus those 10 cycles.
    assert s.cycles == 1842 == 1852 - 10
    ev = s.timeline["events"]
    computes = [(e["start"], e["end"]) for e in ev if e["engine"].startswith("slice")]
    dmas = [(e["transfer_start"], e["end"]) for e in ev if e["engine"].startswith("dma")]
    assert all(de <= cs or ce <= ds for cs, ce in computes for ds, de in dmas), "no DMA transfer under a compute"
    waits = {e["cmd"]: e["waited_for"] for e in ev}
    assert waits[4] == 2 and waits[5] == 4


def test_two_slices_halve_compute_bound_dispatch():
    hw = TorqHw(**{**HW.to_dict(), "macs_per_cycle_bf16": 4})  # conv tile: 5 + 9216/4 = 2309 cycles
    _, one = run(two_tile_conv(True, (0, 0), hw), hw)
    _, two = run(two_tile_conv(True, (0, 1), hw), hw)
    # One slice: w [0,154), x0 [154,284), conv0 [284,2593), y0 [2593,2731), x1 [284,414),
    #   conv1 waits for slice0: [2593, 4902), y1 [4902, 5040).
    assert one.cycles == 5040
    # Two slices: conv1 on slice 1 starts when x1 lands: [414, 2723); y1 waits for the DMA-out
    #   engine (y0 until 2731): [2731, 2869).
    assert two.cycles == 2869
    assert spans(two)[5] == ("slice1", 414, 2723)
    assert one.engine_busy_cycles["slice0"] == 2 * 2309 and one.engine_busy_cycles["slice1"] == 0
    assert two.engine_busy_cycles["slice0"] == two.engine_busy_cycles["slice1"] == 2309
    # The compute phase (first conv start to last conv end) halves: 4618 -> 2439 (2309 + 130 for x1).
    assert (4902 - 284, 2723 - 284) == (2 * 2309, 2309 + 130)
    assert (one.slices_used, two.slices_used) == (1, 2)


# ---------------------------------------------------------------- DDR and link dependencies


def test_ddr_scratch_read_waits_for_its_write():
    pb = ProgramBuilder("scratch", HW)
    x, y = pb.input((64,)), pb.output((64,))  # 128 B each
    sc = pb.scratch((64,))
    b0 = pb.dma_in(x)
    b1 = pb.compute("elementwise", [(b0, (64,), "bf16")], (64,), "bf16", steps=[step("mul", opnd(0), const(2.0))])
    pb.dma_out(b1, sc)
    b2 = pb.dma_in(sc)
    b3 = pb.compute("elementwise", [(b2, (64,), "bf16")], (64,), "bf16", steps=[step("add", opnd(0), const(1.0))])
    pb.dma_out(b3, y)
    p = pb.build()
    (out,), s = Simulator(HW).run(p, [np.arange(64, dtype=np.float32)], record_timeline=True)
    np.testing.assert_array_equal(out, bf16_round(np.arange(64) * 2.0 + 1.0))
    # DMA 128 B: 10 + 32 = 42; elementwise 64 elements x 1 step / 32 lanes: 5 + 2 = 7.
    # x [0,42), mul [42,49), out->scratch [49,91); the scratch read waits for that write (DDR RAW)
    # although its engine and buffer are free: [91,133), add [133,140), out [140,182).
    assert spans(s) == {0: ("dma_in", 0, 42), 1: ("slice0", 42, 49), 2: ("dma_out", 49, 91),
                        3: ("dma_in", 91, 133), 4: ("slice0", 133, 140), 5: ("dma_out", 140, 182)}
    assert s.timeline["events"][3]["waited_for"] == 2


def test_link_fills_gaps_and_splits_transfers():
    link = _Link()
    assert link.reserve(10, 20) == (10, 30)  # [10, 30)
    assert link.reserve(50, 10) == (50, 60)  # [50, 60)
    # 30 cycles from 0: [0, 10) + [30, 50) fill the gaps, then 0 left -> ends at 50.
    assert link.reserve(0, 30) == (0, 50)
    # Link busy over [0, 60) now: 5 cycles from 20 go to [60, 65).
    assert link.reserve(20, 5) == (60, 65)
    assert (link.starts, link.ends) == ([0], [65])


# ---------------------------------------------------------------- slice checks


def test_buffer_written_by_two_slices_refused():
    pb = ProgramBuilder("shared", HW)
    x, y = pb.input((64,)), pb.output((64,))
    b0 = pb.dma_in(x)
    b1 = pb.compute("elementwise", [(b0, (64,), "bf16")], (64,), "bf16", steps=[step("mul", opnd(0), const(2.0))])
    pb.compute("elementwise", [(b1, (64,), "bf16")], (64,), "bf16", steps=[step("add", opnd(0), const(1.0))],
               result_buffer=b1, slice=1)
    pb.dma_out(b1, y)
    with pytest.raises(SimulatorError, match=r"program 'shared': LRAM buffer 1 is written by slices 0 and 1"):
        Simulator(HW).run(pb.build(), [np.zeros(64, np.float32)])


def test_slice_beyond_device_refused():
    p = two_tile_conv(True, (0, 1))
    one_slice = TorqHw(**{**HW.to_dict(), "slices": 1})
    with pytest.raises(SimulatorError, match=r"command 5 \(conv2d\) runs on slice 1 but the device .* has 1 slice;"):
        Simulator(one_slice).run(p, [np.zeros((1, 4, 10, 10), np.float32)])


def test_byte_sharing_buffers_of_two_slices_live_together_refused():
    # Buffers 1 (slice 0) and 2 (slice 1) are at the same offset; a schedule in which their
    # time spans overlap must be refused (the dependency rules never produce one).
    pb = ProgramBuilder("timed", HW)
    x, y = pb.input((64,)), pb.output((64,))
    b0 = pb.dma_in(x)
    b1 = pb.compute("elementwise", [(b0, (64,), "bf16")], (64,), "bf16", steps=[step("mul", opnd(0), const(2.0))])
    pb.dma_out(b1, y)
    b3 = pb.buffer(128, offset=pb.buffers[b1].offset)
    pb.compute("elementwise", [(b0, (64,), "bf16")], (64,), "bf16", steps=[step("mul", opnd(0), const(3.0))],
               result_buffer=b3, slice=1)
    pb.dma_out(b3, y)
    p = pb.build()
    good = schedule(p, HW)
    check_slice_sharing(p, good)  # the real schedule orders them
    assert b3 == 2 and good.buffer_spans[2][0] >= good.buffer_spans[1][1]
    bad = Timeline([CommandTime(i, "x", 0, 10) for i in range(len(p.commands))], 10, {},
                   {1: (0, 10), 2: (5, 15)})
    with pytest.raises(TimingError, match=r"buffers 1 \(slice 0\) and 2 \(slice 1\) share bytes .* cycles \[5, 10\)"):
        check_slice_sharing(p, bad)


def test_default_hw_conv_program_cycles():
    # The shared conv program (nss_builders.conv_tiled_program) on SL2610: w 576 B, b 16 B,
    # per tile x 480 B and y 512 B, each tile 9216 MACs; buffers all distinct.
    from nss_builders import conv_tiled_program
    hw = TorqHw()
    _, s = Simulator(hw).run(conv_tiled_program(), [np.zeros((1, 4, 10, 10), np.float32)], record_timeline=True)
    # At 5.2 B/cycle: w ceil(110.8) = 111, b ceil(3.1) = 4, x ceil(92.3) = 93, y ceil(98.5) = 99; setup 32.
    # conv 16 + 9216/64 = 160.
    # w [0,143) link [32,143); b [143,179) link [175,179); x0 [179,304) link [211,304);
    # conv0 [304,464); y0 [464,595) link [496,595); x1 [304,429) link [336,429) (free gap);
    # conv1 [464,624); y1 [624,755).
    assert s.cycles == 755
    assert spans(s)[5] == ("dma_in", 304, 429) and spans(s)[6] == ("slice0", 464, 624)


# ---------------------------------------------------------------- random programs vs brute force


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from torq.contract.program import (  # noqa: E402
    Compute,
    DmaIn,
    DmaOut,
    Epilogue,
    EpilogueStep,
    LramBuffer,
    Operand,
    Program,
    Ref,
    TensorDesc,
)
from torq.contract.timing import command_cycles  # noqa: E402


@st.composite
def random_programs(draw):
    """Commands over a few LRAM buffers (which may share bytes) and a DDR scratch tensor read and written."""
    n_buf = draw(st.integers(2, 5))
    buffers = [LramBuffer(i, draw(st.integers(0, 6)) * 32, 64, 0, 0) for i in range(n_buf)]
    tensors = [TensorDesc(0, "input", (64,), "bf16", "bf16", 0), TensorDesc(1, "scratch", (64,), "bf16", "bf16")]
    commands = []
    for _ in range(draw(st.integers(1, 14))):
        kind = draw(st.sampled_from(["in", "out", "compute"]))
        b = draw(st.integers(0, n_buf - 1))
        if kind == "compute":
            r = draw(st.integers(0, n_buf - 1))
            sl = draw(st.integers(0, 1))
            commands.append(Compute("elementwise", [Operand(b, (32,), "bf16")], Operand(r, (32,), "bf16"), {},
                                    Epilogue([EpilogueStep("neg", [Ref("operand", 0)])]),
                                    slice=sl, split=draw(st.integers(1, 2 - sl))))
        else:
            off = draw(st.integers(0, 48))
            size = draw(st.integers(1, 64 - off))
            tensor = 1 if kind == "out" else draw(st.integers(0, 1))
            commands.append(DmaIn(tensor, (off,), (size,), b) if kind == "in" else DmaOut(b, tensor, (off,), (size,)))
    return Program("random", HW.to_dict(), tensors, buffers, commands)


def _engines(c) -> set[str]:
    """The engines a command holds, from the program model (not contract/timing.py's own
    lookup): its DMA engine, or the slices Compute.slice .. slice + split - 1."""
    if isinstance(c, DmaIn):
        return {"dma_in"}
    if isinstance(c, DmaOut):
        return {"dma_out"}
    return {f"slice{s}" for s in range(c.slice, c.slice + c.split)}


def _accesses(c):
    if isinstance(c, DmaIn):
        return [], [c.buffer]
    if isinstance(c, DmaOut):
        return [c.buffer], []
    return [c.operands[0].buffer], [c.result.buffer]


@settings(max_examples=150, deadline=None)
@given(random_programs())
def test_schedule_respects_every_hazard_brute_force(p):
    tl = schedule(p, HW)
    t = tl.commands
    bufs = {b.id: b for b in p.buffers}

    def overlap(a, b):
        x, y = bufs[a], bufs[b]
        return x.offset < y.offset + y.size and y.offset < x.offset + x.size

    for j, cj in enumerate(p.commands):
        rj, wj = _accesses(cj)
        for i in range(j):
            ci = p.commands[i]
            ri, wi = _accesses(ci)
            lram_hazard = any(overlap(a, b) for a in wi for b in rj + wj) or any(overlap(a, b) for a in ri for b in wj)
            ddr_hazard = False
            if isinstance(ci, (DmaIn, DmaOut)) and isinstance(cj, (DmaIn, DmaOut)) and ci.tensor == cj.tensor:
                boxes = ci.offsets[0] < cj.offsets[0] + cj.sizes[0] and cj.offsets[0] < ci.offsets[0] + ci.sizes[0]
                ddr_hazard = boxes and (isinstance(ci, DmaOut) or isinstance(cj, DmaOut))
            same_engine = bool(_engines(ci) & _engines(cj))  # a split compute holds all its slices
            if lram_hazard or ddr_hazard or same_engine:
                assert t[j].start >= t[i].end, (i, j, t[i], t[j])
    # Each command lasts at least its cycles; a DMA's transfer starts after its setup.
    for c, ct in zip(p.commands, t):
        fixed, work = command_cycles(c, p, HW)
        assert ct.end - ct.start >= fixed + work
        if isinstance(c, (DmaIn, DmaOut)):
            assert ct.transfer_start >= ct.start + fixed
    # The link carries one transfer at a time: the makespan covers all transfer cycles.
    link = sum(command_cycles(c, p, HW)[1] for c in p.commands if isinstance(c, (DmaIn, DmaOut)))
    assert tl.makespan >= link
    assert tl.makespan == max((x.end for x in t), default=0)
