"""Semantic checks of an NSS program (contract/program.py) before anything runs it:
the loader runs them on every executable it reads, the writer before it writes,
the simulator on every program it prepares."""

from __future__ import annotations

import math

import numpy as np

from .hw import TorqHw
from .measures import union_volume
from .ops import OPS, OpError
from .program import (
    DTYPE_BYTES,
    EPILOGUE_INT_TYPES,
    EPILOGUE_STEPS,
    INDEX_DTYPES,
    INT_DTYPES,
    MAX_LUT_ENTRIES,
    TENSOR_KINDS,
    Command,
    Compute,
    DmaIn,
    DmaOut,
    EpilogueStep,
    LramBuffer,
    Operand,
    Program,
    TensorDesc,
    nbytes,
)


class ExecutableError(ValueError):
    """A Torq executable (or program) that cannot be run: the message says why, in one line."""


_MAX_ELEMENTS = 2**60  # elements of any tensor or operand (numpy indexes with int64)




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
        self.output_boxes: dict[int, list[tuple[tuple, tuple]]] = {}  # written so far, by output tensor

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
            if t.kind not in TENSOR_KINDS:
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
        allowed = ("input", "constant", "scratch", "output") if isinstance(c, DmaIn) else ("output", "scratch")
        if t.kind not in allowed:
            self.fail(f"command {i}: {kind} on tensor {t.index} of kind {t.kind}")
        rank = len(t.shape)
        if len(c.offsets) != rank or len(c.sizes) != rank:
            self.fail(
                f"command {i}: {kind} box of rank {len(c.offsets)}/{len(c.sizes)} "
                f"on tensor {t.index} of rank {rank}"
            )
        if isinstance(c, DmaIn) and c.strides and (len(c.strides) != rank or min(c.strides) < 1 or c.gathers):
            self.fail(f"command {i}: DmaIn strides {tuple(c.strides)} on tensor {t.index} of rank {rank} "
                      f"(one stride >= 1 per dim, not with a gather)")
        if isinstance(c, DmaOut) and c.scatters and not 0 <= c.index_dim < rank:
            self.fail(f"command {i}: DmaOut scatter along dim {c.index_dim} of tensor {t.index} of rank {rank}")
        offsets, sizes = c.read_box() if isinstance(c, DmaIn) else c.write_box()
        for o, s, d in zip(offsets, sizes, t.shape):
            if o < 0 or s < 0 or o + s > d:
                box = ", ".join(f"{o}:{o + s}" for o, s in zip(offsets, sizes))
                self.fail(f"command {i}: {kind} box [{box}] outside tensor {t.index} of shape {tuple(t.shape)}")
        if t.kind == "output" and t.aliases < 0:
            self.check_output_box(i, c, t)
        self.use_buffer(i, c.buffer, nbytes(tuple(c.sizes), t.dtype), kind, tuple(c.sizes), t.dtype)
        if (c.gathers if isinstance(c, DmaIn) else c.scatters):
            self.check_indices(i, c)
        elif c.index_buffer != -1:
            self.fail(f"command {i}: {kind} index buffer {c.index_buffer} (-1 for none)")

    def check_output_box(self, i: int, c: DmaIn | DmaOut, t: TensorDesc) -> None:
        """A DmaIn of an output (not in place) reads back only what earlier DmaOuts wrote: a
        result the program stores and then reads again (a value both returned and consumed
        after its group's tile loop). Scattered positions are unknown, so they count as
        unwritten."""
        written = self.output_boxes.setdefault(t.index, [])
        if isinstance(c, DmaOut):
            if not c.scatters:
                written.append((tuple(c.offsets), tuple(c.sizes)))
            return
        box = c.read_box()  # a strided read: its span was written
        if c.gathers or union_volume(t.shape, written + [box]) != union_volume(t.shape, written):
            self.fail(f"command {i}: DmaIn reads output tensor {t.index} where no earlier DmaOut wrote")

    def check_indices(self, i: int, c: DmaIn | DmaOut) -> None:
        """A gather's or scatter's indices: an index dtype, one per row of the box along its
        index dim (a gather's dim 0) in its index buffer (unpadded, a buffer other than its
        data buffer), a bound of at least one position (a scatter's dim in range and the box
        within the tensor at every position it may write: `check_box`)."""
        kind, count = ("DmaIn gather", c.sizes[0] if c.sizes else 0) if isinstance(c, DmaIn) \
            else ("DmaOut scatter", c.sizes[c.index_dim])
        if c.index_dtype not in INDEX_DTYPES:
            self.fail(f"command {i}: {kind} indices of dtype {c.index_dtype!r}, expected one of "
                      f"{', '.join(INDEX_DTYPES)}")
        if not c.sizes or c.index_bound < 1:
            self.fail(f"command {i}: {kind} of {len(c.sizes)}-D box with index bound {c.index_bound}")
        if c.index_buffer == c.buffer:
            self.fail(f"command {i}: {kind} reads its indices from its data buffer ({c.buffer})")
        index = self.buffers.get(c.index_buffer)
        if index is not None and index.padded_shape:
            self.fail(f"command {i}: {kind} reads its indices from padded LRAM buffer {c.index_buffer}")
        self.use_buffer(i, c.index_buffer, nbytes((count,), c.index_dtype), f"{kind} indices")

    def check_operand(self, i: int, o: Operand, what: str) -> None:
        self.check_dtype(o.dtype, f"command {i} {what}")
        if o.dtype == "i64":
            self.fail(f"command {i} {what} is i64, which holds gather and scatter indices only")
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
        if not isinstance(value, (int, float)) or (c.operands and c.operands[0].dtype in INT_DTYPES
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
            step = EPILOGUE_STEPS.get(s.op)
            if step is None:
                self.fail(f"{what}: unknown op")
            if step.to == "entries":
                self.check_lut(what, s)
            elif len(s.args) != step.arity:
                self.fail(f"{what}: {len(s.args)} arguments, expected {step.arity}")
            if step.to == "dtype":
                self.check_dtype(s.to, what)
            elif step.to == "none":
                if s.to:
                    self.fail(f"{what}: a table lookup is float only, has integer width {s.to!r}")
            elif step.to == "width" or (step.to == "optional" and s.to):
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
