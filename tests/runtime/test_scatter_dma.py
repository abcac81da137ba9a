"""The scatter form of DmaOut (contract/program.py): positions along one dim of a DDR tensor
chosen at run time by indices in LRAM (a KV-cache row written at the runtime position,
`cache[:, :, pos] = k`). Each result is checked against numpy's own indexing (the rest of an
in-place output against its input), the timing against hand-computed cycles, the format by
a round trip."""

from __future__ import annotations

import numpy as np
import pytest
from nss_builders import (
    ProgramBuilder,
    assert_refused,
    bf16_round,
    conv_tiled_program,
    index_buffer_faults,
    with_version,
)

from torq.contract.executable import ExecutableError, parse_executable, serialize_program
from torq.contract.hw import TorqHw
from torq.contract.measures import program_traffic
from torq.contract.schemas.torq_fb.Program import Program as fbProgram
from torq.runtime.simulator import Simulator, SimulatorError

# DMA: 8 B/cycle x 0.5 = 4 B/cycle effective, 10 cycles setup.
HW = TorqHw(dma_bytes_per_cycle=8, dma_efficiency=0.5, dma_setup_cycles=10, slices=1)
NP_INDEX = {"i32": np.int32, "i64": np.int64}


def kv_program(index_dtype: str = "i32", n: int = 1, length: int = 16, first: int = 0,
               dtype: str = "bf16", host: str = "f32"):
    """cache[:, :, first + idx[j], :] = k[:, :, j, :] for the n indices idx: the KV cache
    (2, 3, first + length, 8) is output 0, updated in place (it aliases input 2)."""
    pb = ProgramBuilder("kv_scatter", HW)
    k = pb.input((2, 3, n, 8), dtype, host)
    idx = pb.input((n,), index_dtype, index_dtype)
    past = pb.input((2, 3, first + length, 8), dtype, host)
    cache = pb.output((2, 3, first + length, 8), dtype, host)
    pb.tensors[cache].aliases = pb.tensors[past].arg_index
    kbuf = pb.dma_in(k)
    ibuf = pb.dma_in(idx)
    pb.dma_out(kbuf, cache, (0, 0, first, 0), (2, 3, n, 8), indices=(ibuf, index_dtype, length, 2))
    return pb.build()


def kv_inputs(idx, n: int = 1, length: int = 16, first: int = 0, index_dtype: str = "i32", seed: int = 0):
    """k, idx, the past cache: f32 values (most of which bf16 cannot hold)."""
    rng = np.random.default_rng(seed)
    k = rng.standard_normal((2, 3, n, 8)).astype(np.float32)
    past = rng.standard_normal((2, 3, first + length, 8)).astype(np.float32)
    return [k, np.asarray(idx, NP_INDEX[index_dtype]), past]


def rows_program(index_dtype: str = "i32"):
    """out[idx[j], :] = x[j, :] for the 4 indices idx (index dim 0, an output not in place)."""
    pb = ProgramBuilder("row_scatter", HW)
    x = pb.input((4, 5), "bf16", "f32")
    idx = pb.input((4,), index_dtype, index_dtype)
    out = pb.output((4, 5), "bf16", "f32")
    xbuf = pb.dma_in(x)
    ibuf = pb.dma_in(idx)
    pb.dma_out(xbuf, out, indices=(ibuf, index_dtype, 4, 0))
    return pb.build()


@pytest.mark.parametrize("index_dtype,n,first,idx", [
    ("i32", 1, 0, (7,)),  # the KV-cache row: box (2, 3, 1, 8) into (2, 3, 16, 8)
    ("i64", 3, 2, (5, 0, 15)),  # a box not at position 0 of its dim
    ("i32", 3, 2, (15, 4, 9)),
])
def test_positions_as_numpy_indexes_them(index_dtype, n, first, idx):
    p = kv_program(index_dtype, n, first=first)
    k, ids, past = kv_inputs(idx, n, first=first, index_dtype=index_dtype)
    past_before = past.copy()
    (cache,), _ = Simulator(HW).run(p, [k, ids, past])
    expected = past.copy()
    expected[:, :, first + ids.astype(np.int64), :] = bf16_round(k)
    # The rest of the cache is the input exactly (f32 values bf16 cannot hold).
    np.testing.assert_array_equal(cache, expected)
    np.testing.assert_array_equal(past, past_before)  # the caller's input is not written


def test_in_place_output_in_its_host_dtype():
    p = kv_program(n=2, dtype="f32", host="f32")
    k, ids, past = kv_inputs((3, 11), n=2)
    (cache,), _ = Simulator(HW).run(p, [k, ids, past])
    expected = past.copy()
    expected[:, :, [3, 11], :] = k
    np.testing.assert_array_equal(cache, expected)


