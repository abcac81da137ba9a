"""The TorqHL op table: each NPU op defined once.

One `OpDef` per op, in `OPS`, the role ODS files play in MLIR and Vela's
`Op` enum of `OperatorInfo` plays in Vela: what a `Compute` command of the
NSS program (contract/program.py) and its `torq_hl.<name>` op in the
compiler's IR mean, how many principal operands it reads, its dims attrs,
which of them it vectorises, whether it pads its input, whether it has an
accumulate form, its cycle rule, and for the ops whose attrs and operand
shapes determine the result, the rule that gives the result shape and MAC
count (the verifier the executable validator runs before anything runs).
Readers: the compiler's patterns and lowering, `vector_layout`, the timing
model, the executable validator and the simulator's kernels (one kernel per
op with principal operands, `runtime/kernels.py`; a test keeps the two in
step). Nothing else names an op kind.

Operands: a compute reads its principal operands first (`OpDef.inputs`), then
its accumulator in accumulate form (`OpDef.accumulator_operand`), then the
operands its epilogue reads. Every op ends with the same `epilogue` attr
(contract/program.py `Epilogue`), applied elementwise on the f32 (or i32)
principal result before the store.

Padding: an op with `pads_input` takes an optional `pad` = [top, bottom,
left, right] and `pad_value` (a number of the operand dtype, default 0: zero
for convs, -inf for torch max pooling, the input zero point of an int8 conv).
The input it reads is its operand with that many rows above / below and
columns left / right of its H and W dims holding `pad_value`, so the operand
is the unpadded box (what its DMA-in moved) and the result shape follows
from the padded size. The slice applies it while reading its window; no byte
of padding is stored in DDR or moved by a DMA.

Accumulate form (a step of a tiled reduction dim, ops with `accumulates` whose
attrs allow it, `OpDef.accumulates_with`): attr `accumulate` = 1, operand
`accumulator_operand` the running sum (f32 for float inputs, i32 for integer
ones, shaped like the result); the principal value is that sum + this step's
principal value (the contraction or sum of the step's slice; i32 wrapping),
the result dtype is the accumulator's, and MACs count this step only. The
accumulator's buffer stays in LRAM across the steps; the group's epilogue
runs once after the last step, as an "elementwise" op reading it.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import Callable

from .program import INT_DTYPES

RESULT = -1  # the role of an op's result (operands are roles 0, 1, ...)
ACCUMULATE = "accumulate"  # the attr of an op in accumulate form
REDUCE_MODES = ("sum", "mean", "max")

Shape = tuple[int, ...]


class OpError(ValueError):
    """An op's operands or attrs break its rules; the message names the attr or operand."""


class CycleRule(enum.Enum):
    """How the timing model (contract/timing.py) prices an op's work after its fixed overhead."""

    # ceil(padded MACs / MACs per cycle of its operands' dtypes); no MACs: as ELEMENTS
    MAC_ARRAY = "mac_array"
    # no channel reduction fills the MAC array's rows: each window element read (the op's
    # `macs`, padded) takes one vector lane for one cycle, ceil(padded reads / lanes(input))
    WINDOW_ON_LANES = "window_on_lanes"
    # ceil(padded result elements x epilogue steps / lanes of its narrowest dtype)
    ELEMENTS = "elements"


@dataclass(frozen=True)
class Dims:
    """A dims attr: a string of distinct `letters`, each naming one dim of its operand in
    order; every letter not in `optional` present."""

    attr: str
    letters: str
    optional: str = ""

    def of(self, attrs: dict, rank: int | None = None) -> str:
        """The checked dims string of `attrs` (OpError when malformed)."""
        d = attrs.get(self.attr)
        if not names_dims(d, self.letters, self.optional, rank):
            raise OpError(f"attr {self.attr}={d!r} does not name the dims (letters {self.letters}, optional "
                          f"{self.optional or 'none'}{f', rank {rank}' if rank is not None else ''})")
        return d


def names_dims(d: object, letters: str, optional: str = "", rank: int | None = None) -> bool:
    """Whether `d` is a dims string: distinct letters of `letters`, every one not in `optional`
    present, `rank` of them when given (the rule the validator and the kernels check)."""
    return (isinstance(d, str) and len(set(d)) == len(d) and set(d) <= set(letters)
            and set(letters) - set(optional) <= set(d) and (rank is None or len(d) == rank))


Operands = list[tuple[Shape, str]]  # (shape, dtype) of each operand
ShapeRule = Callable[["OpDef", Operands, dict], tuple[Shape, int]]


