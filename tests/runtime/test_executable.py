"""Torq executable serialization: exact round trip, schema sync, refusals."""

from __future__ import annotations

import dataclasses
import random
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from nss_builders import ProgramBuilder, const, conv_tiled_program, step, val

from torq.contract import executable
from torq.contract.executable import (
    SCHEMA_PATH,
    ExecutableError,
    executable_schema,
    parse_executable,
    serialize_program,
)
from torq.contract.hw import TorqHw
from torq.contract.program import DTYPE_BYTES, Compute

SCHEMAS = SCHEMA_PATH.parent


def rich_program():
    """Uses every field kind: all attr kinds, all ref kinds, cast, scratch, long data."""
    p = conv_tiled_program(relu6=True)
    c: Compute = p.commands[3]
    c.attrs.update({"name": "conv", "scale": 0.125, "scales": [0.5, 1.5], "empty": [], "neg": -7})
    c.epilogue.steps.append(step("cast", val(3), to="bf16"))
    c.epilogue.result = 3
    c.split = 2  # a compute split over both slices
    p.tensors.append(dataclasses.replace(p.tensors[0], index=len(p.tensors), kind="scratch", arg_index=-1))
    p.lram_peak = 1584
    return p


@pytest.mark.parametrize("make", [conv_tiled_program, rich_program])
def test_round_trip_exact(make):
    p = make()
    blob = serialize_program(p)
    q = parse_executable(blob)
    assert q == p
    assert serialize_program(q) == blob
    assert parse_executable(memoryview(bytearray(blob))) == p


def test_blob_without_split_reads_one_slice():
    # Serialized before Compute.split existed (tests/runtime/test_inplace_outputs.py): every
    # compute reads split = 1; a program with no split compute writes no split field.
    old = parse_executable((Path(__file__).parent / "data" / "conv_tiled_relu6_v1.torqx").read_bytes())
    assert [c.split for c in old.commands if isinstance(c, Compute)] == [1, 1]
    p = conv_tiled_program()
    blob = serialize_program(p)
    p.commands[3].split = 2
    assert len(serialize_program(p)) > len(blob) and parse_executable(serialize_program(p)).commands[3].split == 2


def test_round_trip_completes_partial_hw_dict():
    p = conv_tiled_program()
    p.hw = {"lram_kb": 256}
    q = parse_executable(serialize_program(p))
    assert q.hw == TorqHw(lram_kb=256).to_dict()


def test_schema_matches_torq_hw_and_dtypes():
    schema = executable_schema()
    assert [f.name for f in schema.tables["Hw"]] == [f.name for f in dataclasses.fields(TorqHw)]
    assert set(schema.enums["DType"]) == set(DTYPE_BYTES)
    assert re.search(r'file_identifier\s+"TORQ"', SCHEMA_PATH.read_text())


@pytest.mark.skipif(shutil.which("flatc") is None, reason="flatc not installed")
def test_generated_code_is_up_to_date(tmp_path):
    subprocess.run(["flatc", "--python", "-o", str(tmp_path), str(SCHEMA_PATH)], check=True)
    for gen in sorted((tmp_path / "torq_fb").glob("*.py")):
        text = re.sub(r"(?m)^( *)from torq_fb\.(\w+) import ", r"\1from .\2 import ", gen.read_text())
        assert text == (SCHEMAS / "torq_fb" / gen.name).read_text(), f"{gen.name}: run build_tools/regen_schema.sh"


# ---------------------------------------------------------------- refusals


def test_too_short():
    for blob in (b"", b"TORQ", b"\x00" * 7):
        with pytest.raises(ExecutableError, match=r"too short: \d+ bytes"):
            parse_executable(blob)


