"""The strided form of DmaIn (contract/program.py): every s-th element of a DDR box (the
1x1 stride-2 branch of MobileOne / FastViT read by an elementwise op). Each result is
checked against numpy's own strided indexing, the DDR bytes and timing against
hand-computed figures, the format by a round trip."""

from __future__ import annotations

import dataclasses

import ml_dtypes
import numpy as np
import pytest
from nss_builders import ProgramBuilder, assert_refused, conv_tiled_program, with_version

from torq.contract.executable import ExecutableError, parse_executable, serialize_program
from torq.contract.hw import TorqHw
from torq.contract.measures import program_traffic
from torq.contract.schemas.torq_fb.Program import Program as fbProgram
from torq.runtime.simulator import Simulator

# DMA: 8 B/cycle x 0.5 = 4 B/cycle effective, 10 cycles setup.
HW = TorqHw(dma_bytes_per_cycle=8, dma_efficiency=0.5, dma_setup_cycles=10, slices=1)


def strided_program(strides=(1, 2, 2), offsets=(0, 1, 0), sizes=(3, 4, 5)):
    """out = x[o0::s0, o1::s1, o2::s2] (sizes elements per dim) of x 3 x 9 x 10, bf16."""
    pb = ProgramBuilder("strided", HW)
    x = pb.input((3, 9, 10), "bf16", "f32")
    out = pb.output(sizes, "bf16", "f32")
    buf = pb.dma_in(x, offsets, sizes)
    pb.commands[-1] = dataclasses.replace(pb.commands[-1], strides=tuple(strides))
    pb.dma_out(buf, out)
    return pb.build()


def x_input():
    return np.random.default_rng(0).standard_normal((3, 9, 10)).astype(np.float32)


@pytest.mark.parametrize("strides,offsets,sizes", [((1, 2, 2), (0, 1, 0), (3, 4, 5)), ((3, 1, 3), (0, 2, 1), (1, 7, 3))])
def test_strided_box_as_numpy_indexes_it(strides, offsets, sizes):
    x = x_input()
    (out,), _ = Simulator(HW).run(strided_program(strides, offsets, sizes), [x])
    bf16 = x.astype(ml_dtypes.bfloat16).astype(np.float32)
    ref = bf16[tuple(slice(o, o + (n - 1) * s + 1, s) for o, s, n in zip(offsets, strides, sizes))]
    np.testing.assert_array_equal(out, ref)


def test_ddr_bytes_count_the_span_of_a_strided_row():
    # Strided along the contiguous dim: each of the 3 x 4 rows spans 9 elements (bursts read the
    # skipped ones): 3 x 4 x 9 x 2 B = 216 B in; compulsory: the 60 elements read and the
    # 60 written, 2 B each.
    traffic = program_traffic(strided_program())
    assert (traffic.dma_bytes_in, traffic.dma_bytes_out, traffic.compulsory_bytes) == (216, 120, 240)
    # Strided along dim 1 only: 3 x 4 x 10 elements moved, nothing skipped within a row.
    traffic = program_traffic(strided_program((1, 2, 1), (0, 1, 0), (3, 4, 10)))
    assert traffic.dma_bytes_in == 240
    # Timing: the DMA-in moves 216 B: 10 setup + 54 link cycles; the DMA-out (120 B) after it,
    # 10 + 30: 104 cycles.
    _, stats = Simulator(HW).run(strided_program(), [x_input()], record_timeline=True)
    assert [e["end"] for e in stats.timeline["events"]] == [64, 104]


def test_round_trip_and_version():
    """A program with a strided DmaIn is a version 5 blob; one without keeps its version."""
    blob = serialize_program(strided_program())
    assert fbProgram.GetRootAs(blob).Version() == 5
    assert fbProgram.GetRootAs(serialize_program(conv_tiled_program())).Version() == 2
    back = parse_executable(blob)
    assert back.commands[0].strides == (1, 2, 2) and back.commands[0].strided
    (out,), _ = Simulator(HW).run(back, [x_input()])
    (ref,), _ = Simulator(HW).run(strided_program(), [x_input()])
    np.testing.assert_array_equal(out, ref)
    unit = strided_program((1, 1, 1))  # unit strides: a plain box, written as before
    assert serialize_program(unit) == serialize_program(dataclasses.replace(unit, commands=[
        dataclasses.replace(unit.commands[0], strides=()), unit.commands[1]]))


@pytest.mark.parametrize("mutate,message", [
    (lambda c: setattr(c, "strides", (1, 2)), r"DmaIn strides \(1, 2\) on tensor 0 of rank 3"),
    (lambda c: setattr(c, "strides", (1, 0, 2)), r"DmaIn strides \(1, 0, 2\)"),
    (lambda c: setattr(c, "strides", (1, 3, 2)), r"box \[0:3, 1:11, 0:9\] outside tensor 0"),
])
def test_validator_refuses_bad_strides(mutate, message):
    assert_refused(strided_program(), 0, mutate, message)


def test_a_strided_dma_in_a_version_4_blob_is_refused():
    blob = with_version(serialize_program(strided_program()), 4)
    with pytest.raises(ExecutableError, match="version 4 has no strided DMA"):
        parse_executable(blob)


def test_interleaved_strided_reads_need_every_element_once():
    """x[:, 0::2] and x[:, 1::2] of a 2 x 8 input: together they read all 16 elements, which
    no union of their spans counts (each span is 7 wide)."""
    pb = ProgramBuilder("interleaved", HW)
    x = pb.input((2, 8), "bf16", "f32")
    outs = [pb.output((2, 4), "bf16", "f32") for _ in range(2)]
    for start, out in zip((0, 1), outs):
        buf = pb.dma_in(x, (0, start), (2, 4))
        pb.commands[-1] = dataclasses.replace(pb.commands[-1], strides=(1, 2))
        pb.dma_out(buf, out)
    p = pb.build()
    xv = np.arange(16, dtype=np.float32).reshape(2, 8)
    (even, odd), _ = Simulator(HW).run(p, [xv])
    np.testing.assert_array_equal(even, xv[:, 0::2])
    np.testing.assert_array_equal(odd, xv[:, 1::2])
    # in: 2 rows x 7-element span x 2 B, twice; compulsory: 16 elements read, 16 written.
    traffic = program_traffic(p)
    assert (traffic.dma_bytes_in, traffic.compulsory_bytes) == (56, 64)