@dataclass(frozen=True)
class OpDef:
    name: str
    doc: str  # the op's meaning: operands, attrs, result, MAC count
    inputs: int  # principal operands, read before the epilogue's
    dims: tuple[Dims, ...] = ()
    # role -> (dims attr, the letters it vectorises, preferred first); other roles and
    # ops: the last dim (compiler/vector_layout.py)
    vector: tuple[tuple[int, str, str], ...] = ()
    # roles whose vectorised dims scale the padded work (vector_layout.padded_work)
    work_roles: tuple[int, ...] = ()
    pads_input: bool = False
    accumulates: bool = False
    # why attrs leave an op with `accumulates` without its accumulate form ("" when they do not)
    no_accumulate: Callable[[dict], str] = lambda attrs: ""
    cycles: CycleRule = CycleRule.ELEMENTS
    # the float-only form of the op given its attrs ("" when integer operands are fine)
    float_only: Callable[[dict], str] = lambda attrs: ""
    # result shape and MACs from operand shapes and attrs, checked before anything runs
    shape_rule: ShapeRule | None = None

    @property
    def mlir_name(self) -> str:
        return f"torq_hl.{self.name}"

    def accumulates_with(self, attrs: dict) -> bool:
        """Whether the op has an accumulate form with these attrs."""
        return self.accumulates and not self.no_accumulate(attrs)

    @property
    def accumulator_operand(self) -> int:
        """The operand index of the running sum in accumulate form: after the principal inputs."""
        return self.inputs

    def dims_of(self, attr: str) -> Dims:
        return next(d for d in self.dims if d.attr == attr)

    def vector_letters(self, role: int) -> tuple[str, str]:
        """(dims attr, letters) this op vectorises on operand `role`; ("", "") for none."""
        return next(((a, letters) for r, a, letters in self.vector if r == role), ("", ""))

    def verify(self, operands: Operands, attrs: dict) -> tuple[Shape, int] | None:
        """The result shape and MACs its attrs and operands give (OpError when they break the
        op's rules); None for an op without a shape rule (its kernel checks its attrs)."""
        if self.shape_rule is None:
            return None
        if len(operands) < self.inputs:
            raise OpError(f"{len(operands)} operands, needs at least {self.inputs}")
        form = self.float_only(attrs)
        if form and operands[0][1] in INT_DTYPES:
            raise OpError(f"{operands[0][1]} operand, {form} is float only")
        return self.shape_rule(self, operands, attrs)


def _pair(attrs: dict, key: str, required: bool = False) -> tuple[int, int]:
    v = attrs.get(key, None if required else [1, 1])
    if not isinstance(v, list) or len(v) != 2 or not all(isinstance(x, int) and x > 0 for x in v):
        raise OpError(f"attr {key} must be two positive ints, got {v!r}")
    return v[0], v[1]


def _window_result(op: OpDef, operands: Operands, attrs: dict) -> tuple[Shape, int]:
    """A window op (depthwise conv, pooling): the output of its H x W window sliding over its
    input (padded per `pad`), the kernel from the weight's H and W or attr `kernel`."""
    x_shape = operands[0][0]
    in_dims = op.dims_of("input_dims").of(attrs, len(x_shape))
    out_dims = op.dims_of("output_dims").of(attrs)
    size = dict(zip(in_dims, x_shape))
    if "pad" in attrs:  # the op reads its input padded (the validator checked the attr)
        top, bottom, left, right = attrs["pad"]
        size["H"] += top + bottom
        size["W"] += left + right
    (sh, sw), (dh, dw) = _pair(attrs, "stride"), _pair(attrs, "dilation")
    if op.inputs == 2:  # the weight's H and W are the window
        w_shape = operands[1][0]
        ws = dict(zip(op.dims_of("weight_dims").of(attrs, len(w_shape)), w_shape))
        if ws["C"] != size["C"]:
            raise OpError(f"input has {size['C']} channels, weight has {ws['C']}")
        kh, kw = ws["H"], ws["W"]
    else:
        kh, kw = _pair(attrs, "kernel", required=True)
    oh = (size["H"] - (kh - 1) * dh - 1) // sh + 1
    ow = (size["W"] - (kw - 1) * dw - 1) // sw + 1
    if oh < 1 or ow < 1:
        raise OpError(f"window {kh}x{kw} (dilation {dh}x{dw}) larger than input {size['H']}x{size['W']}")
    out_size = {"N": size.get("N", 1), "C": size.get("C", 1), "H": oh, "W": ow}
    dropped = [d for d in "NC" if d not in out_dims and out_size[d] != 1]
    if dropped:
        raise OpError(f"output_dims {out_dims} drops dim {dropped[0]} of size {out_size[dropped[0]]}")
    shape = tuple(out_size[d] for d in out_dims)
    return shape, math.prod(shape) * kh * kw