def test_a_prepared_plan_writes_each_run_at_its_own_position():
    """The elements a scatter wrote are known only as it runs: a second run of the same plan
    at another position keeps the input at the first one."""
    p = kv_program()
    sim = Simulator(HW)
    plan = sim.prepare(p)
    for pos, seed in ((3, 0), (12, 1)):
        k, ids, past = kv_inputs((pos,), seed=seed)
        (cache,), _ = sim.run(p, [k, ids, past], plan=plan)
        expected = past.copy()
        expected[:, :, pos, :] = bf16_round(k[:, :, 0, :])
        np.testing.assert_array_equal(cache, expected)


@pytest.mark.parametrize("index_dtype", ["i32", "i64"])
def test_rows_of_an_output_as_numpy_indexes_them(index_dtype):
    x = np.random.default_rng(2).standard_normal((4, 5)).astype(np.float32)
    idx = np.asarray((2, 0, 3, 1), NP_INDEX[index_dtype])
    (out,), _ = Simulator(HW).run(rows_program(index_dtype), [x, idx])
    expected = np.zeros((4, 5), np.float32)
    expected[idx] = bf16_round(x)
    np.testing.assert_array_equal(out, expected)


def test_equal_indices_keep_the_later_position():
    x = np.random.default_rng(2).standard_normal((4, 5)).astype(np.float32)
    idx = np.asarray((1, 3, 1, 0), np.int32)
    (out,), _ = Simulator(HW).run(rows_program(), [x, idx])
    expected = np.zeros((4, 5), np.float32)  # row 2: never written
    for j, r in enumerate(idx):  # in order
        expected[r] = bf16_round(x[j])
    np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("bad", [16, -1, 1 << 40])
def test_index_outside_its_bound_fails_naming_it(bad):
    p = kv_program("i64", n=3, first=2)
    with pytest.raises(SimulatorError, match=rf"command 2 \(DmaOut scatter\): index {bad} at position 1 is "
                                             rf"outside \[0, 16\) of tensor 3"):
        Simulator(HW).run(p, kv_inputs((1, bad, 2), n=3, first=2, index_dtype="i64"))


def test_timing_one_descriptor_per_position():
    # k: 2 x 3 x 3 x 8 bf16 = 288 B -> 10 setup + 72 link = 82.
    # Indices: 3 x 4 B = 12 B, after k on the DMA-in engine: 82 + 10 + 3 = 95.
    # Scatter: 3 positions, so 3 x 10 setup; it waits for the indices (RAW on their buffer,
    # command 1), then 288 B -> 72 link cycles: 95 + 30 + 72 = 197.
    p = kv_program(n=3, first=2)
    _, stats = Simulator(HW).run(p, kv_inputs((5, 0, 15), n=3, first=2), record_timeline=True)
    events = stats.timeline["events"]
    assert [e["end"] for e in events] == [82, 95, 197]
    assert events[2]["waited_for"] == 1
    traffic = program_traffic(p)
    # compulsory: k (288 B), the indices (12 B), the 3 positions written into the cache in
    # place (288 B); the cache's other elements stay where they are.
    assert (traffic.dma_bytes_in, traffic.dma_bytes_out, traffic.compulsory_bytes) == (300, 288, 588)
    assert (stats.dma_bytes_in, stats.dma_bytes_out, stats.compulsory_bytes) == (300, 288, 588)


def scratch_program():
    """x (1, 16) scattered into row idx[0] of a scratch (4, 16), whose row 3 is read back into
    the output: that read may see the scatter's row, so it waits for it."""
    pb = ProgramBuilder("scratch_scatter", HW)
    x = pb.input((1, 16), "bf16", "f32")
    idx = pb.input((1,), "i32", "i32")
    s = pb.scratch((4, 16), "bf16")
    out = pb.output((1, 16), "bf16", "f32")
    ibuf = pb.dma_in(idx)
    xbuf = pb.dma_in(x)
    pb.dma_out(xbuf, s, (0, 0), (1, 16), indices=(ibuf, "i32", 4, 0))
    rbuf = pb.dma_in(s, (3, 0), (1, 16))
    pb.dma_out(rbuf, out)
    return pb.build()


def test_ddr_hazards_cover_every_position_it_may_write():
    # Indices: 4 B -> 10 + 1 = 11. x: 32 B -> 11 + 10 + 8 = 29. Scatter: 1 position after x:
    # 29 + 10 + 8 = 47. The read of scratch row 3 (outside the scatter's box at row 0, inside
    # the rows 0..3 it may write) waits for it (DDR RAW): 47 + 10 + 8 = 65. Out: 65 + 18 = 83.
    x = np.random.default_rng(4).standard_normal((1, 16)).astype(np.float32)
    _, stats = Simulator(HW).run(scratch_program(), [x, np.asarray([3], np.int32)], record_timeline=True)
    events = stats.timeline["events"]
    assert [e["end"] for e in events] == [11, 29, 47, 65, 83]
    assert events[3]["waited_for"] == 2
    (out,), _ = Simulator(HW).run(scratch_program(), [x, np.asarray([3], np.int32)])
    np.testing.assert_array_equal(out, bf16_round(x))
    (out,), _ = Simulator(HW).run(scratch_program(), [x, np.asarray([1], np.int32)])
    np.testing.assert_array_equal(out, np.zeros((1, 16), np.float32))


