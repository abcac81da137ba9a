"""The Torq executable: a `Program` serialized as FlatBuffers, and its loader.

Contract:
- `serialize_program(p)` writes `p` with the schema in
  `schemas/torq_executable.fbs` (file identifier "TORQ", `FORMAT_VERSION`).
  By default it first runs `validate_program(p)` against the program's own
  hardware, so a compiler bug is reported at compile time.
- `parse_executable(blob, hw)` checks the blob completely BEFORE anything runs
  and returns the `Program`, or raises `ExecutableError` (a `ValueError`)
  with a one-line message: too short / truncated, wrong file identifier,
  unsupported version (`READABLE_VERSIONS`), corrupted structure (every offset, vector and string
  is bounds-checked against the blob by a verifier driven by the schema, since
  the Python flatbuffers package has none), inconsistent contents (see
  `validate_program`), or an LRAM map that does not fit the device (`hw`, or
  the hardware the program was compiled for when `hw` is None).
- Round trip is exact: `parse_executable(serialize_program(p)) == p` for a
  valid program whose `hw` is a full `TorqHw.to_dict()` and whose attribute
  lists are `list`s (tuples come back as lists; a partial `hw` dict comes back
  completed with `TorqHw` defaults), and serializing the parsed program gives
  the same bytes.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import flatbuffers
import numpy as np

from .hw import TorqHw
from .ops import OPS, OpError

from .program import (
    DTYPE_BYTES,
    nbytes,
    EPILOGUE_INT_TYPES,
    EPILOGUE_OPS,
    Command,
    Compute,
    DmaIn,
    DmaOut,
    Epilogue,
    EpilogueStep,
    LramBuffer,
    Operand,
    Program,
    LUT,
    MAX_LUT_ENTRIES,
    TABLE_OPS,
    Ref,
    TensorDesc,
)
from .schemas.torq_fb import Attr as fbAttr
from .schemas.torq_fb import CommandEntry as fbCommandEntry
from .schemas.torq_fb import Compute as fbCompute
from .schemas.torq_fb import DmaIn as fbDmaIn
from .schemas.torq_fb import DmaOut as fbDmaOut
from .schemas.torq_fb import Epilogue as fbEpilogue
from .schemas.torq_fb import EpilogueStep as fbEpilogueStep
from .schemas.torq_fb import Hw as fbHw
from .schemas.torq_fb import LramBuffer as fbLramBuffer
from .schemas.torq_fb import Operand as fbOperand
from .schemas.torq_fb import Program as fbProgram
from .schemas.torq_fb import Ref as fbRef
from .schemas.torq_fb import TensorDesc as fbTensorDesc
from .schemas.torq_fb.AttrKind import AttrKind
from .schemas.torq_fb.Command import Command as CommandType
from .schemas.torq_fb.DType import DType
from .schemas.torq_fb.RefKind import RefKind
from .schemas.torq_fb.TensorKind import TensorKind

FILE_IDENTIFIER = b"TORQ"
# Bump when a reader of the previous version could misread a new blob.
# `version` must stay the first field of table Program in every version.
# 2: TensorDesc.aliases (in-place outputs; a version 1 reader would ignore it
#    and leave the untouched part of such an output zero).
# Compute.split (a compute run on several slices at once) was appended without a bump:
# it changes timing only, a blob without it reads split = 1, and a reader without it
# computes the same outputs.
FORMAT_VERSION = 2
# Versions this reader parses: a version 1 blob is a version 2 blob without aliases.
READABLE_VERSIONS = (1, 2)
SCHEMA_PATH = Path(__file__).parent / "schemas" / "torq_executable.fbs"

_HEADER_BYTES = 8  # root offset + file identifier


class ExecutableError(ValueError):
    """A Torq executable that cannot be run: the message says why, in one line."""


# --------------------------------------------------------------------------
# Enum mappings (data model strings <-> schema enums)

_DTYPES: dict[str, int] = {name: getattr(DType, name) for name in DTYPE_BYTES}
_TENSOR_KINDS: dict[str, int] = {
    "input": TensorKind.Input,
    "output": TensorKind.Output,
    "constant": TensorKind.Constant,
    "scratch": TensorKind.Scratch,
}
_REF_KINDS: dict[str, int] = {"value": RefKind.Value, "operand": RefKind.Operand, "const": RefKind.Const}
_COMMANDS: dict[type, int] = {DmaIn: CommandType.DmaIn, DmaOut: CommandType.DmaOut, Compute: CommandType.Compute}


def _inverse(d: dict[str, int]) -> dict[int, str]:
    return {v: k for k, v in d.items()}


def _camel(name: str) -> str:
    """flatc's Python accessor name for a snake_case field."""
    return "".join(part[:1].upper() + part[1:] for part in name.split("_"))


_HW_FIELDS = [(f.name, type(getattr(TorqHw(), f.name))) for f in dataclasses.fields(TorqHw)]


def _check_hw_schema() -> None:
    missing = [name for name, _ in _HW_FIELDS if not hasattr(fbHw, "Add" + _camel(name))]
    if missing:
        raise ExecutableError(
            f"the executable schema lacks TorqHw fields {missing}: add them to table Hw in "
            "contract/schemas/torq_executable.fbs and run build_tools/regen_schema.sh"
        )


# --------------------------------------------------------------------------
# Serialization


def serialize_program(p: Program, *, check: bool = True) -> bytes:
    """Serializes `p` as a Torq executable (validated first unless check=False)."""
    if check:
        validate_program(p)
    try:
        return _Writer(p).build()
    except (KeyError, TypeError, struct.error, ValueError) as e:
        raise ExecutableError(f"cannot serialize program '{p.name}': {e}") from None