def _reduce_result(op: OpDef, operands: Operands, attrs: dict) -> tuple[Shape, int]:
    x_shape = operands[0][0]
    mode, axes = attrs.get("mode"), attrs.get("axes")
    if mode not in REDUCE_MODES:
        raise OpError(f"attr mode={mode!r} is not one of {', '.join(REDUCE_MODES)}")
    if (not isinstance(axes, list) or not axes or len(set(axes)) != len(axes)
            or not all(isinstance(d, int) and 0 <= d < len(x_shape) for d in axes)):
        raise OpError(f"attr axes={axes!r} must be distinct dims of the rank-{len(x_shape)} operand")
    kept = reduce_result_axes(attrs, len(x_shape))
    if sorted(kept) != [k for k in range(len(x_shape)) if k not in axes]:
        raise OpError(f"attr result_axes={kept!r} must order the operand's dims other than axes {axes!r}")
    return tuple(x_shape[k] for k in kept), math.prod(x_shape)


def reduce_result_axes(attrs: dict, rank: int) -> list[int]:
    """The operand dims a reduce's result keeps, in the result's order: attr result_axes, or
    the dims not in axes in order (the kernel's and the shape rule's one reading)."""
    return list(attrs.get("result_axes") or [k for k in range(rank) if k not in attrs["axes"]])


# A matmul's loop roles and their letters in its dims attrs: the batch (B) and the rhs's
# free dims (N), up to two dims each (MobileViT's attention runs over patches and heads),
# the lhs's free dims (M) up to four (MobileViTv2's 1x1 projection written unfolded: patch
# row, patch column, grid row, grid column), and one reduction K.
MATMUL_ROLE_LETTERS = {"B": "BA", "M": "MLQR", "N": "NP", "K": "K"}
MATMUL_LETTERS = "".join(MATMUL_ROLE_LETTERS.values())  # K last

_POOL_DIMS = (Dims("input_dims", "NCHW", "NC"), Dims("output_dims", "NCHW", "NC"))
_POOL_VECTOR = ((0, "input_dims", "C"), (RESULT, "output_dims", "C"))
_POOL_ATTRS = """attrs: input_dims and output_dims (str over N,C,H,W; N and C optional),
kernel [kh, kw], stride, dilation, optional pad and pad_value (torch pads max
pooling with -inf, TOSA int8 with -128)"""

