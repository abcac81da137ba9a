"""The gather form of DmaIn (contract/program.py): rows of a DDR tensor chosen at run time
by indices in LRAM (an embedding lookup). Each result is checked against numpy's own
indexing, the timing against hand-computed cycles, the format by a round trip."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from nss_builders import ProgramBuilder, assert_refused, conv_tiled_program, index_buffer_faults, with_version

from torq.contract.executable import ExecutableError, parse_executable, serialize_program
from torq.contract.hw import TorqHw
from torq.contract.measures import program_traffic
from torq.contract.schemas.torq_fb.Program import Program as fbProgram
from torq.runtime.simulator import Simulator, SimulatorError

# DMA: 8 B/cycle x 0.5 = 4 B/cycle effective, 10 cycles setup.
HW = TorqHw(dma_bytes_per_cycle=8, dma_efficiency=0.5, dma_setup_cycles=10, slices=1)


def gather_program(rows: int = 20, width: int = 6, n: int = 4, index_dtype: str = "i64", first_row: int = 0):
    """out[j, :] = table[first_row + idx[j], 2:2 + width] for the n indices idx."""
    pb = ProgramBuilder("gather", HW)
    table = pb.input((first_row + rows, width + 3), "bf16", "f32")
    idx = pb.input((n,), index_dtype, index_dtype)
    out = pb.output((n, width), "bf16", "f32")
    ibuf = pb.dma_in(idx)
    rbuf = pb.dma_in(table, (first_row, 2), (n, width), indices=(ibuf, index_dtype, rows))
    pb.dma_out(rbuf, out)
    return pb.build()


def table_and_indices(rows=20, width=6, first_row=0, idx=(3, 0, 19, 3), dtype=np.int64):
    rng = np.random.default_rng(0)
    t = rng.standard_normal((first_row + rows, width + 3)).astype(np.float32)
    return t, np.asarray(idx, dtype)


@pytest.mark.parametrize("index_dtype,np_dtype", [("i64", np.int64), ("i32", np.int32)])
def test_rows_as_numpy_indexes_them(index_dtype, np_dtype):
    t, idx = table_and_indices(first_row=5, dtype=np_dtype)
    (out,), _ = Simulator(HW).run(gather_program(index_dtype=index_dtype, first_row=5), [t, idx])
    bf16 = t.astype(ml_dtypes.bfloat16).astype(np.float32)
    np.testing.assert_array_equal(out, bf16[5 + idx.astype(np.int64), 2:8])


@pytest.mark.parametrize("bad", [20, -1, 1 << 40])
def test_index_outside_its_bound_fails_naming_it(bad):
    t, idx = table_and_indices(idx=(1, bad, 2, 3))
    with pytest.raises(SimulatorError, match=rf"command 1 \(DmaIn gather\): index {bad} at position 1 is outside \[0, 20\)"):
        Simulator(HW).run(gather_program(), [t, idx])


def test_timing_one_descriptor_per_row():
    # Indices: 4 x 8 B = 32 B -> 10 setup + 8 link = 18 cycles.
    # Gather: 4 rows, so 4 x 10 setup; 4 x 6 x 2 B = 48 B -> 12 link cycles; it waits for the
    # indices (RAW on their buffer): 18 + 40 + 12 = 70.
    # DmaOut: 48 B after the gather: 70 + 10 + 12 = 92.
    _, stats = Simulator(HW).run(gather_program(), list(table_and_indices()), record_timeline=True)
    ends = [e["end"] for e in stats.timeline["events"]]
    assert ends == [18, 70, 92]
    traffic = program_traffic(gather_program())
    # compulsory: the indices (32 B), the 4 gathered rows (48 B), the output (48 B)
    assert (traffic.dma_bytes_in, traffic.dma_bytes_out, traffic.compulsory_bytes) == (80, 48, 128)


def test_round_trip_and_version():
    """A program with a gather is a version 3 blob; one without stays version 2."""
    p = gather_program()
    blob = serialize_program(p)
    assert fbProgram.GetRootAs(blob).Version() == 3
    assert fbProgram.GetRootAs(serialize_program(conv_tiled_program())).Version() == 2
    back = parse_executable(blob)
    g = back.commands[1]
    assert (g.index_buffer, g.index_dtype, g.index_bound) == (0, "i64", 20)
    assert back.commands[0].index_buffer == -1 and back.tensors[1].dtype == "i64"
    (out,), _ = Simulator(HW).run(back, list(table_and_indices()))
    (ref,), _ = Simulator(HW).run(p, list(table_and_indices()))
    np.testing.assert_array_equal(out, ref)


@pytest.mark.parametrize("mutate,message", [
    (lambda c: setattr(c, "index_dtype", "i8"), "gather indices of dtype 'i8'"),
    (lambda c: setattr(c, "index_bound", 21), r"box \[0:21, 2:8\] outside tensor 0"),
    *index_buffer_faults("gather"),
])
def test_validator_refuses_bad_gathers(mutate, message):
    assert_refused(gather_program(), 1, mutate, message)


def test_a_gather_in_a_version_2_blob_is_refused():
    blob = with_version(serialize_program(gather_program()), 2)
    with pytest.raises(ExecutableError, match="version 2 has no gather DMA or i64 tensor"):
        parse_executable(blob)


def test_padded_index_buffer_and_bad_index_buffer_are_refused():
    p = gather_program()
    p.buffers[0].shape, p.buffers[0].padded_shape, p.buffers[0].size = (4,), (8,), 64
    with pytest.raises(ExecutableError, match="reads its indices from padded LRAM buffer 0"):
        serialize_program(p)
    p = gather_program()
    p.commands[0].index_buffer = -2
    with pytest.raises(ExecutableError, match="DmaIn index buffer -2"):
        serialize_program(p)
