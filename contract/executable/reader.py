"""Reads a Torq executable back into a `Program`: the blob checked completely
(header, version, structure, contents) before anything runs."""

from __future__ import annotations

import functools
import struct
from typing import Any

from ..hw import TorqHw
from ..program import (
    Command,
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
from ..program_validator import ExecutableError, validate_program
from ..schemas.torq_fb.AttrKind import AttrKind
from .format import (
    DTYPE_CODES,
    FILE_IDENTIFIER,
    HEADER_BYTES,
    HW_FIELDS,
    READABLE_VERSIONS,
    REF_KIND_CODES,
    TENSOR_KIND_CODES,
    VERSION_CONTENT,
    CommandType,
    blob_version,
    check_hw_schema,
    inverse,
)
from .schema import I32, STRUCT_CODES, U16, U32, Verifier, executable_schema


def parse_executable(blob: bytes | bytearray | memoryview, hw: TorqHw | None = None) -> Program:
    """Parses and validates a Torq executable; raises ExecutableError if it cannot run on `hw`."""
    buf = bytes(blob)
    if len(buf) < HEADER_BYTES:
        raise ExecutableError(
            f"Torq executable too short: {len(buf)} bytes (the header alone is {HEADER_BYTES})"
        )
    ident = buf[4:8]
    if ident != FILE_IDENTIFIER:
        raise ExecutableError(
            f"not a Torq executable: file identifier {ident!r}, expected {FILE_IDENTIFIER!r}"
        )
    schema = executable_schema()
    verifier = Verifier(buf, schema)
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
    needed = blob_version(program)
    if version < needed and needed in VERSION_CONTENT:  # content its version does not have
        raise ExecutableError(f"corrupted Torq executable: version {version} has no {VERSION_CONTENT[needed]} "
                              f"(version {needed})")
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
                d[f.name] = (f.slot, struct.Struct("<" + STRUCT_CODES[f.base]), f.default)
            elif f.kind == "union":
                d[f.name + "_type"] = (f.slot, struct.Struct("<B"), 0)
                d[f.name] = (f.slot + 1, "", None)
            else:
                d[f.name] = (f.slot, STRUCT_CODES.get(f.base, ""), None)
        out[name] = d
    return out


class _Table:
    """A table of a verified blob, read by field name with the schema's layout and
    defaults (what the generated accessors return, without their per-call cost)."""

    __slots__ = ("buf", "pos", "vt", "vsize", "layout")

    def __init__(self, buf: bytes, pos: int, name: str) -> None:
        self.buf, self.pos, self.layout = buf, pos, _layouts()[name]
        self.vt = pos - I32.unpack_from(buf, pos)[0]
        self.vsize = U16.unpack_from(buf, self.vt)[0]

    def _field(self, name: str) -> tuple[int, Any, Any]:
        """(absolute position or 0 if absent, struct or code, default)."""
        slot, fmt, default = self.layout[name]
        o = 4 + 2 * slot
        off = U16.unpack_from(self.buf, self.vt + o)[0] if o < self.vsize else 0
        return (self.pos + off if off else 0), fmt, default

    def scalar(self, name: str) -> Any:
        at, fmt, default = self._field(name)
        return fmt.unpack_from(self.buf, at)[0] if at else default

    def _target(self, name: str) -> int:
        at = self._field(name)[0]
        return at + U32.unpack_from(self.buf, at)[0] if at else 0

    def text(self, name: str) -> str:
        at = self._target(name)
        if not at:
            return ""
        n = U32.unpack_from(self.buf, at)[0]
        return self.buf[at + 4 : at + 4 + n].decode("utf-8")

    def scalars(self, name: str) -> tuple:
        """A vector of scalars as a tuple of Python numbers (() when absent)."""
        at, code, _ = self._field(name)
        if not at:
            return ()
        at += U32.unpack_from(self.buf, at)[0]
        n = U32.unpack_from(self.buf, at)[0]
        return struct.unpack_from(f"<{n}{code}", self.buf, at + 4) if n else ()

    def data(self, name: str) -> bytes:
        at = self._target(name)
        if not at:
            return b""
        n = U32.unpack_from(self.buf, at)[0]
        return self.buf[at + 4 : at + 4 + n]

    def table(self, name: str, table: str) -> "_Table | None":
        at = self._target(name)
        return _Table(self.buf, at, table) if at else None

    def tables(self, name: str, table: str) -> list["_Table"]:
        at = self._target(name)
        if not at:
            return []
        n, buf = U32.unpack_from(self.buf, at)[0], self.buf
        elems = (at + 4 + 4 * k for k in range(n))
        return [_Table(buf, e + U32.unpack_from(buf, e)[0], table) for e in elems]


class _Reader:
    """Builds the data model from a verified blob (`_Table` views; same values as the generated accessors)."""

    _dtypes = inverse(DTYPE_CODES)
    _kinds = inverse(TENSOR_KIND_CODES)
    _ref_kinds = inverse(REF_KIND_CODES)
    _commands = {CommandType.DmaIn: "DmaIn", CommandType.DmaOut: "DmaOut", CommandType.Compute: "Compute"}

    def dtype(self, code: int, what: str) -> str:
        if code not in self._dtypes:
            raise ExecutableError(f"corrupted Torq executable: {what} has unknown dtype code {code}")
        return self._dtypes[code]

    def program(self, buf: bytes) -> Program:
        fb = _Table(buf, U32.unpack_from(buf, 0)[0], "Program")
        return Program(
            name=fb.text("name"),
            hw=self.hw(fb.table("hw", "Hw")),
            tensors=[self.tensor(t) for t in fb.tables("tensors", "TensorDesc")],
            buffers=[self.buffer(t) for t in fb.tables("buffers", "LramBuffer")],
            commands=[self.command(t, i) for i, t in enumerate(fb.tables("commands", "CommandEntry"))],
            tiles=fb.scalar("tiles"),
            lram_peak=fb.scalar("lram_peak"),
            source=fb.text("source"),
        )

    def hw(self, fb: _Table | None) -> dict:
        if fb is None:
            raise ExecutableError("corrupted Torq executable: no hardware description")
        check_hw_schema()
        d: dict[str, Any] = {"name": fb.text("name")}
        for field, typ in HW_FIELDS:
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

    def index_fields(self, dma: DmaIn | DmaOut, table: _Table, i: int) -> None:
        """The index dtype and bound of command `i`, a gathering DmaIn or a scattering DmaOut (named
        alike in both tables; the index buffer is a constructor argument)."""
        dma.index_dtype = self.dtype(table.scalar("index_dtype"), f"command {i} indices")
        dma.index_bound = table.scalar("index_bound")

    def command(self, entry: _Table, i: int) -> Command:
        kind = entry.scalar("command_type")
        name = self._commands.get(kind)
        table = entry.table("command", name) if name else None
        if table is None:
            raise ExecutableError(f"corrupted Torq executable: command {i} has no valid type ({kind})")
        if name == "DmaIn":
            dma = DmaIn(table.scalar("tensor"), table.scalars("offsets"), table.scalars("sizes"),
                        table.scalar("buffer"), table.scalar("index_buffer"), strides=table.scalars("strides"))
            if dma.gathers:
                self.index_fields(dma, table, i)
            return dma
        if name == "DmaOut":
            out = DmaOut(table.scalar("buffer"), table.scalar("tensor"), table.scalars("offsets"),
                         table.scalars("sizes"), table.scalar("index_buffer"))
            if out.scatters:
                self.index_fields(out, table, i)
                out.index_dim = table.scalar("index_dim")
            return out
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