def gather_only_program():
    pb = ProgramBuilder("gather", HW)
    table = pb.input((6, 4), "bf16", "f32")
    idx = pb.input((2,), "i32", "i32")
    out = pb.output((2, 4), "bf16", "f32")
    ibuf = pb.dma_in(idx)
    pb.dma_out(pb.dma_in(table, (0, 0), (2, 4), indices=(ibuf, "i32", 6)), out)
    return pb.build()


def test_round_trip_and_version():
    """A program with a scatter is a version 4 blob; one without keeps its version (3 with a
    gather, else 2)."""
    p = kv_program("i64", n=3, first=2)
    blob = serialize_program(p)
    assert fbProgram.GetRootAs(blob).Version() == 4
    assert fbProgram.GetRootAs(serialize_program(gather_only_program())).Version() == 3
    assert fbProgram.GetRootAs(serialize_program(conv_tiled_program())).Version() == 2
    back = parse_executable(blob)
    assert back == p
    s = back.commands[2]
    assert (s.index_buffer, s.index_dtype, s.index_bound, s.index_dim) == (1, "i64", 16, 2)
    assert back.commands[0].index_buffer == -1 and back.tensors[1].dtype == "i64"
    inputs = kv_inputs((5, 0, 15), n=3, first=2, index_dtype="i64")
    (out,), _ = Simulator(HW).run(back, inputs)
    (ref,), _ = Simulator(HW).run(p, inputs)
    np.testing.assert_array_equal(out, ref)
    rows = rows_program()  # index dim 0: the field's default, not stored
    assert parse_executable(serialize_program(rows)) == rows


@pytest.mark.parametrize("version", [2, 3])
def test_a_scatter_in_an_older_blob_is_refused(version):
    blob = with_version(serialize_program(kv_program()), version)
    with pytest.raises(ExecutableError, match=rf"version {version} has no scatter DMA \(version 4\)"):
        parse_executable(blob)


@pytest.mark.parametrize("mutate,message", [
    (lambda c: setattr(c, "index_dtype", "i16"), "scatter indices of dtype 'i16'"),
    (lambda c: setattr(c, "index_bound", 17), r"box \[0:2, 0:3, 0:17, 0:8\] outside tensor 3"),
    (lambda c: setattr(c, "index_bound", 0), "scatter of 4-D box with index bound 0"),
    (lambda c: setattr(c, "index_dim", 4), "scatter along dim 4 of tensor 3 of rank 4"),
    (lambda c: setattr(c, "index_dim", -1), "scatter along dim -1 of tensor 3 of rank 4"),
    (lambda c: setattr(c, "index_dim", 1), r"box \[0:2, 0:16, 0:1, 0:8\] outside tensor 3"),
    *index_buffer_faults("scatter"),
])
def test_validator_refuses_bad_scatters(mutate, message):
    assert_refused(kv_program(), 2, mutate, message)


def test_index_buffer_too_small_padded_or_bad_is_refused():
    p = kv_program(n=3)
    p.commands[2].index_dtype = "i64"  # 3 i64 indices in the buffer of 3 i32 ones
    with pytest.raises(ExecutableError, match="DmaOut scatter indices needs 24 bytes but LRAM buffer 1 has 12"):
        serialize_program(p)
    p = kv_program(n=3)
    p.buffers[1].shape, p.buffers[1].padded_shape, p.buffers[1].size = (3,), (8,), 64
    with pytest.raises(ExecutableError, match="reads its indices from padded LRAM buffer 1"):
        serialize_program(p)
    p = conv_tiled_program()
    out = next(c for c in p.commands if type(c).__name__ == "DmaOut")
    out.index_buffer = -2
    with pytest.raises(ExecutableError, match=r"DmaOut index buffer -2 \(-1 for none\)"):
        serialize_program(p)


def test_nss_ir_round_trip_shows_the_scatter_fields_only_when_scattering():
    ir = pytest.importorskip("iree.compiler.ir")
    from torq.compiler.nss_ir import function_to_program, program_to_function

    for p in (kv_program("i64", n=3, first=2), rows_program(), conv_tiled_program()):
        with ir.Context() as ctx, ir.Location.unknown():
            ctx.allow_unregistered_dialects = True
            module = ir.Module.parse("func.func @f() { return }")
            func = module.body.operations[0].operation
            program_to_function(p, func)
            text = str(module)
            assert ("index_dim" in text) == any(getattr(c, "scatters", False) for c in p.commands)
            assert function_to_program(func).commands == p.commands