class _Writer:
    def __init__(self, p: Program) -> None:
        self.p = p
        self.b = flatbuffers.Builder(4096 + sum(len(t.data) for t in p.tensors))

    def build(self) -> bytes:
        b, p = self.b, self.p
        name = b.CreateString(p.name)
        hw = self.hw(p.hw)
        tensors = self.tables([self.tensor(t) for t in p.tensors])
        buffers = self.tables([self.buffer(x) for x in p.buffers])
        commands = self.tables([self.command(c) for c in p.commands])
        fbProgram.Start(b)
        fbProgram.AddVersion(b, FORMAT_VERSION)
        fbProgram.AddName(b, name)
        fbProgram.AddHw(b, hw)
        fbProgram.AddTensors(b, tensors)
        fbProgram.AddBuffers(b, buffers)
        fbProgram.AddCommands(b, commands)
        fbProgram.AddTiles(b, p.tiles)
        fbProgram.AddLramPeak(b, p.lram_peak)
        b.Finish(fbProgram.End(b), file_identifier=FILE_IDENTIFIER)
        return bytes(b.Output())

    # helpers
    def tables(self, offsets: list[int]) -> int:
        self.b.StartVector(4, len(offsets), 4)
        for off in reversed(offsets):
            self.b.PrependUOffsetTRelative(off)
        return self.b.EndVector()

    def longs(self, values: Any) -> int:
        return self.b.CreateNumpyVector(np.asarray([int(v) for v in values], dtype="<i8").reshape(-1))

    def doubles(self, values: Any) -> int:
        return self.b.CreateNumpyVector(np.asarray([float(v) for v in values], dtype="<f8").reshape(-1))

    def hw(self, d: dict) -> int:
        unknown = set(d) - {name for name, _ in _HW_FIELDS}
        if unknown:
            raise ValueError(f"hw has fields TorqHw does not know: {sorted(unknown)}")
        _check_hw_schema()
        full = TorqHw.from_dict(d).to_dict()
        name = self.b.CreateString(str(full["name"]))
        fbHw.Start(self.b)
        fbHw.AddName(self.b, name)
        for field, typ in _HW_FIELDS:
            if field != "name":
                getattr(fbHw, "Add" + _camel(field))(self.b, typ(full[field]))
        return fbHw.End(self.b)

    def tensor(self, t: TensorDesc) -> int:
        b = self.b
        shape = self.longs(t.shape)
        data = b.CreateByteVector(bytes(t.data)) if t.data else 0
        fbTensorDesc.Start(b)
        fbTensorDesc.AddIndex(b, t.index)
        fbTensorDesc.AddKind(b, _TENSOR_KINDS[t.kind])
        fbTensorDesc.AddShape(b, shape)
        fbTensorDesc.AddDtype(b, _DTYPES[t.dtype])
        fbTensorDesc.AddHostDtype(b, _DTYPES[t.host_dtype])
        fbTensorDesc.AddArgIndex(b, t.arg_index)
        if data:
            fbTensorDesc.AddData(b, data)
        fbTensorDesc.AddAliases(b, t.aliases)
        return fbTensorDesc.End(b)

    def buffer(self, x: LramBuffer) -> int:
        b = self.b
        shape = self.longs(x.shape) if x.shape else 0
        padded = self.longs(x.padded_shape) if x.padded_shape else 0
        fbLramBuffer.Start(b)
        fbLramBuffer.AddId(b, x.id)
        fbLramBuffer.AddOffset(b, x.offset)
        fbLramBuffer.AddSize(b, x.size)
        fbLramBuffer.AddLiveStart(b, x.live_start)
        fbLramBuffer.AddLiveEnd(b, x.live_end)
        if shape:
            fbLramBuffer.AddShape(b, shape)
        if padded:
            fbLramBuffer.AddPaddedShape(b, padded)
        return fbLramBuffer.End(b)

    def operand(self, o: Operand) -> int:
        b = self.b
        shape = self.longs(o.shape)
        fbOperand.Start(b)
        fbOperand.AddBuffer(b, o.buffer)
        fbOperand.AddShape(b, shape)
        fbOperand.AddDtype(b, _DTYPES[o.dtype])
        return fbOperand.End(b)

    def attr(self, key: str, value: Any) -> int:
        b = self.b
        k = b.CreateString(key)
        ints = floats = s = 0
        if isinstance(value, str):
            kind, s = AttrKind.Str, b.CreateString(value)
        elif isinstance(value, (bool, int, np.integer)):
            kind, ints = AttrKind.Int, self.longs([value])
        elif isinstance(value, (float, np.floating)):
            kind, floats = AttrKind.Float, self.doubles([value])
        elif isinstance(value, (list, tuple)) and all(isinstance(v, (bool, int, np.integer)) for v in value):
            kind, ints = AttrKind.Ints, self.longs(value)
        elif isinstance(value, (list, tuple)) and all(isinstance(v, (int, float, np.number)) for v in value):
            kind, floats = AttrKind.Floats, self.doubles(value)
        else:
            raise TypeError(f"attr '{key}' has unsupported value {value!r} (str, int, float or lists)")
        fbAttr.Start(b)
        fbAttr.AddKey(b, k)
        fbAttr.AddKind(b, kind)
        if ints:
            fbAttr.AddInts(b, ints)
        if floats:
            fbAttr.AddFloats(b, floats)
        if s:
            fbAttr.AddStr(b, s)
        return fbAttr.End(b)

    def ref(self, r: Ref) -> int:
        b = self.b
        axes = self.longs(r.axes)
        fbRef.Start(b)
        fbRef.AddKind(b, _REF_KINDS[r.kind])
        fbRef.AddIndex(b, r.index)
        fbRef.AddAxes(b, axes)
        fbRef.AddConstValue(b, float(r.const))
        return fbRef.End(b)

    def epilogue(self, e: Epilogue) -> int:
        b = self.b
        steps = []
        for s in e.steps:
            op = b.CreateString(s.op)
            args = self.tables([self.ref(r) for r in s.args])
            to = b.CreateString(s.to)
            fbEpilogueStep.Start(b)
            fbEpilogueStep.AddOp(b, op)
            fbEpilogueStep.AddArgs(b, args)
            fbEpilogueStep.AddTo(b, to)
            steps.append(fbEpilogueStep.End(b))
        vec = self.tables(steps)
        fbEpilogue.Start(b)
        fbEpilogue.AddSteps(b, vec)
        fbEpilogue.AddResult(b, e.result)
        return fbEpilogue.End(b)

    def command(self, c: Command) -> int:
        b = self.b
        if isinstance(c, DmaIn):
            offsets, sizes = self.longs(c.offsets), self.longs(c.sizes)
            fbDmaIn.Start(b)
            fbDmaIn.AddTensor(b, c.tensor)
            fbDmaIn.AddOffsets(b, offsets)
            fbDmaIn.AddSizes(b, sizes)
            fbDmaIn.AddBuffer(b, c.buffer)
            body = fbDmaIn.End(b)
        elif isinstance(c, DmaOut):
            offsets, sizes = self.longs(c.offsets), self.longs(c.sizes)
            fbDmaOut.Start(b)
            fbDmaOut.AddBuffer(b, c.buffer)
            fbDmaOut.AddTensor(b, c.tensor)
            fbDmaOut.AddOffsets(b, offsets)
            fbDmaOut.AddSizes(b, sizes)
            body = fbDmaOut.End(b)
        elif isinstance(c, Compute):
            op = b.CreateString(c.op)
            operands = self.tables([self.operand(o) for o in c.operands])
            result = self.operand(c.result)
            attrs = self.tables([self.attr(k, v) for k, v in c.attrs.items()])
            epilogue = self.epilogue(c.epilogue)
            fbCompute.Start(b)
            fbCompute.AddOp(b, op)
            fbCompute.AddOperands(b, operands)
            fbCompute.AddResult(b, result)
            fbCompute.AddAttrs(b, attrs)
            fbCompute.AddEpilogue(b, epilogue)
            fbCompute.AddSlice(b, c.slice)
            fbCompute.AddMacs(b, c.macs)
            fbCompute.AddTile(b, c.tile)
            if c.padded_work:
                fbCompute.AddPaddedWork(b, c.padded_work)
            if c.split != 1:
                fbCompute.AddSplit(b, c.split)
            body = fbCompute.End(b)
        else:
            raise TypeError(f"unknown command {type(c).__name__}")
        fbCommandEntry.Start(b)
        fbCommandEntry.AddCommandType(b, _COMMANDS[type(c)])
        fbCommandEntry.AddCommand(b, body)
        return fbCommandEntry.End(b)


