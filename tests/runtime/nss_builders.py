"""Hand-built NSS programs for the runtime tests.

`ProgramBuilder` writes programs the way the compiler would, but by hand:
tensors, buffers (bump-allocated at aligned offsets unless an offset is
given), commands, and live ranges derived from which commands use a buffer.
Numerical references live in the tests (torch / independent numpy), never here.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from torq.contract.hw import TorqHw
from torq.contract.program import (
    DTYPE_BYTES,
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

NP = {"bf16": ml_dtypes.bfloat16, "f32": np.float32, "i8": np.int8, "i16": np.int16, "i32": np.int32}


def bf16_round(x: np.ndarray) -> np.ndarray:
    """f32 -> nearest bf16 -> f32 (the values the NPU actually sees)."""
    return np.asarray(x, np.float32).astype(ml_dtypes.bfloat16).astype(np.float32)


def val(i: int) -> Ref:
    return Ref("value", i)


def opnd(i: int, *axes: int) -> Ref:
    return Ref("operand", i, tuple(axes))


def const(c: float) -> Ref:
    return Ref("const", const=c)


def step(op: str, *args: Ref, to: str = "") -> EpilogueStep:
    return EpilogueStep(op, list(args), to)


def relu6_steps(first: int) -> list[EpilogueStep]:
    """max(x, 0) then min(x, 6) written as compare + select, starting from value `first`."""
    return [
        step("select_lt", val(first), const(0.0), const(0.0), val(first)),
        step("select_gt", val(first + 1), const(6.0), const(6.0), val(first + 1)),
    ]


class ProgramBuilder:
    def __init__(self, name: str, hw: TorqHw | None = None) -> None:
        self.name = name
        self.hw = hw or TorqHw()
        self.tensors: list[TensorDesc] = []
        self.buffers: list[LramBuffer] = []
        self.commands: list = []
        self.uses: dict[int, list[int]] = {}
        self.next_offset = 0
        self.n_in = self.n_out = 0

    # tensors
    def input(self, shape: tuple[int, ...], dtype: str = "bf16", host: str = "f32") -> int:
        self.n_in += 1
        return self._tensor("input", shape, dtype, host, self.n_in - 1)

    def output(self, shape: tuple[int, ...], dtype: str = "bf16", host: str = "f32") -> int:
        self.n_out += 1
        return self._tensor("output", shape, dtype, host, self.n_out - 1)

    def constant(self, value: np.ndarray, dtype: str) -> int:
        data = np.ascontiguousarray(np.asarray(value).astype(NP[dtype])).tobytes()
        return self._tensor("constant", tuple(np.shape(value)), dtype, dtype, -1, data)

    def scratch(self, shape: tuple[int, ...], dtype: str = "bf16") -> int:
        return self._tensor("scratch", shape, dtype, dtype, -1)

    def _tensor(self, kind: str, shape: tuple[int, ...], dtype: str, host: str, arg: int, data: bytes = b"") -> int:
        t = TensorDesc(len(self.tensors), kind, tuple(shape), dtype, host, arg, data)
        self.tensors.append(t)
        return t.index

    # buffers
    def buffer(self, size: int, offset: int | None = None) -> int:
        if offset is None:
            a = self.hw.lram_alignment
            offset = self.next_offset
            self.next_offset = (offset + size + a - 1) // a * a
        self.buffers.append(LramBuffer(len(self.buffers), offset, size, -1, -1))
        return len(self.buffers) - 1

    def _use(self, buffer: int) -> None:
        self.uses.setdefault(buffer, []).append(len(self.commands))

    # commands
    def dma_in(self, tensor: int, offsets=None, sizes=None, buffer: int | None = None,
               indices: tuple[int, str, int] | None = None) -> int:
        """A box of `tensor` into `buffer` (new if None); `indices` = (index buffer, index
        dtype, index bound) makes it a gather."""
        t = self.tensors[tensor]
        offsets = tuple(offsets) if offsets is not None else (0,) * len(t.shape)
        sizes = tuple(sizes) if sizes is not None else t.shape
        if buffer is None:
            buffer = self.buffer(math.prod(sizes) * DTYPE_BYTES[t.dtype])
        self._use(buffer)
        if indices is not None:
            self._use(indices[0])
        self.commands.append(DmaIn(tensor, offsets, sizes, buffer, *(indices or ())))
        return buffer

    def dma_out(self, buffer: int, tensor: int, offsets=None, sizes=None,
                indices: tuple[int, str, int, int] | None = None) -> None:
        """`buffer` into a box of `tensor`; `indices` = (index buffer, index dtype, index bound,
        index dim) makes it a scatter."""
        t = self.tensors[tensor]
        offsets = tuple(offsets) if offsets is not None else (0,) * len(t.shape)
        sizes = tuple(sizes) if sizes is not None else t.shape
        self._use(buffer)
        if indices is not None:
            self._use(indices[0])
        self.commands.append(DmaOut(buffer, tensor, offsets, sizes, *(indices or ())))

    def compute(
        self,
        op: str,
        operands: list[tuple[int, tuple[int, ...], str]],
        result_shape: tuple[int, ...],
        result_dtype: str,
        attrs: dict | None = None,
        steps: list[EpilogueStep] | None = None,
        macs: int = 0,
        tile: int = 0,
        result_buffer: int | None = None,
        slice: int = 0,
        split: int = 1,
    ) -> int:
        if result_buffer is None:
            result_buffer = self.buffer(math.prod(result_shape) * DTYPE_BYTES[result_dtype])
        ops = [Operand(b, tuple(s), d) for b, s, d in operands]
        for o in ops:
            self._use(o.buffer)
        self._use(result_buffer)
        self.commands.append(
            Compute(op, ops, Operand(result_buffer, tuple(result_shape), result_dtype), dict(attrs or {}),
                    Epilogue(list(steps or [])), slice=slice, macs=macs, tile=tile, split=split)
        )  # fmt: skip
        return result_buffer

    def build(self, tiles: int = 1) -> Program:
        buffers = []
        for b in self.buffers:
            used = self.uses.get(b.id, [0])
            buffers.append(LramBuffer(b.id, b.offset, b.size, min(used), max(used)))
        return Program(self.name, self.hw.to_dict(), list(self.tensors), buffers, list(self.commands), tiles=tiles)


# --------------------------------------------------------------------------
# Programs shared by several tests


def conv_tiled_program(relu6: bool = False, tiles: int = 2) -> Program:
    """bf16 conv2d 1x4x10x10 * 8x4x3x3 + bias (NCHW), tiled over output rows.

    Inputs: x (1,4,10,10) f32. Constants: w (8,4,3,3), b (8,) in bf16 from
    `conv_weights()`. Output (1,8,8,8) f32 (bf16 on the NPU).
    """
    w, b = conv_weights()
    pb = ProgramBuilder("conv_tiled" + ("_relu6" if relu6 else ""))
    x = pb.input((1, 4, 10, 10))
    tw, tb = pb.constant(w, "bf16"), pb.constant(b, "bf16")
    y = pb.output((1, 8, 8, 8))
    bw, bb = pb.dma_in(tw), pb.dma_in(tb)
    rows = 8 // tiles
    for t in range(tiles):
        bx = pb.dma_in(x, (0, 0, t * rows, 0), (1, 4, rows + 2, 10))
        steps = [step("add", val(0), opnd(2, 1))] + (relu6_steps(1) if relu6 else [])
        by = pb.compute(
            "conv2d",
            [(bx, (1, 4, rows + 2, 10), "bf16"), (bw, (8, 4, 3, 3), "bf16"), (bb, (8,), "bf16")],
            (1, 8, rows, 8), "bf16",
            {"input_dims": "NCHW", "weight_dims": "OCHW", "output_dims": "NOHW", "stride": [1, 1], "dilation": [1, 1]},
            steps, macs=8 * rows * 8 * 4 * 9, tile=t,
        )  # fmt: skip
        pb.dma_out(by, y, (0, 0, t * rows, 0), (1, 8, rows, 8))
    return pb.build(tiles=tiles)


def conv_weights() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    return bf16_round(rng.normal(0, 0.5, (8, 4, 3, 3))), bf16_round(rng.normal(0, 1.0, (8,)))


def with_version(blob: bytes, version: int) -> bytes:
    """`blob` (a serialized program) with its Program.version field rewritten: a blob of an
    older format version holding newer content, which readers must refuse."""
    from torq.contract.schemas.torq_fb.Program import Program as fbProgram

    root = fbProgram.GetRootAs(blob)
    pos = root._tab.Pos + root._tab.Offset(4)
    out = bytearray(blob)
    out[pos:pos + 4] = version.to_bytes(4, "little")
    return bytes(out)


def index_buffer_faults(kind: str) -> list[tuple]:
    """(mutate, message) of the index buffer faults the validator refuses in a gathering DmaIn
    and a scattering DmaOut alike (`kind`: "gather" or "scatter"), for `assert_refused`."""
    return [(lambda c: setattr(c, "index_buffer", c.buffer), f"{kind} reads its indices from its data buffer"),
            (lambda c: setattr(c, "index_buffer", 7), "unknown LRAM buffer 7")]


def assert_refused(program: Program, command: int, mutate, message: str) -> None:
    """Serializing `program` fails with `message` once `mutate` has changed its command `command`."""
    import pytest

    from torq.contract.executable import ExecutableError, serialize_program

    mutate(program.commands[command])
    with pytest.raises(ExecutableError, match=message):
        serialize_program(program)
