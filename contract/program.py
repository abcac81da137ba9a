"""The NSS program: what one Torq executable asks the NPU to do.

This is the in-memory form shared by the compiler (`torq-build-nss-program`
produces it, `torq-serialize-executable` writes it as FlatBuffers) and the
runtime (the loader parses it back, the simulator executes it).

Model:
- `tensors` are DDR (XRAM) tensors: the call's inputs and outputs, constants
  stored in the executable, and scratch tensors for intermediates that leave
  LRAM between tiles. All are dense row-major. An output with `aliases` >= 0
  is an in-place update of input `aliases` (its arg_index): it starts as that
  input's contents (on the device the same DDR buffer, so this moves no byte)
  and the program's DmaOut boxes overwrite parts of it; the rest is the input
  unchanged (exactly, also when the DDR dtype is narrower than the host's).
- `buffers` are LRAM buffers with an offset and size assigned by
  `torq-assign-lram-addresses`, and a live range `[live_start, live_end]` in
  command indices. Two buffers whose live ranges intersect must not overlap.
  A buffer with a `padded_shape` stores its data (`shape`) inside that padded
  array (padding lanes zero; compiler/vector_layout.py): DMAs move only the
  unpadded elements, its `size` counts the padded bytes.
- `commands` have program order (the functional meaning): `DmaIn` copies a
  box of a DDR tensor into a buffer (contiguous row-major of the box's
  sizes), every `DmaIn.strides`-th element of it in its strided form (DDR
  bytes count each row's span when the last dim is strided), or in its gather
  form (`DmaIn.index_buffer` >= 0, an embedding lookup) rows of the tensor
  chosen at run time by integers in LRAM,
  `Compute` runs one TorqHL op on slice `Compute.slice` with LRAM
  operands, `DmaOut` copies a buffer into a box of a DDR tensor, or in its
  scatter form (`DmaOut.index_buffer` >= 0, a KV-cache row written at a
  runtime position) into positions along one dim chosen at run time by
  integers in LRAM. In time
  (`contract/timing.py`) the DMA-in engine, the DMA-out engine and each slice
  run their own commands in program order and overlap wherever no LRAM byte
  range or DDR box dependency orders them; `Compute.tile` is the tile
  iteration a command belongs to and `Compute.slice` the slice
  `torq-build-nss-program` distributed that iteration to. A compute with
  `Compute.split` = k > 1 runs on the k slices `slice` .. `slice + k - 1` at
  once, each computing a disjoint part of the result (the result cut along
  one of its dims into k equal parts) from the shared operand buffers; its
  meaning is the same as on one slice (the parts make the whole result), only
  its time changes (contract/timing.py).

Compute ops (`Compute.op`), their operands, attributes, padding and
accumulate form: the op table, contract/ops.py. All end with the same
`epilogue` attr (see `Epilogue`), applied elementwise on the f32 (or i32)
principal result before the store.

Dtypes are strings: "bf16", "f32", "i8", "i16", "i32". bf16 compute
accumulates in f32 and rounds to nearest even on store; integer compute
accumulates in i32. "i1" is a boolean (one byte per element, 0 or 1, as
IREE stores i1 tensors): an epilogue operand only (a keep / drop mask
read by a select step), never a computed result. "i64" holds gather and
scatter indices only (a DDR tensor a DmaIn moves into a gather's or a
scatter's index buffer), never a compute operand.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

DTYPE_BYTES = {"bf16": 2, "f32": 4, "i8": 1, "i16": 2, "i32": 4, "f16": 2, "i1": 1, "i64": 8}
# Dtypes of a gather's or scatter's indices (`DmaIn.index_dtype`, `DmaOut.index_dtype`).
INDEX_DTYPES = ("i32", "i64")



def nbytes(shape, dtype: str) -> int:
    """Bytes of a dense row-major array of `shape` in `dtype`."""
    n = DTYPE_BYTES[dtype]
    for d in shape:
        n *= d
    return n

# Epilogue step ops. Each step reads refs and writes a new value.
#   binary: add sub mul div max min ; unary: neg
#   "round" a : a rounded to the nearest integer, ties to even (math.roundeven:
#     the quantize of a float value); an integer is left as it is
#   "select_gt" a b c d : (a > b) ? c : d     (relu/clamp written as cmp+select)
#   "select_lt" a b c d : (a < b) ? c : d
#   "cast" a (attr "to": dtype)  -- rounding to a narrower type mid-chain; to an
#     integer dtype a float rounds to nearest even and saturates (the compiler
#     casts only values it knows are integral: arith.fptosi truncates)
# Integer requantization (what TOSA rescale lowers to) needs exact
# fixed-width integer arithmetic, so integer steps may name their width in
# "to" (one of EPILOGUE_INT_TYPES); the result then wraps to that width in
# two's complement, like the MLIR op it comes from:
#   add sub mul max min neg with "to": the exact result, wrapped
#   "shl" a b / "shr_s" a b / "shr_u" a b : shifts by b (0 <= b < width);
#     shr_u reads a as unsigned of the width
#   "trunc" a (to) : wrap a to the width (arith.trunci)
#   "zext" a (to)  : a's low bits of the width `to` as an unsigned value
#     (arith.extui from that width)
# Transcendental functions are table lookups (`TABLE_OPS`, float values only),
# the model of the slice's lookup table over all 65536 bf16 bit patterns:
#   "exp" "log" "tanh" "erf" "rsqrt" "sqrt" a :
#     table_f(a) = bf16(f(bf16(a))): the argument is rounded to bf16 (nearest
#     even; the table index), the entry is f of that bf16 number evaluated in
#     double precision and rounded once to the nearest bf16 (nearest even).
#   Error bound vs f(a) in exact arithmetic, relative, with u = 2^-8 the bf16
#   unit roundoff (8 significant bits): |err| <= u (entry rounding) +
#   k_f(a) * u (argument rounding) to first order, with the condition number
#   k_f(a) = |a f'(a) / f(a)|: exp |a|; tanh, erf <= 1; rsqrt, sqrt 1/2;
#   log 1/|ln a| (so absolute error <= u * (1 + |ln a|)). Costed as one
#   elementwise step (contract/timing.py), like any other epilogue step.
#   Special values as IEEE: exp(-inf) = 0, rsqrt(0) = inf, log(0) = -inf,
#   sqrt/rsqrt/log of a negative number = nan; results beyond the bf16 range
#   round to +-inf.
# An integer function of a quantized value is a lookup in a table the program
# carries (the slice's activation table, loaded with the program):
#   "lut" i t_0 ... t_{n-1} : t_i, for an integer i in [0, n) (an int8 value
#     plus 128 indexes 256 entries); the entries are the step's constant
#     arguments, integers of the width `to`. An int8 activation (hardswish,
#     sigmoid, ...) between two quantizations is exact this way: its float
#     chain is evaluated on all 256 inputs when the table is built.


@dataclass(frozen=True)
class StepDef:
    """An epilogue step op: its argument count (-1: an index and 1..MAX_LUT_ENTRIES table
    entries) and what its `to` names: "dtype" (cast), "width" (an integer step that always
    wraps to its width), "optional" (wraps when a width is given), "none" (a float-only
    table lookup), "entries" (the lookup table's integer width)."""

    name: str
    arity: int
    to: str


def _steps(names: str, arity: int, to: str) -> dict[str, StepDef]:
    return {n: StepDef(n, arity, to) for n in names.split()}


LUT = "lut"
MAX_LUT_ENTRIES = 256
# The epilogue step table: every step op, defined once (see the comment above).
EPILOGUE_STEPS: dict[str, StepDef] = {
    **_steps("add sub mul div max min", 2, "optional"),
    **_steps("neg round", 1, "optional"),
    **_steps("select_gt select_lt select_ge select_le", 4, "optional"),
    **_steps("cast", 1, "dtype"),
    **_steps("shl shr_s shr_u", 2, "width"),
    **_steps("trunc zext", 1, "width"),
    **_steps("exp log tanh erf rsqrt sqrt", 1, "none"),
    LUT: StepDef(LUT, -1, "entries"),
}
TABLE_OPS = frozenset(n for n, d in EPILOGUE_STEPS.items() if d.to == "none")
# Integer dtypes a compute reads or produces (the accumulating domain is i32).
INT_DTYPES = frozenset({"i8", "i16", "i32"})
EPILOGUE_INT_TYPES = {"i1": 1, "i8": 8, "i16": 16, "i32": 32, "i64": 64}


@dataclass
class Ref:
    """An epilogue operand: a previous value, an op operand, or a constant.

    kind "value": index into the values computed so far (value 0 is the
      principal result of an op with principal operands; for "elementwise" there is none and
      the first step's result is value 0).
    kind "operand": index into Compute.operands; `axes[i]` is the output dim
      that operand dim i runs along (broadcast over the others).
    kind "const": the scalar `const`.
    """

    kind: str
    index: int = 0
    axes: tuple[int, ...] = ()
    const: float = 0.0


@dataclass
class EpilogueStep:
    op: str
    args: list[Ref]
    to: str = ""  # "cast": the dtype; integer steps: the width they wrap to


@dataclass
class Epilogue:
    steps: list[EpilogueStep] = field(default_factory=list)
    # The value stored to the result; -1 means the last step (or the principal
    # result when there are no steps).
    result: int = -1


TENSOR_KINDS = ("input", "output", "constant", "scratch")


@dataclass
class TensorDesc:
    index: int
    kind: str  # one of TENSOR_KINDS
    shape: tuple[int, ...]
    dtype: str  # dtype in DDR as the NPU sees it
    host_dtype: str  # dtype on the IREE side of the call (f32 when demoted to bf16)
    arg_index: int = -1  # position among call inputs (kind input) or results (kind output)
    data: bytes = b""  # constants only, in `dtype`, row-major
    aliases: int = -1  # outputs: arg_index of the input it updates in place, -1 for none

    @property
    def nbytes(self) -> int:
        return nbytes(self.shape, self.dtype)


@dataclass
class LramBuffer:
    id: int
    offset: int
    size: int  # bytes
    live_start: int  # first command index that uses it
    live_end: int  # last command index that uses it
    # Padded layout (compiler/vector_layout.py); both empty for a dense buffer. The data is
    # an array of `shape` stored row-major inside an array of `padded_shape` (each dim >=),
    # padding zero; every DMA box and operand on the buffer is `shape` up to unit dims.
    shape: tuple[int, ...] = ()
    padded_shape: tuple[int, ...] = ()


@dataclass
class Operand:
    buffer: int
    shape: tuple[int, ...]
    dtype: str


@dataclass
class DmaIn:
    """A box of DDR tensor `tensor` into `buffer` (contiguous, row-major).

    Gather form (`index_buffer` >= 0): the rows of the box (its dim 0, `sizes[0]` of them)
    are chosen at run time: row j is tensor row `offsets[0] + idx[j]`, with idx the
    `sizes[0]` integers of `index_dtype` at the start of LRAM buffer `index_buffer` (put
    there by an earlier DmaIn), each in [0, `index_bound`) or the run fails; dims 1.. are
    a box as usual. The DMA engine reads the indices and moves one row per descriptor.
    """

    tensor: int
    offsets: tuple[int, ...]
    sizes: tuple[int, ...]
    buffer: int
    index_buffer: int = -1
    index_dtype: str = ""
    index_bound: int = 0
    # Strided form (not with a gather): box element j of dim d is tensor element
    # offsets[d] + j * strides[d] (a strided read of an elementwise operand, FastViT's 1x1
    # stride-2 branch). Empty: every stride 1.
    strides: tuple[int, ...] = ()

    @property
    def gathers(self) -> bool:
        return self.index_buffer >= 0

    @property
    def strided(self) -> bool:
        return any(st != 1 for st in self.strides)

    def read_box(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(offsets, sizes) of the part of the tensor the DMA may read: a gather may read any
        of its `index_bound` rows; a strided box spans (size - 1) * stride + 1 elements."""
        if self.gathers:
            return self.offsets, (self.index_bound, *self.sizes[1:])
        if self.strided:
            return self.offsets, tuple(x.stop - x.start for x in self.read_index())
        return self.offsets, self.sizes

    def read_index(self) -> tuple[slice, ...]:
        """The numpy index of the elements a plain or strided box reads."""
        steps = self.strides or (1,) * len(self.sizes)
        return tuple(slice(o, o + (s - 1) * st + 1 if s else o, st)
                     for o, s, st in zip(self.offsets, self.sizes, steps))


@dataclass
class DmaOut:
    """`buffer` (contiguous, row-major) into a box of DDR tensor `tensor`.

    Scatter form (`index_buffer` >= 0; a KV-cache row at a runtime position, `cache[:, :, pos]
    = k`): the positions of the box along dim `index_dim` (`sizes[index_dim]` of them) are
    chosen at run time: position j (0 <= j < sizes[index_dim]) is written to tensor index
    `offsets[index_dim] + idx[j]` along that dim, with idx the `sizes[index_dim]` integers of
    `index_dtype` at the start of LRAM buffer `index_buffer` (put there by an earlier DmaIn),
    each in [0, `index_bound`) or the run fails; the other dims are a box as usual. The
    positions are written in order (of two equal indices the later position's values stay).
    The DMA engine reads the indices and moves one position per descriptor. Into an in-place
    output (`TensorDesc.aliases`) the tensor's other elements keep the input's values.
    """

    buffer: int
    tensor: int
    offsets: tuple[int, ...]
    sizes: tuple[int, ...]
    index_buffer: int = -1
    index_dtype: str = ""
    index_bound: int = 0
    index_dim: int = 0

    @property
    def scatters(self) -> bool:
        return self.index_buffer >= 0

    def write_box(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(offsets, sizes) of the part of the tensor the DMA may write: a scatter may write any
        of its `index_bound` positions along `index_dim`."""
        if not self.scatters:
            return self.offsets, self.sizes
        d = self.index_dim
        return self.offsets, (*self.sizes[:d], self.index_bound, *self.sizes[d + 1:])


@dataclass
class Compute:
    op: str  # an op of the op table (contract/ops.py): "conv2d", "matmul", ... "elementwise"
    operands: list[Operand]
    result: Operand
    attrs: dict  # op-specific, see module docstring; str / int / list[int]
    epilogue: Epilogue = field(default_factory=Epilogue)
    slice: int = 0
    macs: int = 0
    tile: int = 0  # index of the tile iteration this command belongs to
    # The work the timing model counts with vector dims padded (vector_layout.padded_work):
    # padded MACs / window reads, or padded result elements of an elementwise op; 0 = unpadded.
    padded_work: int = 0
    # Slices the compute is split over, from `slice` on (each writes a disjoint part of the result).
    split: int = 1


Command = Union[DmaIn, DmaOut, Compute]


@dataclass
class Program:
    name: str
    hw: dict  # TorqHw.to_dict() the program was compiled for
    tensors: list[TensorDesc]
    buffers: list[LramBuffer]
    commands: list[Command]
    tiles: int = 1
    lram_peak: int = 0  # compiler's figure: highest sum of live buffer bytes
    # Where the dispatch came from in the model (torch file:lines, ONNX node names); reports only.
    source: str = ""

    def inputs(self) -> list[TensorDesc]:
        return sorted((t for t in self.tensors if t.kind == "input"), key=lambda t: t.arg_index)

    def outputs(self) -> list[TensorDesc]:
        return sorted((t for t in self.tensors if t.kind == "output"), key=lambda t: t.arg_index)