# --------------------------------------------------------------------------
# Structural verifier, driven by the .fbs schema


_SCALAR_SIZES = {
    "bool": 1, "byte": 1, "ubyte": 1, "int8": 1, "uint8": 1,
    "short": 2, "ushort": 2, "int16": 2, "uint16": 2,
    "int": 4, "uint": 4, "int32": 4, "uint32": 4, "float": 4, "float32": 4,
    "long": 8, "ulong": 8, "int64": 8, "uint64": 8, "double": 8, "float64": 8,
}  # fmt: skip


@dataclass(frozen=True)
class _Field:
    name: str
    slot: int  # vtable slot (a union uses `slot` for its type and `slot + 1` for its value)
    kind: str  # "scalar" | "string" | "table" | "union" | "vector"
    size: int = 0  # byte size of the scalar, or of a vector's scalar elements
    target: str = ""  # table or union name; for vectors: element table name, "string", or ""
    base: str = ""  # scalars and scalar vectors: the scalar type (an enum's underlying type)
    default: Any = 0  # scalars: the value a reader sees when the field is absent


@dataclass(frozen=True)
class _Schema:
    tables: dict[str, tuple[_Field, ...]]
    unions: dict[str, tuple[str, ...]]
    enums: dict[str, tuple[str, ...]]
    root: str


_STRUCT_CODES = {
    "bool": "?", "byte": "b", "ubyte": "B", "int8": "b", "uint8": "B",
    "short": "h", "ushort": "H", "int16": "h", "uint16": "H",
    "int": "i", "uint": "I", "int32": "i", "uint32": "I", "float": "f", "float32": "f",
    "long": "q", "ulong": "Q", "int64": "q", "uint64": "Q", "double": "d", "float64": "d",
}  # fmt: skip


def _scalar_default(text: str | None, base: str, enum_members: tuple[str, ...], what: str) -> Any:
    """The default of a scalar field (`= value` in the schema; 0 when absent) as its Python type."""
    value = (text or "").lstrip("=").strip()
    floating = _STRUCT_CODES[base] in "fd"
    if not value:
        return 0.0 if floating else (False if base == "bool" else 0)
    if value in enum_members:
        return enum_members.index(value)
    try:
        return float(value) if floating else (value == "true" if base == "bool" else int(value))
    except ValueError:
        raise ValueError(f"cannot parse default '{value}' of {what}") from None


def parse_fbs(text: str) -> _Schema:
    """Parses the subset of the FlatBuffers IDL torq_executable.fbs uses."""
    text = re.sub(r"//[^\n]*", "", text)
    if re.search(r"\bstruct\s", text):
        raise ValueError("structs are not supported by the executable verifier")
    enums: dict[str, tuple[str, int]] = {}
    enum_values: dict[str, tuple[str, ...]] = {}
    for name, base, body in re.findall(r"\benum\s+(\w+)\s*:\s*(\w+)\s*\{([^}]*)\}", text):
        enums[name] = (base, _SCALAR_SIZES[base])
        enum_values[name] = tuple(m.split("=")[0].strip() for m in body.split(",") if m.strip())
    unions = {
        name: tuple(m.strip() for m in body.split(",") if m.strip())
        for name, body in re.findall(r"\bunion\s+(\w+)\s*\{([^}]*)\}", text)
    }
    bodies = re.findall(r"\btable\s+(\w+)\s*\{([^}]*)\}", text)
    table_names = {name for name, _ in bodies}
    tables: dict[str, tuple[_Field, ...]] = {}
    for name, body in bodies:
        fields: list[_Field] = []
        slot = 0
        for decl in filter(None, (d.strip() for d in body.split(";"))):
            m = re.fullmatch(r"(\w+)\s*:\s*(\[\s*\w+\s*\]|\w+)\s*(=\s*[^(]+)?(\(.*\))?", decl, re.S)
            if not m:
                raise ValueError(f"cannot parse field '{decl}' of table {name}")
            fname, ftype = m.group(1), m.group(2).replace(" ", "")
            vector = ftype.startswith("[")
            base = ftype.strip("[]")
            if base in _SCALAR_SIZES or base in enums:
                size = _SCALAR_SIZES[base] if base in _SCALAR_SIZES else enums[base][1]
                scalar = base if base in _SCALAR_SIZES else enums[base][0]
                default = _scalar_default(m.group(3), scalar, enum_values.get(base, ()), f"{name}.{fname}")
                field = _Field(fname, slot, "vector" if vector else "scalar", size, "", scalar, default)
            elif base == "string":
                field = _Field(fname, slot, "vector" if vector else "string", 0, "string")
            elif base in table_names:
                field = _Field(fname, slot, "vector" if vector else "table", 0, base)
            elif base in unions and not vector:
                field = _Field(fname, slot, "union", 0, base)
                slot += 1
            else:
                raise ValueError(f"unsupported type '{ftype}' of {name}.{fname}")
            fields.append(field)
            slot += 1
        tables[name] = tuple(fields)
    root = re.search(r"\broot_type\s+(\w+)\s*;", text)
    if not root:
        raise ValueError("schema has no root_type")
    return _Schema(tables, unions, enum_values, root.group(1))