def test_truncated():
    blob = serialize_program(conv_tiled_program())
    for n in (8, 12, len(blob) // 4, len(blob) // 2, len(blob) - 100):
        with pytest.raises(ExecutableError, match="truncated or corrupted"):
            parse_executable(blob[:n])


def test_bad_identifier():
    blob = bytearray(serialize_program(conv_tiled_program()))
    blob[4:8] = b"TFL3"
    with pytest.raises(ExecutableError, match=r"not a Torq executable: file identifier b'TFL3', expected b'TORQ'"):
        parse_executable(bytes(blob))


def test_bad_version(monkeypatch):
    monkeypatch.setattr(executable.writer, "blob_version", lambda p: 99)
    blob = serialize_program(conv_tiled_program())
    monkeypatch.undo()
    with pytest.raises(ExecutableError, match=r"unsupported Torq executable version 99 \(this runtime reads versions 1, 2, 3, 4, 5\)"):
        parse_executable(blob)


def test_lram_map_beyond_device():
    pb = ProgramBuilder("big_offset")
    x, y = pb.input((8,)), pb.output((8,))
    b = pb.buffer(16, offset=100000)
    pb.dma_in(x, buffer=b)
    pb.dma_out(b, y)
    blob = serialize_program(pb.build())  # fits the 512 KiB it was built for
    assert parse_executable(blob).buffers[0].offset == 100000
    msg = r"LRAM buffer 0 \[100000, 100016\) needs 100016 bytes of LRAM but the device \(SL2610:lram_kb=64\) has 65536 bytes"
    with pytest.raises(ExecutableError, match=msg):
        parse_executable(blob, hw=TorqHw(lram_kb=64))
    # Without `hw`, the program's own hardware is the limit.
    p = pb.build()
    p.hw = TorqHw(lram_kb=64).to_dict()
    with pytest.raises(ExecutableError, match="has 65536 bytes"):
        parse_executable(serialize_program(p, check=False))
    with pytest.raises(ExecutableError, match="has 65536 bytes"):
        serialize_program(p)  # refused at compile time too


def _read_back(p, offsets) -> None:
    """Command 5 reads a 1x4x4x8 box of the output (tensor 3) instead of the input."""
    p.commands[5] = dataclasses.replace(p.commands[5], tensor=3, offsets=offsets, sizes=(1, 4, 4, 8))


def test_an_output_box_written_before_may_be_read_back():
    # A value both returned and read after its group's tile loop (RepViT's pooled features
    # and their batch norm): rows 0..4 were written by command 4.
    parse_executable(corrupt(lambda p: _read_back(p, (0, 0, 0, 0))))


def corrupt(mutate) -> bytes:
    p = conv_tiled_program()
    mutate(p)
    return serialize_program(p, check=False)


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda p: setattr(p.tensors[1], "data", p.tensors[1].data[:-2]), r"constant tensor 1 has 574 bytes of data, .* needs 576"),
        (lambda p: setattr(p.commands[2], "offsets", (0, 0, 5, 0)), r"command 2: DmaIn box \[0:1, 0:4, 5:11, 0:10\] outside tensor 0 of shape \(1, 4, 10, 10\)"),
        (lambda p: setattr(p.commands[3].result, "shape", (1, 8, 5, 8)), r"command 3: result needs 640 bytes but LRAM buffer 3 has 512"),
        (lambda p: setattr(p.commands[3], "operands", p.commands[3].operands[:2]), r"command 3 epilogue step 0 \(add\): operand 2 out of range"),
        (lambda p: setattr(p.commands[3].epilogue.steps[0], "op", "pow"), r"step 0 \(pow\): unknown op"),
        (lambda p: setattr(p.commands[3].epilogue.steps[0].args[0], "index", 1), r"value 1 is not computed yet"),
        (lambda p: setattr(p.commands[2], "tensor", 9), r"command 2: DmaIn names unknown tensor 9"),
        (lambda p: setattr(p.commands[4], "tensor", 1), r"command 4: DmaOut on tensor 1 of kind constant"),
        # Rows 4..8 of the output are written by command 7, after this read.
        (lambda p: _read_back(p, (0, 0, 4, 0)), r"command 5: DmaIn reads output tensor 3 where no earlier DmaOut wrote"),
        (lambda p: setattr(p.buffers[0], "live_end", 8), r"buffer 0 has live range \[0, 8\] outside commands 0..7"),
        (lambda p: setattr(p.commands[3], "split", 0), r"command 3: split over 0 slices \(at least 1\)"),
        (lambda p: p.commands[3].epilogue.steps.append(step("lut", val(1), *[const(0)] * 257, to="i8")),
         r"step 1 \(lut\): 257 table entries, expected 1 to 256"),
        (lambda p: p.commands[3].epilogue.steps.append(step("lut", val(1), const(0), const(200), to="i8")),
         r"step 1 \(lut\): table entry 1 = 200.0 is no i8 value"),
        (lambda p: p.commands[3].epilogue.steps.append(step("lut", val(1), const(0), val(0), to="i8")),
         r"step 1 \(lut\): table entry 1 is a value, not a constant"),
    ],
)
def test_inconsistent_contents(mutate, message):
    with pytest.raises(ExecutableError, match=message):
        parse_executable(corrupt(mutate))


