"""The executable schema (contract/schemas/torq_executable.fbs) parsed, and the
structural verifier it drives: every table, vector and string a reader can
reach lies inside the blob (the Python flatbuffers package has no verifier)."""

from __future__ import annotations

import functools
import re
import struct
from dataclasses import dataclass
from typing import Any

from ..program_validator import ExecutableError
from .format import SCHEMA_PATH

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


STRUCT_CODES = {
    "bool": "?", "byte": "b", "ubyte": "B", "int8": "b", "uint8": "B",
    "short": "h", "ushort": "H", "int16": "h", "uint16": "H",
    "int": "i", "uint": "I", "int32": "i", "uint32": "I", "float": "f", "float32": "f",
    "long": "q", "ulong": "Q", "int64": "q", "uint64": "Q", "double": "d", "float64": "d",
}  # fmt: skip


def _scalar_default(text: str | None, base: str, enum_members: tuple[str, ...], what: str) -> Any:
    """The default of a scalar field (`= value` in the schema; 0 when absent) as its Python type."""
    value = (text or "").lstrip("=").strip()
    floating = STRUCT_CODES[base] in "fd"
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


U16 = struct.Struct("<H")
U32 = struct.Struct("<I")
I32 = struct.Struct("<i")


class Verifier:
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
        fo = U16.unpack_from(self.buf, vt + 4 + 2 * slot)[0]  # inside the vtable (table_header checked it)
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
                fo = U16.unpack_from(self.buf, vt + o)[0] if o < vsize else 0
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