@functools.cache
def executable_schema() -> _Schema:
    """The parsed torq_executable.fbs that the verifier checks blobs against."""
    return parse_fbs(SCHEMA_PATH.read_text())


_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_I32 = struct.Struct("<i")


class _Verifier:
    """Checks that every table, vector and string a reader can reach lies in the blob."""

    def __init__(self, buf: bytes, schema: _Schema) -> None:
        self.buf, self.n, self.schema = buf, len(buf), schema
        self.seen: set[tuple[int, str]] = set()

    def fail(self, what: str) -> None:
        raise ExecutableError(f"truncated or corrupted Torq executable ({self.n} bytes): {what}")

    def u16(self, pos: int) -> int:
        self.need(pos, 2, "uint16")
        return struct.unpack_from("<H", self.buf, pos)[0]

    def u32(self, pos: int) -> int:
        self.need(pos, 4, "uint32")
        return struct.unpack_from("<I", self.buf, pos)[0]

    def need(self, pos: int, size: int, what: str) -> None:
        if pos < 0 or pos + size > self.n:
            self.fail(f"{what} at byte {pos} (+{size}) lies outside the blob")

    def table_header(self, pos: int, name: str) -> tuple[int, int, int]:
        """Returns (vtable, vtable size, table size) of the table at `pos`."""
        self.need(pos, 4, f"table {name}")
        vt = pos - struct.unpack_from("<i", self.buf, pos)[0]
        self.need(vt, 4, f"vtable of {name}")
        vsize, tsize = self.u16(vt), self.u16(vt + 2)
        if vsize < 4 or vsize % 2:
            self.fail(f"vtable of {name} at byte {vt} has bad size {vsize}")
        self.need(vt, vsize, f"vtable of {name}")
        self.need(pos, max(tsize, 4), f"table {name}")
        return vt, vsize, tsize

    def field_pos(self, pos: int, header: tuple[int, int, int], slot: int, width: int, name: str) -> int:
        """Absolute position of a field (0 if absent), checked to lie inside its table."""
        vt, vsize, tsize = header
        if 4 + 2 * slot >= vsize:
            return 0
        fo = _U16.unpack_from(self.buf, vt + 4 + 2 * slot)[0]  # inside the vtable (table_header checked it)
        if fo == 0:
            return 0
        if fo < 4 or fo + width > tsize:
            self.fail(f"field {name} at offset {fo} runs past its table ({tsize} bytes)")
        return pos + fo

    def table(self, pos: int, name: str) -> None:
        if (pos, name) in self.seen:
            return
        self.seen.add((pos, name))
        header = self.table_header(pos, name)
        vt, vsize, tsize = header
        for f in self.schema.tables[name]:
            if f.kind == "scalar":  # inline `field_pos`: the common case, checked without a call
                o = 4 + 2 * f.slot
                fo = _U16.unpack_from(self.buf, vt + o)[0] if o < vsize else 0
                if fo and (fo < 4 or fo + f.size > tsize):
                    self.field_pos(pos, header, f.slot, f.size, f"{name}.{f.name}")  # reports it
                continue
            label = f"{name}.{f.name}"
            if f.kind == "union":
                tpos = self.field_pos(pos, header, f.slot, 1, label + "_type")
                vpos = self.field_pos(pos, header, f.slot + 1, 4, label)
                kind = self.buf[tpos] if tpos else 0
                members = self.schema.unions[f.target]
                if kind > len(members):
                    self.fail(f"{label} has unknown type {kind}")
                if kind and not vpos:
                    self.fail(f"{label} of type {members[kind - 1]} has no value")
                if kind:
                    self.table(vpos + self.u32(vpos), members[kind - 1])
            else:
                at = self.field_pos(pos, header, f.slot, 4, label)
                if not at:
                    continue
                target = at + self.u32(at)
                if f.kind == "string":
                    self.string(target, label)
                elif f.kind == "table":
                    self.table(target, f.target)
                else:
                    self.vector(target, f, label)

    def string(self, pos: int, label: str) -> None:
        length = self.u32(pos)
        self.need(pos + 4, length + 1, f"string {label}")
        if self.buf[pos + 4 + length] != 0:
            self.fail(f"string {label} at byte {pos} is not NUL-terminated")
        try:
            self.buf[pos + 4 : pos + 4 + length].decode("utf-8")
        except UnicodeDecodeError:
            self.fail(f"string {label} at byte {pos} is not UTF-8")

    def vector(self, pos: int, f: _Field, label: str) -> None:
        if (pos, "[" + f.target + "]") in self.seen:
            return
        self.seen.add((pos, "[" + f.target + "]"))
        length = self.u32(pos)
        elem = 4 if f.target else f.size
        self.need(pos + 4, length * elem, f"vector {label} of {length} elements")
        if f.target:
            for k in range(length):
                e = pos + 4 + 4 * k
                if f.target == "string":
                    self.string(e + self.u32(e), f"{label}[{k}]")
                else:
                    self.table(e + self.u32(e), f.target)


# --------------------------------------------------------------------------
# Parsing


def parse_executable(blob: bytes | bytearray | memoryview, hw: TorqHw | None = None) -> Program:
    """Parses and validates a Torq executable; raises ExecutableError if it cannot run on `hw`."""
    buf = bytes(blob)
    if len(buf) < _HEADER_BYTES:
        raise ExecutableError(
            f"Torq executable too short: {len(buf)} bytes (the header alone is {_HEADER_BYTES})"
        )
    ident = buf[4:8]
    if ident != FILE_IDENTIFIER:
        raise ExecutableError(
            f"not a Torq executable: file identifier {ident!r}, expected {FILE_IDENTIFIER!r}"
        )
    schema = executable_schema()
    verifier = _Verifier(buf, schema)
    root = verifier.u32(0)
    # The version is read on its own first: a blob of another version may not
    # follow this schema, and should be reported as a version mismatch.
    header = verifier.table_header(root, schema.root)
    vpos = verifier.field_pos(root, header, 0, 4, "Program.version")
    version = struct.unpack_from("<I", buf, vpos)[0] if vpos else 0
    if version not in READABLE_VERSIONS:
        raise ExecutableError(
            f"unsupported Torq executable version {version} (this runtime reads versions "
            f"{', '.join(str(v) for v in READABLE_VERSIONS)})"
        )
    verifier.table(root, schema.root)
    try:
        program = _Reader().program(buf)
    except ExecutableError:
        raise
    except (KeyError, IndexError, ValueError, TypeError, struct.error, UnicodeDecodeError) as e:
        raise ExecutableError(f"corrupted Torq executable: {type(e).__name__}: {e}") from None
    validate_program(program, hw)
    return program


