"""Writes a `Program` as a Torq executable (FlatBuffers, the generated code in
contract/schemas/torq_fb)."""

from __future__ import annotations

import math
import struct
from typing import Any

import flatbuffers
import numpy as np

from ..hw import TorqHw
from ..program import Command, Compute, DmaIn, DmaOut, Epilogue, LramBuffer, Operand, Program, Ref, TensorDesc
from ..program_validator import ExecutableError, validate_program
from ..schemas.torq_fb import Attr as fbAttr
from ..schemas.torq_fb import CommandEntry as fbCommandEntry
from ..schemas.torq_fb import Compute as fbCompute
from ..schemas.torq_fb import DmaIn as fbDmaIn
from ..schemas.torq_fb import DmaOut as fbDmaOut
from ..schemas.torq_fb import Epilogue as fbEpilogue
from ..schemas.torq_fb import EpilogueStep as fbEpilogueStep
from ..schemas.torq_fb import Hw as fbHw
from ..schemas.torq_fb import LramBuffer as fbLramBuffer
from ..schemas.torq_fb import Operand as fbOperand
from ..schemas.torq_fb import Program as fbProgram
from ..schemas.torq_fb import Ref as fbRef
from ..schemas.torq_fb import TensorDesc as fbTensorDesc
from ..schemas.torq_fb.AttrKind import AttrKind
from .format import (
    COMMAND_CODES,
    DTYPE_CODES,
    FILE_IDENTIFIER,
    HW_FIELDS,
    REF_KIND_CODES,
    TENSOR_KIND_CODES,
    accessor_name,
    blob_version,
    check_hw_schema,
)


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
        # Tables, vectors and strings by content: the commands of one op's tiles share one
        # epilogue, attribute and operand table (a FlatBuffers object may have several
        # parents) instead of one copy per command; a program is mostly such repeats
        # (audio encoder: 8,356 commands, serialized 1.5x faster in half the bytes).
        # Floats by their bits: -0.0 and 0.0 are different values.
        self.shared: dict[tuple, int] = {}
        self.epilogues: dict[int, tuple[Epilogue, int]] = {}  # id -> (the object, kept alive; its offset)

    def once(self, key: tuple, make) -> int:
        """The offset of the object `key` names, made by `make()` the first time."""
        done = self.shared.get(key)
        if done is None:
            done = self.shared[key] = make()
        return done

    def string(self, text: str) -> int:
        return self.once(("str", text), lambda: self.b.CreateString(text))

    def build(self) -> bytes:
        b, p = self.b, self.p
        name = b.CreateString(p.name)
        hw = self.hw(p.hw)
        tensors = self.tables([self.tensor(t) for t in p.tensors])
        buffers = self.tables([self.buffer(x) for x in p.buffers])
        commands = self.tables([self.command(c) for c in p.commands])
        # Only when known: a program without a source serializes as it did before the field.
        source = b.CreateString(p.source) if p.source else 0
        fbProgram.Start(b)
        fbProgram.AddVersion(b, blob_version(p))
        fbProgram.AddName(b, name)
        fbProgram.AddHw(b, hw)
        fbProgram.AddTensors(b, tensors)
        fbProgram.AddBuffers(b, buffers)
        fbProgram.AddCommands(b, commands)
        fbProgram.AddTiles(b, p.tiles)
        fbProgram.AddLramPeak(b, p.lram_peak)
        if source:
            fbProgram.AddSource(b, source)
        b.Finish(fbProgram.End(b), file_identifier=FILE_IDENTIFIER)
        return bytes(b.Output())

    # helpers
    def shared_tables(self, what: str, offsets: list[int]) -> int:
        """`tables(offsets)`, once per list of offsets (of shared tables)."""
        return self.once((what, tuple(offsets)), lambda: self.tables(offsets))

    def tables(self, offsets: list[int]) -> int:
        self.b.StartVector(4, len(offsets), 4)
        for off in reversed(offsets):
            self.b.PrependUOffsetTRelative(off)
        return self.b.EndVector()

    def longs(self, values: Any) -> int:
        if type(values) is tuple and all(type(v) is int for v in values):  # (most are: shapes, axes)
            ints = values
        else:
            ints = tuple(int(v) for v in np.asarray(values).reshape(-1).tolist())
        return self.once(("i64", ints), lambda: self.b.CreateNumpyVector(np.asarray(ints, dtype="<i8")))

    def doubles(self, values: Any) -> int:
        floats = tuple(float(v) for v in np.asarray(values).reshape(-1).tolist())
        return self.once(("f64", tuple(f.hex() for f in floats)),
                         lambda: self.b.CreateNumpyVector(np.asarray(floats, dtype="<f8")))

    def hw(self, d: dict) -> int:
        unknown = set(d) - {name for name, _ in HW_FIELDS}
        if unknown:
            raise ValueError(f"hw has fields TorqHw does not know: {sorted(unknown)}")
        check_hw_schema()
        full = TorqHw.from_dict(d).to_dict()
        name = self.b.CreateString(str(full["name"]))
        fbHw.Start(self.b)
        fbHw.AddName(self.b, name)
        for field, typ in HW_FIELDS:
            if field != "name":
                getattr(fbHw, "Add" + accessor_name(field))(self.b, typ(full[field]))
        return fbHw.End(self.b)

    def tensor(self, t: TensorDesc) -> int:
        b = self.b
        shape = self.longs(t.shape)
        data = b.CreateByteVector(bytes(t.data)) if t.data else 0
        fbTensorDesc.Start(b)
        fbTensorDesc.AddIndex(b, t.index)
        fbTensorDesc.AddKind(b, TENSOR_KIND_CODES[t.kind])
        fbTensorDesc.AddShape(b, shape)
        fbTensorDesc.AddDtype(b, DTYPE_CODES[t.dtype])
        fbTensorDesc.AddHostDtype(b, DTYPE_CODES[t.host_dtype])
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
        return self.once(("operand", o.buffer, tuple(o.shape), o.dtype), lambda: self._operand_table(o))

    def _operand_table(self, o: Operand) -> int:
        b = self.b
        shape = self.longs(o.shape)
        fbOperand.Start(b)
        fbOperand.AddBuffer(b, o.buffer)
        fbOperand.AddShape(b, shape)
        fbOperand.AddDtype(b, DTYPE_CODES[o.dtype])
        return fbOperand.End(b)

    def attr(self, key: str, value: Any) -> int:
        return self.once(("attr", key, _value_key(value)), lambda: self._attr_table(key, value))

    def _attr_table(self, key: str, value: Any) -> int:
        b = self.b
        k = self.string(key)
        ints = floats = s = 0
        if isinstance(value, str):
            kind, s = AttrKind.Str, self.string(value)
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
        # By content: a lookup table's 256 entries are constants, many of them equal.
        return self.once(("ref", r.kind, r.index, tuple(r.axes), struct.pack("<d", float(r.const))),
                         lambda: self._ref_table(r))

    def _ref_table(self, r: Ref) -> int:
        b = self.b
        axes = self.longs(r.axes)
        fbRef.Start(b)
        fbRef.AddKind(b, REF_KIND_CODES[r.kind])
        fbRef.AddIndex(b, r.index)
        fbRef.AddAxes(b, axes)
        const = float(r.const)
        # -0.0 equals the field's default, so FlatBuffers would leave it out and it would read
        # back as 0.0 (x + -0.0 keeps x = -0.0's sign, x + 0.0 does not): written explicitly.
        b.ForceDefaults(const == 0.0 and math.copysign(1.0, const) < 0)
        fbRef.AddConstValue(b, const)
        b.ForceDefaults(False)
        return fbRef.End(b)

    def epilogue(self, e: Epilogue) -> int:
        # The tiles of one op share its Epilogue object: its content key (thousands of refs for
        # a lookup table) is made once per object, not once per command.
        seen = self.epilogues.get(id(e))
        if seen is not None and seen[0] is e:
            return seen[1]
        key = (e.result, tuple((s.op, s.to, tuple((r.kind, r.index, r.axes, struct.pack("<d", float(r.const)))
                                                  for r in s.args))
                               for s in e.steps))
        offset = self.once(("epilogue", key), lambda: self._epilogue_table(e))
        self.epilogues[id(e)] = (e, offset)
        return offset

    def _epilogue_table(self, e: Epilogue) -> int:
        b = self.b
        steps = []
        for s in e.steps:
            op = self.string(s.op)
            args = self.tables([self.ref(r) for r in s.args])
            to = self.string(s.to)
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

    def index_fields(self, table, c: DmaIn | DmaOut) -> None:
        """The index operand of a gathering DmaIn or a scattering DmaOut: both tables name its fields alike."""
        table.AddIndexBuffer(self.b, c.index_buffer)
        table.AddIndexDtype(self.b, DTYPE_CODES[c.index_dtype])
        table.AddIndexBound(self.b, c.index_bound)

    def command(self, c: Command) -> int:
        b = self.b
        if isinstance(c, DmaIn):
            offsets, sizes = self.longs(c.offsets), self.longs(c.sizes)
            strides = self.longs(c.strides) if c.strided else 0
            fbDmaIn.Start(b)
            fbDmaIn.AddTensor(b, c.tensor)
            fbDmaIn.AddOffsets(b, offsets)
            fbDmaIn.AddSizes(b, sizes)
            fbDmaIn.AddBuffer(b, c.buffer)
            if c.gathers:
                self.index_fields(fbDmaIn, c)
            if strides:
                fbDmaIn.AddStrides(b, strides)
            body = fbDmaIn.End(b)
        elif isinstance(c, DmaOut):
            offsets, sizes = self.longs(c.offsets), self.longs(c.sizes)
            fbDmaOut.Start(b)
            fbDmaOut.AddBuffer(b, c.buffer)
            fbDmaOut.AddTensor(b, c.tensor)
            fbDmaOut.AddOffsets(b, offsets)
            fbDmaOut.AddSizes(b, sizes)
            if c.scatters:
                self.index_fields(fbDmaOut, c)
                fbDmaOut.AddIndexDim(b, c.index_dim)
            body = fbDmaOut.End(b)
        elif isinstance(c, Compute):
            op = self.string(c.op)
            operands = self.shared_tables("operands", [self.operand(o) for o in c.operands])
            result = self.operand(c.result)
            attrs = self.shared_tables("attrs", [self.attr(k, v) for k, v in c.attrs.items()])
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
        fbCommandEntry.AddCommandType(b, COMMAND_CODES[type(c)])
        fbCommandEntry.AddCommand(b, body)
        return fbCommandEntry.End(b)


def _value_key(value: Any) -> tuple:
    """An attribute value as a key: its type's family and its items (floats by their bits)."""
    if isinstance(value, str):
        return ("str", value)
    items = value if isinstance(value, (list, tuple)) else [value]
    try:
        return (type(value) in (list, tuple), tuple(
            (True, float(v).hex()) if isinstance(v, (float, np.floating)) else (False, int(v)) for v in items))
    except (TypeError, ValueError):
        return ("unsupported", repr(value))  # _attr_table names it