_DEFS = (
    OpDef(
        "conv2d", """operands [input, weight]. attrs: input_dims (str over N,C,H,W), weight_dims (str over
O,C,H,W), output_dims (str over N,O,H,W; N only if input has N), stride [sh, sw], dilation
[dh, dw], optional pad.
out[n,o,y,x] = sum_{c,i,j} in[n,c,y*sh+i*dh,x*sw+j*dw] * w[o,c,i,j]; MACs = output elements * C * kh * kw.
Grouped: with a G letter in all three dims strings (input over N,G,C,H,W, weight over G,O,C,H,W,
output over N,G,O,H,W) out[n,g,o,y,x] = sum_{c,i,j} in[n,g,c,y*sh+i*dh,x*sw+j*dw] * w[g,o,c,i,j];
C may then be absent from input and weight (one channel per group: a depthwise conv with channel
multiplier O) and O from weight and output. A weight without H and W is a 1x1 kernel.
A 1-D conv (torch Conv1d; IREE folds a unit H away) has no H in any of the three: the window
slides along W only, and pad is [0, 0, left, right]; without G it may lack C (one input
channel: an audio front end's first conv reading the waveform).""",
        inputs=2,
        dims=(Dims("input_dims", "NGCHW", "NGCH"), Dims("weight_dims", "GOCHW", "GOCHW"),
              Dims("output_dims", "NGOHW", "NGOH")),
        vector=((0, "input_dims", "CG"), (1, "weight_dims", "CO"), (RESULT, "output_dims", "OG")),
        work_roles=(0, RESULT),  # C_in and C_out
        pads_input=True, accumulates=True, cycles=CycleRule.MAC_ARRAY),
    OpDef(
        "matmul", """operands [lhs, rhs]. attrs: lhs_dims, rhs_dims, output_dims (strings over B, M, N, K; K in
lhs and rhs, not in the output; each dims string in any order, so transposed operands and a
transposed result need no separate op). Further dims of a role have the role's further
letters (MATMUL_ROLE_LETTERS: A beside B; L, Q, R beside M; P beside N), contracted the
same way.
out[b,m,n] = sum_k lhs[b,m,k] * rhs[b,k,n]; MACs = output elements * K.""",
        inputs=2,
        dims=(Dims("lhs_dims", MATMUL_LETTERS, MATMUL_LETTERS[:-1]),
              Dims("rhs_dims", MATMUL_LETTERS, MATMUL_LETTERS[:-1]),
              Dims("output_dims", MATMUL_LETTERS[:-1], MATMUL_LETTERS[:-1])),
        vector=((0, "lhs_dims", "K"), (1, "rhs_dims", "N"), (RESULT, "output_dims", "N")),
        work_roles=(0, 1),  # K and N
        accumulates=True, cycles=CycleRule.MAC_ARRAY),
    OpDef(
        "depthwise_conv2d", """operands [input, weight]. attrs: input_dims (str over N,C,H,W; N optional),
weight_dims (str over C,H,W), output_dims (str over N,C,H,W), stride, dilation, optional pad.
out[n,c,y,x] = sum_{i,j} in[n,c,y*sh+i*dh,x*sw+j*dw] * w[c,i,j]; MACs = output elements * kh * kw.""",
        inputs=2,
        dims=(Dims("input_dims", "NCHW", "N"), Dims("weight_dims", "CHW"), Dims("output_dims", "NCHW", "N")),
        vector=((0, "input_dims", "C"), (1, "weight_dims", "C"), (RESULT, "output_dims", "C")),
        work_roles=(RESULT,),  # the channels
        pads_input=True, cycles=CycleRule.WINDOW_ON_LANES, shape_rule=_window_result),
    OpDef(
        "maxpool2d", f"""operands [input]. {_POOL_ATTRS}.
out[n,c,y,x] = max_{{i<kh,j<kw}} in[n,c,y*sh+i*dh,x*sw+j*dw]. Counted (the `macs` field, timed like
MACs) as window elements read: output elements * kh * kw.""",
        inputs=1, dims=_POOL_DIMS, vector=_POOL_VECTOR, work_roles=(RESULT,),
        pads_input=True, cycles=CycleRule.WINDOW_ON_LANES, shape_rule=_window_result),
    OpDef(
        "avg_pool2d", f"""operands [input], float only. {_POOL_ATTRS}.
out[n,c,y,x] = (sum_{{i<kh,j<kw}} in[n,c,y*sh+i*dh,x*sw+j*dw]) / (kh*kw), summed in f32, one f32
division. The divisor is the full window, padding included: torch's count_include_pad=True.
Counted as maxpool2d.""",
        inputs=1, dims=_POOL_DIMS, vector=_POOL_VECTOR, work_roles=(RESULT,),
        pads_input=True, cycles=CycleRule.WINDOW_ON_LANES, shape_rule=_window_result,
        float_only=lambda attrs: "avg_pool2d"),
    OpDef(
        "reduce", """operands [input]. attrs: mode ("sum", "mean" or "max"), axes (list of distinct input
dims to reduce), optional result_axes (the kept input dims in the result's order, a transposed
result; default: in order). The result is the input without those dims. sum/mean
accumulate in f32 (mean divides once by the number of reduced elements; float only) or in the
i32 accumulator; max is exact. Global average pooling (`x.mean((2, 3))`, `AdaptiveAvgPool2d(1)`)
is a reduce. Counted as input elements read. Mode sum has an accumulate form (a sum of a whole
tensor too large for LRAM, GroupNorm(1, C)'s statistics, summed in steps).""",
        inputs=1, work_roles=(0,),  # the input elements read
        accumulates=True,
        no_accumulate=lambda attrs: "" if attrs.get("mode") == "sum" else
        f"mode {attrs.get('mode')} (its steps do not add up)",
        cycles=CycleRule.WINDOW_ON_LANES, shape_rule=_reduce_result,
        float_only=lambda attrs: "mode mean" if attrs.get("mode") == "mean" else ""),
    OpDef(
        "elementwise", """operands: the epilogue's only; the result has the shape of `result`; there is
no principal value (the first epilogue step's result is value 0).""",
        inputs=0),
)

OPS: dict[str, OpDef] = {d.name: d for d in _DEFS}