@functools.cache
def _layouts() -> dict[str, dict[str, tuple[int, struct.Struct | str, Any]]]:
    """Per table: field name -> (vtable slot, struct of a scalar or the code of a scalar
    vector's elements, default)."""
    out: dict[str, dict[str, tuple[int, struct.Struct | str, Any]]] = {}
    for name, fields in executable_schema().tables.items():
        d: dict[str, tuple[int, struct.Struct | str, Any]] = {}
        for f in fields:
            if f.kind == "scalar":
                d[f.name] = (f.slot, struct.Struct("<" + _STRUCT_CODES[f.base]), f.default)
            elif f.kind == "union":
                d[f.name + "_type"] = (f.slot, struct.Struct("<B"), 0)
                d[f.name] = (f.slot + 1, "", None)
            else:
                d[f.name] = (f.slot, _STRUCT_CODES.get(f.base, ""), None)
        out[name] = d
    return out


class _Table:
    """A table of a verified blob, read by field name with the schema's layout and
    defaults (what the generated accessors return, without their per-call cost)."""

    __slots__ = ("buf", "pos", "vt", "vsize", "layout")

    def __init__(self, buf: bytes, pos: int, name: str) -> None:
        self.buf, self.pos, self.layout = buf, pos, _layouts()[name]
        self.vt = pos - _I32.unpack_from(buf, pos)[0]
        self.vsize = _U16.unpack_from(buf, self.vt)[0]

    def _field(self, name: str) -> tuple[int, Any, Any]:
        """(absolute position or 0 if absent, struct or code, default)."""
        slot, fmt, default = self.layout[name]
        o = 4 + 2 * slot
        off = _U16.unpack_from(self.buf, self.vt + o)[0] if o < self.vsize else 0
        return (self.pos + off if off else 0), fmt, default

    def scalar(self, name: str) -> Any:
        at, fmt, default = self._field(name)
        return fmt.unpack_from(self.buf, at)[0] if at else default

    def _target(self, name: str) -> int:
        at = self._field(name)[0]
        return at + _U32.unpack_from(self.buf, at)[0] if at else 0

    def text(self, name: str) -> str:
        at = self._target(name)
        if not at:
            return ""
        n = _U32.unpack_from(self.buf, at)[0]
        return self.buf[at + 4 : at + 4 + n].decode("utf-8")

    def scalars(self, name: str) -> tuple:
        """A vector of scalars as a tuple of Python numbers (() when absent)."""
        at, code, _ = self._field(name)
        if not at:
            return ()
        at += _U32.unpack_from(self.buf, at)[0]
        n = _U32.unpack_from(self.buf, at)[0]
        return struct.unpack_from(f"<{n}{code}", self.buf, at + 4) if n else ()

    def data(self, name: str) -> bytes:
        at = self._target(name)
        if not at:
            return b""
        n = _U32.unpack_from(self.buf, at)[0]
        return self.buf[at + 4 : at + 4 + n]

    def table(self, name: str, table: str) -> "_Table | None":
        at = self._target(name)
        return _Table(self.buf, at, table) if at else None

    def tables(self, name: str, table: str) -> list["_Table"]:
        at = self._target(name)
        if not at:
            return []
        n, buf = _U32.unpack_from(self.buf, at)[0], self.buf
        elems = (at + 4 + 4 * k for k in range(n))
        return [_Table(buf, e + _U32.unpack_from(buf, e)[0], table) for e in elems]


class _Reader:
    """Builds the data model from a verified blob (`_Table` views; same values as the generated accessors)."""

    _dtypes = _inverse(_DTYPES)
    _kinds = _inverse(_TENSOR_KINDS)
    _ref_kinds = _inverse(_REF_KINDS)
    _commands = {CommandType.DmaIn: "DmaIn", CommandType.DmaOut: "DmaOut", CommandType.Compute: "Compute"}

    def dtype(self, code: int, what: str) -> str:
        if code not in self._dtypes:
            raise ExecutableError(f"corrupted Torq executable: {what} has unknown dtype code {code}")
        return self._dtypes[code]

    def program(self, buf: bytes) -> Program:
        fb = _Table(buf, _U32.unpack_from(buf, 0)[0], "Program")
        return Program(
            name=fb.text("name"),
            hw=self.hw(fb.table("hw", "Hw")),
            tensors=[self.tensor(t) for t in fb.tables("tensors", "TensorDesc")],
            buffers=[self.buffer(t) for t in fb.tables("buffers", "LramBuffer")],
            commands=[self.command(t, i) for i, t in enumerate(fb.tables("commands", "CommandEntry"))],
            tiles=fb.scalar("tiles"),
            lram_peak=fb.scalar("lram_peak"),
        )

    def hw(self, fb: _Table | None) -> dict:
        if fb is None:
            raise ExecutableError("corrupted Torq executable: no hardware description")
        _check_hw_schema()
        d: dict[str, Any] = {"name": fb.text("name")}
        for field, typ in _HW_FIELDS:
            if field != "name":
                d[field] = typ(fb.scalar(field))
        return TorqHw.from_dict(d).to_dict()

    def tensor(self, fb: _Table) -> TensorDesc:
        kind, index = fb.scalar("kind"), fb.scalar("index")
        if kind not in self._kinds:
            raise ExecutableError(f"corrupted Torq executable: tensor {index} has unknown kind {kind}")
        return TensorDesc(
            index=index,
            kind=self._kinds[kind],
            shape=fb.scalars("shape"),
            dtype=self.dtype(fb.scalar("dtype"), f"tensor {index}"),
            host_dtype=self.dtype(fb.scalar("host_dtype"), f"tensor {index}"),
            arg_index=fb.scalar("arg_index"),
            data=fb.data("data"),
            aliases=fb.scalar("aliases"),
        )

    def buffer(self, fb: _Table) -> LramBuffer:
        return LramBuffer(fb.scalar("id"), fb.scalar("offset"), fb.scalar("size"), fb.scalar("live_start"),
                          fb.scalar("live_end"), fb.scalars("shape"), fb.scalars("padded_shape"))

    def operand(self, fb: _Table | None, what: str) -> Operand:
        if fb is None:
            raise ExecutableError(f"corrupted Torq executable: {what} is missing")
        return Operand(fb.scalar("buffer"), fb.scalars("shape"), self.dtype(fb.scalar("dtype"), what))

    def attr(self, fb: _Table) -> tuple[str, Any]:
        key, kind = fb.text("key"), fb.scalar("kind")
        ints = list(fb.scalars("ints"))
        floats = list(fb.scalars("floats"))
        if kind == AttrKind.Int and len(ints) == 1:
            return key, ints[0]
        if kind == AttrKind.Ints:
            return key, ints
        if kind == AttrKind.Str:
            return key, fb.text("str")
        if kind == AttrKind.Float and len(floats) == 1:
            return key, floats[0]
        if kind == AttrKind.Floats:
            return key, floats
        raise ExecutableError(f"corrupted Torq executable: attr '{key}' has bad kind {kind}")

    def ref(self, fb: _Table) -> Ref:
        kind = fb.scalar("kind")
        if kind not in self._ref_kinds:
            raise ExecutableError(f"corrupted Torq executable: epilogue ref has unknown kind {kind}")
        return Ref(self._ref_kinds[kind], fb.scalar("index"), fb.scalars("axes"), fb.scalar("const_value"))

    def epilogue(self, fb: _Table | None) -> Epilogue:
        if fb is None:
            return Epilogue()
        steps = []
        for s in fb.tables("steps", "EpilogueStep"):
            args = [self.ref(r) for r in s.tables("args", "Ref")]
            steps.append(EpilogueStep(s.text("op"), args, s.text("to")))
        return Epilogue(steps, fb.scalar("result"))

    def command(self, entry: _Table, i: int) -> Command:
        kind = entry.scalar("command_type")
        name = self._commands.get(kind)
        table = entry.table("command", name) if name else None
        if table is None:
            raise ExecutableError(f"corrupted Torq executable: command {i} has no valid type ({kind})")
        if name == "DmaIn":
            return DmaIn(table.scalar("tensor"), table.scalars("offsets"), table.scalars("sizes"),
                         table.scalar("buffer"))
        if name == "DmaOut":
            return DmaOut(table.scalar("buffer"), table.scalar("tensor"), table.scalars("offsets"),
                          table.scalars("sizes"))
        return Compute(
            op=table.text("op"),
            operands=[self.operand(o, f"command {i} operand {j}")
                      for j, o in enumerate(table.tables("operands", "Operand"))],
            result=self.operand(table.table("result", "Operand"), f"command {i} result"),
            attrs=dict(self.attr(a) for a in table.tables("attrs", "Attr")),
            epilogue=self.epilogue(table.table("epilogue", "Epilogue")),
            slice=table.scalar("slice"),
            macs=table.scalar("macs"),
            tile=table.scalar("tile"),
            padded_work=table.scalar("padded_work"),
            split=table.scalar("split"),
        )