def test_random_corruption_never_escapes_as_other_errors():
    """Byte flips give ExecutableError or a program that passed every check."""
    blob = serialize_program(rich_program())
    rng = random.Random(1234)
    refused = 0
    for _ in range(300):
        b = bytearray(blob)
        for _ in range(rng.randint(1, 4)):
            b[rng.randrange(8, len(b))] = rng.randrange(256)
        try:
            parse_executable(bytes(b))
        except ExecutableError as e:
            assert "\n" not in str(e)
            refused += 1
    assert refused > 30


def test_vtable_offsets_pointing_outside_are_refused():
    blob = bytearray(serialize_program(conv_tiled_program()))
    root = int.from_bytes(blob[0:4], "little")
    blob[root : root + 4] = (-(1 << 30)).to_bytes(4, "little", signed=True)  # vtable far past the end
    with pytest.raises(ExecutableError, match="vtable of Program"):
        parse_executable(bytes(blob))
    blob = bytearray(serialize_program(conv_tiled_program()))
    blob[0:4] = (len(blob) + 16).to_bytes(4, "little")
    with pytest.raises(ExecutableError, match="table Program at byte"):
        parse_executable(bytes(blob))


def test_serialize_rejects_unknown_hw_field_and_attr_value():
    p = conv_tiled_program()
    p.hw = {**p.hw, "warp_drive": 1}
    with pytest.raises(ExecutableError, match="warp_drive"):
        serialize_program(p, check=False)
    p = conv_tiled_program()
    p.commands[3].attrs["bad"] = {"x": 1}
    with pytest.raises(ExecutableError, match="attr 'bad' has unsupported value"):
        serialize_program(p)


def test_constant_data_is_carried_bit_exact():
    p = conv_tiled_program()
    q = parse_executable(serialize_program(p))
    assert q.tensors[1].data == p.tensors[1].data and len(q.tensors[1].data) == 576
    assert np.frombuffer(q.tensors[2].data, np.uint16).tolist() == np.frombuffer(p.tensors[2].data, np.uint16).tolist()


def _with_lut(table: list[float]):
    p = conv_tiled_program()
    c: Compute = p.commands[3]
    c.epilogue.steps.append(step("cast", val(len(c.epilogue.steps) - 1), to="i8"))
    c.epilogue.steps.append(step("lut", val(len(c.epilogue.steps) - 1), *[const(v) for v in table], to="i8"))
    c.epilogue.result = len(c.epilogue.steps) - 1
    return p


def test_equal_table_entries_are_written_once():
    # A lookup table's entries are constants, most of them repeats (an activation saturates):
    # the writer shares one table per distinct entry, and the program reads back the same.
    repeats = [-90.0] * 100 + [0.0] * 56 + [float(v) for v in range(100)]
    distinct = [float(v) for v in range(-128, 128)]
    for table in (repeats, distinct):
        p = _with_lut(table)
        q = parse_executable(serialize_program(p))
        assert q == p and [r.const for r in q.commands[3].epilogue.steps[-1].args[1:]] == table
    saved = len(serialize_program(_with_lut(distinct))) - len(serialize_program(_with_lut(repeats)))
    assert saved >= 150 * 16  # 154 repeated entries, each a table of at least 16 bytes written no more


def test_negative_zero_constant_keeps_its_sign():
    # -0.0 equals the const field's default: FlatBuffers left it out and it read back as 0.0.
    q = parse_executable(serialize_program(_with_lut([-0.0, 0.0, -0.0])))
    consts = [r.const for r in q.commands[3].epilogue.steps[-1].args[1:]]
    assert consts == [0.0] * 3 and [np.copysign(1.0, c) for c in consts] == [-1.0, 1.0, -1.0]