# --------------------------------------------------------------------------
# Semantic validation (shared with the simulator)

_MAX_ELEMENTS = 2**60  # elements of any tensor or operand (numpy indexes with int64)
_ARITY = {"neg": 1, "cast": 1, "trunc": 1, "zext": 1, "select_gt": 4, "select_lt": 4, "select_ge": 4, "select_le": 4,
          **{op: 1 for op in TABLE_OPS}}
_TENSOR_KIND_NAMES = tuple(_TENSOR_KINDS)


_INT_DTYPES = ("i8", "i16", "i32")


def validate_program(p: Program, hw: TorqHw | None = None) -> None:
    """Checks that `p` is consistent and its LRAM map fits `hw` (default: p.hw).

    Raises ExecutableError naming the offending tensor, buffer or command:
    tensors (kinds, dtypes, shapes, constant data length, call argument
    positions, an in-place output aliasing an input of its shape and dtypes),
    buffers (unique ids, live ranges inside the program, offset +
    size within the device LRAM, no two buffers with intersecting live ranges
    sharing bytes), and commands (tensors and buffers exist, each buffer used
    only inside its live range, DMA boxes inside their tensor, box and operand
    bytes within the buffer size, epilogue refs in range; the op in the op table
    (contract/ops.py); for an op with a shape rule: attrs well formed, result
    shape and macs as the attrs and operand shapes give them, the input's `pad`
    included; a `pad` attr only on an op that pads its input).
    """
    if hw is None:
        try:
            hw = TorqHw.from_dict(p.hw)
        except TypeError as e:
            raise ExecutableError(f"program '{p.name}': bad hw description: {e}") from None
    _Validator(p, hw).run()


class _Validator:
    def __init__(self, p: Program, hw: TorqHw) -> None:
        self.p, self.hw = p, hw
        self.tensors: dict[int, TensorDesc] = {}
        self.buffers: dict[int, LramBuffer] = {}

    def fail(self, msg: str) -> None:
        raise ExecutableError(f"program '{self.p.name}': {msg}")

    def run(self) -> None:
        self.check_tensors()
        self.check_buffers()
        for i, c in enumerate(self.p.commands):
            self.check_command(i, c)
        self.check_outputs_written()

    def check_outputs_written(self) -> None:
        """Each output needs DmaOut boxes covering at least its size (a necessary condition)."""
        written: dict[int, int] = {}
        for c in self.p.commands:
            if isinstance(c, DmaOut):
                written[c.tensor] = written.get(c.tensor, 0) + nbytes(tuple(c.sizes), self.tensors[c.tensor].dtype)
        for t in self.p.tensors:
            if t.kind == "output" and t.aliases < 0 and written.get(t.index, 0) < t.nbytes:
                self.fail(
                    f"output tensor {t.index} has {t.nbytes} bytes but DmaOut commands write "
                    f"at most {written.get(t.index, 0)}"
                )

    def check_dtype(self, dtype: object, what: str) -> None:
        if dtype not in DTYPE_BYTES:
            self.fail(f"{what} has unknown dtype {dtype!r}")

    def check_shape(self, shape: tuple[int, ...], what: str) -> None:
        if any(not isinstance(d, (int, np.integer)) or d < 0 for d in shape):
            self.fail(f"{what} has bad shape {tuple(shape)}")
        if math.prod(max(int(d), 1) for d in shape) > _MAX_ELEMENTS:
            self.fail(f"{what} has shape {tuple(shape)}, beyond any addressable memory")

    def check_tensors(self) -> None:
        args: dict[str, list[int]] = {"input": [], "output": []}
        for t in self.p.tensors:
            what = f"tensor {t.index}"
            if t.index in self.tensors:
                self.fail(f"two tensors have index {t.index}")
            self.tensors[t.index] = t
            if t.kind not in _TENSOR_KIND_NAMES:
                self.fail(f"{what} has unknown kind {t.kind!r}")
            self.check_dtype(t.dtype, what)
            self.check_dtype(t.host_dtype, what + " (host)")
            self.check_shape(t.shape, what)
            if t.kind == "constant" and len(t.data) != t.nbytes:
                self.fail(
                    f"constant {what} has {len(t.data)} bytes of data, its shape {tuple(t.shape)} "
                    f"{t.dtype} needs {t.nbytes}"
                )
            if t.kind != "constant" and t.data:
                self.fail(f"{what} of kind {t.kind} carries data")
            if t.kind in args:
                args[t.kind].append(t.arg_index)
        for kind, idx in args.items():
            if sorted(idx) != list(range(len(idx))):
                self.fail(f"{kind} tensors have argument positions {sorted(idx)}, expected 0..{len(idx) - 1}")
        self.check_aliases()

    def check_aliases(self) -> None:
        """An in-place output names an input of its shape and dtypes; an input has at most one
        such output, and only outputs alias."""
        inputs = {t.arg_index: t for t in self.p.tensors if t.kind == "input"}
        taken: set[int] = set()
        for t in self.p.tensors:
            if t.aliases < 0:
                continue
            what = f"tensor {t.index}"
            if t.kind != "output":
                self.fail(f"{what} of kind {t.kind} aliases input {t.aliases} (only outputs update inputs in place)")
            src = inputs.get(t.aliases)
            if src is None:
                self.fail(f"output {what} aliases input {t.aliases}, which does not exist")
            if (tuple(src.shape), src.dtype, src.host_dtype) != (tuple(t.shape), t.dtype, t.host_dtype):
                self.fail(f"output {what} ({tuple(t.shape)} {t.dtype}) aliases input {t.aliases} of another "
                          f"shape or dtype ({tuple(src.shape)} {src.dtype})")
            if t.aliases in taken:
                self.fail(f"input {t.aliases} is updated in place by two outputs")
            taken.add(t.aliases)

    def check_buffers(self) -> None:
        n = len(self.p.commands)
        lram = self.hw.lram_bytes
        for b in self.p.buffers:
            if b.id in self.buffers:
                self.fail(f"two LRAM buffers have id {b.id}")
            self.buffers[b.id] = b
            if b.offset < 0 or b.size < 0:
                self.fail(f"LRAM buffer {b.id} has offset {b.offset} and size {b.size}")
            if b.offset + b.size > lram:
                self.fail(
                    f"LRAM buffer {b.id} [{b.offset}, {b.offset + b.size}) needs {b.offset + b.size} bytes "
                    f"of LRAM but the device ({self.hw.spec}) has {lram} bytes"
                )
            if b.shape or b.padded_shape:
                self.check_layout(b)
            if not 0 <= b.live_start <= b.live_end < n:
                self.fail(
                    f"LRAM buffer {b.id} has live range [{b.live_start}, {b.live_end}] "
                    f"outside commands 0..{n - 1}"
                )
        # Sweep by live_start; `active` holds buffers still live.
        active: list[LramBuffer] = []
        for b in sorted(self.p.buffers, key=lambda x: (x.live_start, x.id)):
            active = [a for a in active if a.live_end >= b.live_start]
            for a in active:
                if a.offset < b.offset + b.size and b.offset < a.offset + a.size and a.size and b.size:
                    self.fail(
                        f"LRAM buffers {a.id} [{a.offset}, {a.offset + a.size}) and {b.id} "
                        f"[{b.offset}, {b.offset + b.size}) overlap while both are live "
                        f"(commands {max(a.live_start, b.live_start)}..{min(a.live_end, b.live_end)})"
                    )
            active.append(b)

    def check_layout(self, b: LramBuffer) -> None:
        """A padded buffer: `shape` and `padded_shape` of one rank, each dim of the data within
        its padded dim (the bytes are checked per access, in the access's dtype)."""
        what = f"LRAM buffer {b.id}"
        self.check_shape(tuple(b.shape), what + " layout")
        self.check_shape(tuple(b.padded_shape), what + " padded layout")
        if len(b.shape) != len(b.padded_shape) or any(d > p for d, p in zip(b.shape, b.padded_shape)):
            self.fail(f"{what} has layout {tuple(b.shape)} that does not fit its padded shape "
                      f"{tuple(b.padded_shape)}")

    def use_buffer(self, i: int, buffer: int, size: int, what: str, shape: tuple | None = None,
                   dtype: str = "") -> None:
        b = self.buffers.get(buffer)
        if b is None:
            self.fail(f"command {i}: {what} uses unknown LRAM buffer {buffer}")
            return
        if not b.live_start <= i <= b.live_end:
            self.fail(
                f"command {i}: {what} uses LRAM buffer {buffer} outside its live range "
                f"[{b.live_start}, {b.live_end}]"
            )
        if b.padded_shape and shape is not None:
            # An access to a padded buffer is its data up to unit dims, stored in the padded array.
            if [d for d in shape if d != 1] != [d for d in b.shape if d != 1]:
                self.fail(f"command {i}: {what} of shape {tuple(shape)} does not match the layout "
                          f"{tuple(b.shape)} of LRAM buffer {buffer}")
            size = nbytes(tuple(b.padded_shape), dtype)
        if size > b.size:
            self.fail(f"command {i}: {what} needs {size} bytes but LRAM buffer {buffer} has {b.size}")

    def check_box(self, i: int, c: DmaIn | DmaOut) -> None:
        kind = type(c).__name__
        t = self.tensors.get(c.tensor)
        if t is None:
            self.fail(f"command {i}: {kind} names unknown tensor {c.tensor}")
            return
        allowed = ("input", "constant", "scratch") if isinstance(c, DmaIn) else ("output", "scratch")
        if t.kind not in allowed:
            self.fail(f"command {i}: {kind} on tensor {t.index} of kind {t.kind}")
        rank = len(t.shape)
        if len(c.offsets) != rank or len(c.sizes) != rank:
            self.fail(
                f"command {i}: {kind} box of rank {len(c.offsets)}/{len(c.sizes)} "
                f"on tensor {t.index} of rank {rank}"
            )
        for o, s, d in zip(c.offsets, c.sizes, t.shape):
            if o < 0 or s < 0 or o + s > d:
                box = ", ".join(f"{o}:{o + s}" for o, s in zip(c.offsets, c.sizes))
                self.fail(f"command {i}: {kind} box [{box}] outside tensor {t.index} of shape {tuple(t.shape)}")
        self.use_buffer(i, c.buffer, nbytes(tuple(c.sizes), t.dtype), kind, tuple(c.sizes), t.dtype)

    def check_operand(self, i: int, o: Operand, what: str) -> None:
        self.check_dtype(o.dtype, f"command {i} {what}")
        self.check_shape(o.shape, f"command {i} {what}")
        self.use_buffer(i, o.buffer, nbytes(tuple(o.shape), o.dtype), what, tuple(o.shape), o.dtype)

    def check_command(self, i: int, c: Command) -> None:
        if isinstance(c, (DmaIn, DmaOut)):
            self.check_box(i, c)
            return
        if not isinstance(c, Compute):
            self.fail(f"command {i} has unknown type {type(c).__name__}")
        if c.op not in OPS:
            self.fail(f"command {i}: unknown compute op {c.op!r}")
        for j, o in enumerate(c.operands):
            self.check_operand(i, o, f"operand {j}")
        self.check_operand(i, c.result, "result")
        if c.macs < 0 or c.padded_work < 0:
            self.fail(f"command {i}: negative macs {c.macs} or padded work {c.padded_work}")
        if c.split < 1:
            self.fail(f"command {i}: split over {c.split} slices (at least 1)")
        if "pad" in c.attrs:
            self.check_pad(i, c)
        self.check_shape_rule(i, c)
        self.check_epilogue(i, c)

    def check_pad(self, i: int, c: Compute) -> None:
        """The `pad` attr: four non-negative ints, on an op that pads its input itself;
        `pad_value` a number (an integer for an integer operand)."""
        pad, value = c.attrs["pad"], c.attrs.get("pad_value", 0)
        if not OPS[c.op].pads_input:
            self.fail(f"command {i} ({c.op}): attr pad on an op that does not pad its input")
        if not (isinstance(pad, list) and len(pad) == 4 and all(isinstance(p, int) and p >= 0 for p in pad)):
            self.fail(f"command {i} ({c.op}): attr pad must be four non-negative ints [top, bottom, left, right], "
                      f"got {pad!r}")
        if not isinstance(value, (int, float)) or (c.operands and c.operands[0].dtype in _INT_DTYPES
                                                   and not isinstance(value, int)):
            self.fail(f"command {i} ({c.op}): attr pad_value {value!r} is not a value of its input")

    def check_shape_rule(self, i: int, c: Compute) -> None:
        """An op with a shape rule (contract/ops.py): its attrs well formed, and the result
        shape and macs they give from the operand shapes are the command's."""
        what = f"command {i} ({c.op})"
        try:
            inferred = OPS[c.op].verify([(tuple(o.shape), o.dtype) for o in c.operands], c.attrs)
        except OpError as e:
            self.fail(f"{what}: {e}")
        if inferred is None:
            return
        shape, macs = inferred
        if tuple(c.result.shape) != shape:
            self.fail(f"{what}: result shape {tuple(c.result.shape)}, its attrs and operands give {shape}")
        if c.macs != macs:
            self.fail(f"{what}: macs field is {c.macs}, its attrs and operands give {macs}")

    def check_lut(self, what: str, s: EpilogueStep) -> None:
        """A lookup: an index and 1..MAX_LUT_ENTRIES constant integer entries of width `to`."""
        entries = s.args[1:]
        if not 1 <= len(entries) <= MAX_LUT_ENTRIES:
            self.fail(f"{what}: {len(entries)} table entries, expected 1 to {MAX_LUT_ENTRIES}")
        if s.to not in EPILOGUE_INT_TYPES:
            self.fail(f"{what}: table entries of width {s.to!r}, not one of {', '.join(EPILOGUE_INT_TYPES)}")
        bits = EPILOGUE_INT_TYPES[s.to]
        for j, r in enumerate(entries):
            if r.kind != "const":
                self.fail(f"{what}: table entry {j} is a {r.kind}, not a constant")
            if not float(r.const).is_integer() or not -(1 << (bits - 1)) <= r.const < (1 << (bits - 1)):
                self.fail(f"{what}: table entry {j} = {r.const!r} is no {s.to} value")

    def check_epilogue(self, i: int, c: Compute) -> None:
        e = c.epilogue
        values = 1 if OPS[c.op].inputs else 0  # value 0: the principal result
        rank = len(c.result.shape)
        for k, s in enumerate(e.steps):
            what = f"command {i} epilogue step {k} ({s.op})"
            if s.op not in EPILOGUE_OPS:
                self.fail(f"{what}: unknown op")
            if s.op == LUT:
                self.check_lut(what, s)
            elif len(s.args) != _ARITY.get(s.op, 2):
                self.fail(f"{what}: {len(s.args)} arguments, expected {_ARITY.get(s.op, 2)}")
            if s.op == "cast":
                self.check_dtype(s.to, what)
            elif s.op in TABLE_OPS:
                if s.to:
                    self.fail(f"{what}: a table lookup is float only, has integer width {s.to!r}")
            elif s.op in ("shl", "shr_s", "shr_u", "trunc", "zext") or s.to:
                if s.to not in EPILOGUE_INT_TYPES:
                    self.fail(f"{what} has integer width {s.to!r}, not one of {', '.join(EPILOGUE_INT_TYPES)}")
            for r in s.args:
                if r.kind == "value" and not 0 <= r.index < values:
                    self.fail(f"{what}: value {r.index} is not computed yet ({values} available)")
                elif r.kind == "operand":
                    if not 0 <= r.index < len(c.operands):
                        self.fail(f"{what}: operand {r.index} out of range ({len(c.operands)} operands)")
                    nd = len(c.operands[r.index].shape)
                    axes = tuple(r.axes)
                    if axes and (len(axes) != nd or len(set(axes)) != nd or not all(0 <= a < rank for a in axes)):
                        self.fail(f"{what}: axes {axes} do not map operand {r.index} of rank {nd} into rank {rank}")
                    if not axes and nd not in (0, rank):
                        self.fail(f"{what}: operand {r.index} of rank {nd} needs axes for a rank {rank} result")
                elif r.kind not in ("value", "operand", "const"):
                    self.fail(f"{what}: unknown ref kind {r.kind!r}")
            values += 1
        if values == 0:
            self.fail(f"command {i}: elementwise op without epilogue steps computes nothing")
        if not -1 <= e.result < values:
            self.fail(f"command {i}: epilogue result {e.result} out of range ({values} values)")
