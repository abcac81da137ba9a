"""Torq lowering patterns: one matcher per pattern, used in two modes.

`torq-mark-patterns-for-super-tiling` runs the matchers in *mark* mode (tag
the ops of each group with `torq-fuse-group` / `torq-fuse-group-id`);
`torq-lower-to-torq-hl` runs the same matchers in *rewrite* mode (replace the
group with one TorqHL op). Because both modes share `match_group`, marking and
lowering cannot disagree.

Groups (principal op first):
- conv2d: a convolution-shaped `linalg.generic` (+ the `linalg.fill` of its
  accumulator, + an optional elementwise epilogue generic that is its only user:
  bias, batch-norm scale/shift, ReLU/ReLU6/clamp, residual add, ...); also
  grouped convolutions (a channel dim shared by input, weight and output next
  to per-group input and/or output channels), whose bias IREE may put in the
  accumulator (a broadcast init becomes an epilogue add), and 1x1
  convolutions that are no matmul (two or three spatial/batch dims);
- depthwise_conv2d: a conv whose only channel dim is shared by input, weight
  and output (torch Conv2d(groups=C), TOSA depthwise_conv2d with multiplier 1),
  same fill and epilogue;
- matmul: a matmul-shaped generic (B?, M, N, K), same fill and epilogue;
  an epilogue that reads the result transposed (attention's P V followed by
  a head transpose) is folded by writing the result in that order (the
  matmul's output_dims);
- maxpool2d / avg_pool2d: a pooling generic (input read at `out * stride + k
  * dilation`, a shape-only window operand, body `max(out, in)` or
  `out + in`) with a -inf / integer-min or zero fill; average pooling must
  divide by the window size in its epilogue (folded into the op);
- reduce: a reduction over plain dims (sum / max; mean when the epilogue
  divides by the reduced count), whose body may first compute the value it
  accumulates (an elementwise prologue: IREE fuses a residual add + ReLU into
  a global mean), or torch-mlir's adaptive average pooling form that gathers
  a box of a tensor with `tensor.extract`;
- elementwise: a standalone elementwise generic (add/sub/mul/max/min/clamp...).
A select in an elementwise body takes a comparison or an i1 operand (a
boolean mask, as torch's `where(mask, -inf, 0)`) as its condition.
Elementwise bodies (epilogues, prologues, standalone ops) may use the
transcendental functions exp, log, tanh, erf, rsqrt and sqrt (table lookup
steps, see contract/program.py) and x ** n for a small constant n (math.fpowi,
as multiplications): GELU (both torch forms), sigmoid, SiLU and the layer
norm scale lower this way; softmax arrives decomposed (see pipeline.py) into
max and sum reductions and elementwise ops. A box read (`box_read`: a copy of
part of an input, made by dispatch extraction) computes nothing and belongs to
the group that reads it. A `tensor.pad` whose users are all conv / pooling
inputs padded on their window dims, or the function's results
(`padding_fold`), belongs to no group: torq-fold-padding turns it into a view
(`PAD_VIEW`) whose padding the consuming op applies, or which the NSS program
writes out (the source box, then the border filled with the pad value).
Results no group computes must be such copies (`data_movement_reason`): an
argument, a box of one, or a padding of either; the NSS program makes them
with DMAs alone. Anything else is `Unsupported` with a reason, and the
dispatch stays on host.
MACs (the `macs` of a group): multiply-accumulates for convolutions and
matmuls; window elements read for pooling; input elements read for reduce.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import numpy as np
from iree.compiler import ir

from torq.contract.ops import OPS
from torq.contract.program import EPILOGUE_INT_TYPES, LUT, MAX_LUT_ENTRIES, Epilogue, EpilogueStep, Ref

from .ir_utils import constant_of, indexing_maps, int_array, mlir_dtype, n_inputs, region_ops, static_shape
from .ir_utils import iterator_types as _iterators, loop_ranges as _loop_ranges

FUSE_GROUP = "torq-fuse-group"
FUSE_GROUP_ID = "torq-fuse-group-id"


class Unsupported(Exception):
    """The op cannot run on the NPU; the message says why."""


@dataclass
class Contraction:
    """The principal op of a group: its TorqHL kind, attrs and MAC count.

    `n_inputs` principal operands come first among the generic's ins (the
    pooling window operand, a shape-only tensor, is not one); `identity`
    is the accumulator init the op needs ("zero" or "lowest"); `mean_count`
    is the divisor an epilogue division may be folded into (average pooling,
    mean), 0 if none; `prologue` marks a reduction whose body first computes,
    elementwise from its ins, the value it accumulates.
    """
    kind: str  # "conv2d" | "matmul" | "depthwise_conv2d" | "maxpool2d" | "avg_pool2d" | "reduce"
    attrs: dict
    macs: int
    n_inputs: int = 2
    identity: str = "zero"
    mean_count: int = 0
    prologue: bool = False  # reduce: the body computes what it accumulates from its ins
    gather: "Gather | None" = None  # reduce: the body reads its input with tensor.extract


@dataclass
class Gather:
    """A reduction whose body reads a box of `source` with tensor.extract.

    The reduced input is `source[offsets : offsets + sizes]`; `consts` are the
    other results of the op, each a scalar constant it yields (result index ->
    value), like the pool size torch-mlir's adaptive average pooling returns.
    """
    source: ir.Value
    offsets: list[int]
    sizes: list[int]
    consts: dict[int, float] = field(default_factory=dict)


@dataclass
class Match:
    kind: str  # a Contraction kind or "elementwise"
    principal: ir.Operation
    ops: list[ir.Operation]  # all ops of the group, principal first
    bottom: ir.Operation  # the op whose result leaves the group
    inputs: list[ir.Value]  # TorqHL operands, in order
    attrs: dict
    epilogue: Epilogue
    macs: int = 0
    # A TorqHL elementwise op computed before the principal, whose result is
    # the principal's first operand (inputs[0] is None then): its operands,
    # steps and result type.
    prologue: tuple[list[ir.Value], Epilogue, ir.Type] | None = None
    # The box the principal reads (inputs[0] is None then): see Gather.
    gather: Gather | None = None


# --- affine map analysis -------------------------------------------------------

def _dim(e: ir.AffineExpr) -> int | None:
    return ir.AffineDimExpr(e).position if isinstance(e, ir.AffineDimExpr) else None


def _linear_terms(e: ir.AffineExpr) -> list[tuple[int, int]] | None:
    """`e` as a list of (dim, coefficient) if it is a positive linear sum of dims."""
    if isinstance(e, ir.AffineDimExpr):
        return [(ir.AffineDimExpr(e).position, 1)]
    if isinstance(e, ir.AffineAddExpr):
        a = ir.AffineAddExpr(e)
        lhs, rhs = _linear_terms(a.lhs), _linear_terms(a.rhs)
        return None if lhs is None or rhs is None else lhs + rhs
    if isinstance(e, ir.AffineMulExpr):
        m = ir.AffineMulExpr(e)
        for x, c in ((m.lhs, m.rhs), (m.rhs, m.lhs)):
            if isinstance(c, ir.AffineConstantExpr) and isinstance(x, ir.AffineDimExpr):
                return [(ir.AffineDimExpr(x).position, ir.AffineConstantExpr(c).value)]
    return None


def _is_mul_add_body(op: ir.Operation) -> bool:
    """Body is `out + a*b`, optionally with casts of a and b first."""
    names = [o.name for o in region_ops(op)]
    core = [n for n in names if n not in ("arith.extsi", "arith.extf", "arith.sitofp", "arith.extui")]
    return core in (["arith.mulf", "arith.addf", "linalg.yield"], ["arith.muli", "arith.addi", "linalg.yield"])


def classify_contraction(op: ir.Operation) -> Contraction | None:
    """Conv2d / matmul structure of a linalg.generic, or None if not one."""
    if op.name != "linalg.generic" or n_inputs(op) != 2 or "reduction" not in _iterators(op):
        return None
    if not _is_mul_add_body(op):
        return None
    maps = indexing_maps(op)
    its = _iterators(op)
    in_map, w_map, out_map = maps
    out_dims = [_dim(e) for e in out_map.results]
    w_dims = [_dim(e) for e in w_map.results]
    if None in out_dims or None in w_dims:
        return None
    in_terms = [_linear_terms(e) for e in in_map.results]
    if any(t is None for t in in_terms):
        return None
    shapes = [static_shape(v.type) for v in op.operands]
    if any(s is None for s in shapes):
        return None
    ranges = _loop_ranges(op)
    spatial = [t for t in in_terms if len(t) > 1]
    if spatial:
        return _classify_conv(its, in_terms, w_dims, out_dims, ranges)
    in_dims = [t[0][0] for t in in_terms]
    steps = {t[0][0]: t[0][1] for t in in_terms}  # an input dim read at `step * loop`: a strided 1x1 conv
    if all(c == 1 for c in steps.values()):
        matmul = _classify_matmul(its, in_dims, w_dims, out_dims, ranges)
        if matmul is not None:
            return matmul
    return _classify_pointwise_conv(its, in_dims, w_dims, out_dims, ranges, steps)


def _window_pair(terms, its, roles) -> tuple[int, int, int, int] | None:
    """A sliding-window input index `out*stride + k*dilation` as (out dim, stride,
    window dim, dilation): one parallel and one reduction dim, neither seen yet."""
    (a, ca), (b, cb) = terms
    if its[a] == "reduction" and its[b] == "parallel":
        (a, ca), (b, cb) = (b, cb), (a, ca)
    if not (its[a] == "parallel" and its[b] == "reduction") or a in roles or b in roles:
        return None
    return a, ca, b, cb


def _classify_conv(its, in_terms, w_dims, out_dims, ranges) -> Contraction | None:
    """Roles of the loop dims of a conv-shaped mul-add generic.

    Input dims read by a single loop dim are N (parallel, in the output, not
    in the weight), C (reduction, in the weight, not in the output) or G
    (parallel, in weight and output: the channel of a depthwise conv, the
    group of a grouped one); input dims read by `out * stride + k * dilation`
    are the spatial H and W. Weight dims are C, G, H, W (the kernel dims) or
    O (parallel, in the output only). Without G this is conv2d (C and O
    required); with G only it is depthwise_conv2d (G named C in its dims); G
    with C and/or O is a grouped conv2d (dims with a G letter).
    """
    letters_in, spatial_pairs, roles = [], [], {}
    for t in in_terms:
        if len(t) == 1:
            d, c = t[0]
            if c != 1:
                return None
            in_w, in_o = d in w_dims, d in out_dims
            if its[d] == "reduction" and in_w and not in_o:
                letter = "C"
            elif its[d] == "parallel" and in_o and not in_w:
                letter = "N"
            elif its[d] == "parallel" and in_o and in_w:
                letter = "G"
            else:
                return None
            if letter in roles.values():
                return None
            roles[d] = letter
            letters_in.append(letter)
        elif len(t) == 2:
            pair = _window_pair(t, its, roles)
            if pair is None:
                return None
            a, _, b, _ = pair
            spatial_pairs.append(pair)
            if len(spatial_pairs) > 2:
                return None
            letter = "HW"[len(spatial_pairs) - 1]
            roles[a], roles[b] = letter, "k" + letter
            letters_in.append(letter)
        else:
            return None
    if len(spatial_pairs) != 2:
        return None
    (oh, sh, kh, dh), (ow, sw, kw, dw) = spatial_pairs
    w_letters = []
    for d in w_dims:
        r = roles.get(d)
        if r in ("C", "G"):
            w_letters.append(r)
        elif r in ("kH", "kW"):
            w_letters.append(r[1])
        elif r is None and its[d] == "parallel" and d in out_dims and "O" not in w_letters:
            roles[d] = "O"
            w_letters.append("O")
        else:
            return None
    out_letters = [roles.get(d) for d in out_dims]
    if any(l not in ("N", "G", "O", "H", "W") for l in out_letters) or len(set(out_letters)) != len(out_letters):
        return None
    if set(roles) != set(range(len(its))):
        return None  # a loop dim with no role
    grouped = "G" in roles.values()
    has_c, has_o = "C" in roles.values(), "O" in roles.values()
    if not grouped and not (has_c and has_o):
        return None
    out_elems = 1
    for d in out_dims:
        out_elems *= ranges[d]
    c_size = next((ranges[d] for d, r in roles.items() if r == "C"), 1)
    macs = out_elems * c_size * ranges[kh] * ranges[kw]
    kind = "depthwise_conv2d" if grouped and not has_c and not has_o else "conv2d"
    if kind == "depthwise_conv2d":  # the group dim is the channel: name it C
        letters_in, w_letters, out_letters = ([("C" if l == "G" else l) for l in ls]
                                              for ls in (letters_in, w_letters, out_letters))
    attrs = {"input_dims": "".join(letters_in), "weight_dims": "".join(w_letters),
             "output_dims": "".join(out_letters), "stride": [sh, sw], "dilation": [dh, dw]}
    return Contraction(kind, attrs, macs)


def _classify_pointwise_conv(its, in_dims, w_dims, out_dims, ranges, steps: dict[int, int]) -> Contraction | None:
    """A 1x1 convolution that is no matmul: the input keeps two (H, W) or three
    (N, H, W) dims the weight does not have, e.g. C x H x W * O x C -> O x H x W.
    Lowered as conv2d whose weight has no kernel dims; the input reads H and W
    at `step * loop` (`steps`, per loop dim): the conv's stride. Only H and W
    may be strided."""
    if len(set(in_dims)) != len(in_dims) or len(set(w_dims)) != len(w_dims):
        return None
    roles, free = {}, []
    for d in in_dims:
        in_w, in_o = d in w_dims, d in out_dims
        if its[d] == "reduction" and in_w and not in_o:
            roles[d] = "C"
        elif its[d] == "parallel" and in_w and in_o:
            roles[d] = "G"
        elif its[d] == "parallel" and in_o and not in_w:
            free.append(d)
        else:
            return None
    if len(free) not in (2, 3) or list(roles.values()).count("C") != 1:
        return None
    roles.update(zip(free, "NHW" if len(free) == 3 else "HW"))
    for d in w_dims:
        if d not in roles:
            if its[d] != "parallel" or d not in out_dims or "O" in roles.values():
                return None
            roles[d] = "O"
    if "O" not in roles.values() or set(roles) != set(range(len(its))):
        return None
    out_letters = "".join(roles[d] for d in out_dims)
    if set(out_letters) != {r for r in roles.values() if r != "C"}:
        return None
    out_elems = 1
    for d in out_dims:
        out_elems *= ranges[d]
    c = next(ranges[d] for d, r in roles.items() if r == "C")
    stride = {roles[d]: steps.get(d, 1) for d in roles}
    if any(k not in ("H", "W") and v != 1 for k, v in stride.items()):
        return None
    attrs = {"input_dims": "".join(roles[d] for d in in_dims), "weight_dims": "".join(roles[d] for d in w_dims),
             "output_dims": out_letters, "stride": [stride["H"], stride["W"]], "dilation": [1, 1]}
    return Contraction("conv2d", attrs, out_elems * c)


def _classify_matmul(its, in_dims, w_dims, out_dims, ranges) -> Contraction | None:
    red = [d for d, it in enumerate(its) if it == "reduction"]
    if len(red) != 1:
        return None
    k = red[0]

    def letter(d):
        if d == k:
            return "K"
        in_a, in_b = d in in_dims, d in w_dims
        if in_a and in_b:
            return "B"
        return "M" if in_a else "N" if in_b else "?"

    la, lb, lo = ("".join(letter(d) for d in ds) for ds in (in_dims, w_dims, out_dims))
    for s in (la, lb, lo):
        if "?" in s or len(set(s)) != len(s):
            return None
    if "K" not in la or "K" not in lb or "K" in lo:
        return None
    out_elems = 1
    for d in out_dims:
        out_elems *= ranges[d]
    return Contraction("matmul", {"lhs_dims": la, "rhs_dims": lb, "output_dims": lo},
                       out_elems * ranges[k])


# --- pooling and reductions --------------------------------------------------------

_REDUCE_BODIES = {"arith.addf": "sum", "arith.addi": "sum", "arith.maximumf": "max", "arith.maxnumf": "max",
                  "arith.maxsi": "max"}


def classify_reduction(op: ir.Operation) -> Contraction | None:
    """Pooling / reduction structure of a linalg.generic, or None if not one.

    The body is `out = max(out, in)` or `out = out + in` (no casts). With
    two ins, the second is the pooling window: a shape-only operand whose map
    reads exactly the reduction dims and whose value the body ignores; the
    input map reads two dims as `out * stride + k * dilation` (H, W) and the
    others (at most two: N, C) by one parallel dim each: maxpool2d (max) or
    avg_pool2d (sum, which needs its division by kh*kw folded: see
    match_group). With one in, plain dims only: reduce over the input dims
    read by reduction loop dims (mode sum or max; mean when the division by
    the reduced count is folded); the output keeps the other dims in order.
    """
    if op.name != "linalg.generic" or len(op.results) != 1 or "reduction" not in _iterators(op):
        return None
    n = n_inputs(op)
    body = region_ops(op)
    if len(body) < 2 or body[-2].name not in _REDUCE_BODIES or body[-1].name != "linalg.yield":
        return None
    args = list(op.regions[0].blocks[0].arguments)
    r = body[-2]
    if body[-1].operands[0] != r.results[0] or len(args) != n + 1:
        return None
    others = [v for v in r.operands if v != args[n]]
    if len(others) != 1:
        return None  # the combiner must read the accumulator once
    x = others[0]
    prologue = len(body) > 2
    if prologue:
        if isinstance(x.owner, ir.Block):
            return None
    elif n not in (1, 2) or x != args[0]:
        return None
    mode = _REDUCE_BODIES[r.name]
    its, maps = _iterators(op), indexing_maps(op)
    if any(static_shape(v.type) is None for v in op.operands):
        return None
    out_dims = [_dim(e) for e in maps[-1].results]
    red = [d for d, it in enumerate(its) if it == "reduction"]
    if None in out_dims or len(set(out_dims)) != len(out_dims) or any(its[d] != "parallel" for d in out_dims):
        return None
    in_terms = [_linear_terms(e) for e in maps[0].results]
    if any(t is None for t in in_terms):
        return None
    ranges = _loop_ranges(op)
    identity = "zero" if mode == "sum" else "lowest"
    if prologue:
        # The accumulated value is computed over all loops (laid out in loop
        # order); every in is read by plain dims.
        if any(_dim(e) is None for m in maps[:n] for e in m.results) or 0 in ranges:
            return None
        # An in read along a reduced dim must be read along every loop: else
        # the body is a contraction (a product broadcast over a parallel dim),
        # whose prologue would materialise every product.
        for m in maps[:n]:
            dims = {_dim(e) for e in m.results}
            if dims & set(red) and dims != set(range(len(its))):
                return None
        if [d for d in range(len(its)) if its[d] == "parallel"] != out_dims:
            return None
        count = math.prod(ranges[d] for d in red)
        return Contraction("reduce", {"mode": mode, "axes": red}, math.prod(ranges), n_inputs=1,
                           identity=identity, mean_count=count if mode == "sum" else 0, prologue=True)
    if n == 2:
        w_dims = [_dim(e) for e in maps[1].results]
        if sorted(d for d in w_dims if d is not None) != red or None in w_dims:
            return None
        return _classify_pool(its, in_terms, out_dims, ranges, mode)
    if any(len(t) != 1 or t[0][1] != 1 for t in in_terms):
        return None
    in_dims = [t[0][0] for t in in_terms]
    if sorted(in_dims) != list(range(len(its))):
        return None
    if [d for d in in_dims if its[d] == "parallel"] != out_dims:
        return None  # the result is the input without the reduced dims, in order
    axes = [i for i, d in enumerate(in_dims) if its[d] == "reduction"]
    count = math.prod(ranges[d] for d in red)
    return Contraction("reduce", {"mode": mode, "axes": axes}, math.prod(ranges), n_inputs=1,
                       identity=identity, mean_count=count if mode == "sum" else 0)


def _classify_pool(its, in_terms, out_dims, ranges, mode) -> Contraction | None:
    singles, pairs, roles = [], [], {}
    for t in in_terms:
        if len(t) == 1:
            d, c = t[0]
            if c != 1 or its[d] != "parallel" or d in roles:
                return None
            roles[d] = None  # N or C, named below
            singles.append(d)
        elif len(t) == 2:
            pair = _window_pair(t, its, roles)
            if pair is None:
                return None
            a, _, b, _ = pair
            pairs.append(pair)
            if len(pairs) > 2:
                return None
            roles[a], roles[b] = "HW"[len(pairs) - 1], "k"
        else:
            return None
    if len(pairs) != 2 or len(singles) > 2 or set(roles) != set(range(len(its))):
        return None
    for d, letter in zip(singles, "NC" if len(singles) == 2 else "C"):
        roles[d] = letter
    letters_in, k = [], 0
    for t in in_terms:
        if len(t) == 1:
            letters_in.append(roles[t[0][0]])
        else:
            letters_in.append("HW"[k])
            k += 1
    out_letters = [roles[d] for d in out_dims]
    if "k" in out_letters or None in out_letters:
        return None
    (_, sh, kh, dh), (_, sw, kw, dw) = pairs
    out_elems = 1
    for d in out_dims:
        out_elems *= ranges[d]
    window = ranges[kh] * ranges[kw]
    attrs = {"input_dims": "".join(letters_in), "output_dims": "".join(out_letters),
             "kernel": [ranges[kh], ranges[kw]], "stride": [sh, sw], "dilation": [dh, dw]}
    if mode == "max":
        return Contraction("maxpool2d", attrs, out_elems * window, n_inputs=1, identity="lowest")
    return Contraction("avg_pool2d", attrs, out_elems * window, n_inputs=1, identity="zero",
                       mean_count=window)


def classify_principal(op: ir.Operation) -> Contraction | None:
    """The principal structure of a linalg op (contraction, pooling, reduction), or None."""
    if op.name != "linalg.generic":
        return None
    return classify_contraction(op) or classify_reduction(op) or classify_gather_reduction(op)


# --- reductions that gather their input (torch-mlir's adaptive average pooling) ---------

_INDEX_BINARY = {"arith.addi": np.add, "arith.subi": np.subtract, "arith.muli": np.multiply,
                 "arith.minsi": np.minimum, "arith.maxsi": np.maximum, "arith.minui": np.minimum,
                 "arith.maxui": np.maximum}
_INDEX_DIVS = {"arith.divsi", "arith.divui", "arith.remsi", "arith.remui", "arith.floordivsi"}
_ICMP = {"eq": np.equal, "ne": np.not_equal, "slt": np.less, "sle": np.less_equal, "sgt": np.greater,
         "sge": np.greater_equal, "ult": np.less, "ule": np.less_equal, "ugt": np.greater,
         "uge": np.greater_equal}
_GATHER_MAX_POINTS = 1 << 22  # iteration points evaluated at compile time


def classify_gather_reduction(op: ir.Operation) -> Contraction | None:
    """A sum over a box of a tensor the body reads with `tensor.extract`.

    This is how torch-mlir lowers adaptive average pooling: the generic runs
    over (output, window) loops, its only in is a shape-only tensor, the body
    computes the extract indices from `linalg.index` with integer arithmetic,
    masks the value with `select(cmpi, value, 0)`, and accumulates with
    `addf`; further results yield scalar constants (the window size). The
    index arithmetic is evaluated at compile time over every iteration point;
    the op is a reduce (mode sum) when the masks are always true and the
    extract reads a box of the tensor in row-major order: the output loops
    enumerate the box dims they index and the window loops the others (the
    reduced axes). The result must have the shape of the kept box dims.
    """
    if op.name != "linalg.generic" or "reduction" not in _iterators(op) or n_inputs(op) > 1:
        return None
    body = region_ops(op)
    extracts = [b for b in body if b.name == "tensor.extract"]
    if len(extracts) != 1 or body[-1].name != "linalg.yield" or len(op.results) < 1:
        return None
    src = extracts[0].operands[0]
    if not isinstance(src.owner, ir.Block) and src.owner.parent == op:
        return None
    if any(static_shape(v.type) is None for v in list(op.operands) + [src]):
        return None
    its, maps = _iterators(op), indexing_maps(op)
    ranges = _loop_ranges(op)
    if 0 in ranges or math.prod(ranges) > _GATHER_MAX_POINTS:
        return None
    par = [d for d, it in enumerate(its) if it == "parallel"]
    red = [d for d, it in enumerate(its) if it == "reduction"]
    if [_dim(e) for e in maps[n_inputs(op)].results] != par:
        return None  # result 0 is laid out over the output loops in order
    args = list(op.regions[0].blocks[0].arguments)
    acc_arg = args[n_inputs(op)]
    grid = np.meshgrid(*[np.arange(r, dtype=np.int64) for r in ranges], indexing="ij")
    env: dict = {}
    data: dict = {}  # float values: the gathered value under a mask (True: read, False: 0)
    index: list[np.ndarray] | None = None
    acc = None

    def ival(v):
        if v in env:
            return env[v]
        c = constant_of(v)
        if c is None or c.ndim != 0 or c.dtype.kind not in "iu":
            raise KeyError
        return np.int64(c)

    try:
        for b in body[:-1]:
            name = b.name
            if name == "linalg.index":
                env[b.results[0]] = grid[ir.IntegerAttr(b.attributes["dim"]).value]
            elif name == "arith.constant":
                continue
            elif name in ("arith.index_cast", "arith.index_castui"):
                env[b.results[0]] = ival(b.operands[0])
            elif name in _INDEX_BINARY:
                env[b.results[0]] = _INDEX_BINARY[name](ival(b.operands[0]), ival(b.operands[1]))
            elif name in _INDEX_DIVS:
                a, c = ival(b.operands[0]), ival(b.operands[1])
                if np.any(a < 0) or np.any(c <= 0):
                    return None  # only the non-negative case, where every division agrees
                env[b.results[0]] = a // c if "div" in name else a % c
            elif name == "arith.cmpi":
                pred = _cmp_predicate(b)
                a, c = ival(b.operands[0]), ival(b.operands[1])
                if pred.startswith("u") and (np.any(a < 0) or np.any(c < 0)):
                    return None
                env[b.results[0]] = _ICMP[pred](a, c)
            elif name == "tensor.extract":
                index = [np.broadcast_to(ival(i), ranges) for i in b.operands[1:]]
                data[b.results[0]] = np.ones(ranges, dtype=bool)
            elif name == "arith.select":
                cond, t, f = b.operands
                zt, zf = (constant_of(v) for v in (t, f))
                if t in data and zf is not None and float(zf) == 0.0:
                    data[b.results[0]] = data[t] & env[cond]
                elif f in data and zt is not None and float(zt) == 0.0:
                    data[b.results[0]] = data[f] & ~env[cond]
                else:
                    return None
            elif name == "arith.addf" and acc is None and acc_arg in list(b.operands):
                x = next(v for v in b.operands if v != acc_arg)
                if x not in data:
                    return None
                acc = (b.results[0], data[x])
            else:
                return None
    except KeyError:
        return None
    ys = list(body[-1].operands)
    if acc is None or index is None or ys[0] != acc[0] or not acc[1].all():
        return None  # a mask that is sometimes false would read zeros: not a plain box
    consts = {}
    for i, y in enumerate(ys[1:], start=1):
        c = constant_of(y)
        if c is None or c.ndim != 0:
            return None
        consts[i] = float(c)
    src_shape = static_shape(src.type)
    offsets = [int(ix.min()) for ix in index]
    sizes = [int(ix.max()) - o + 1 for ix, o in zip(index, offsets)]
    deps = [{d for d in range(len(ranges)) if ranges[d] > 1 and np.any(np.diff(ix, axis=d))} for ix in index]
    kept = [k for k, dp in enumerate(deps) if dp and dp <= set(par)]
    reduced = [k for k in range(len(index)) if k not in kept]
    if any(dp and not (dp <= set(par) or dp <= set(red)) for dp in deps):
        return None
    if any(o + s > d for o, s, d in zip(offsets, sizes, src_shape)):
        return None

    def linear(dims, arrays, extents):
        return np.ravel_multi_index([arrays[k] for k in dims], [extents[k] for k in dims]) if dims else 0

    rel = [ix - o for ix, o in zip(index, offsets)]
    if not np.array_equal(linear(kept, rel, sizes), linear(par, grid, ranges)):
        return None
    red_box = [k for k in reduced if sizes[k] > 1]
    if math.prod(sizes[k] for k in red_box) != math.prod(ranges[d] for d in red) \
            or not np.array_equal(linear(red_box, rel, sizes), linear(red, grid, ranges)):
        return None
    if tuple(sizes[k] for k in kept) != static_shape(op.results[0].type):
        return None  # the result is a reshape of the kept box dims (e.g. batch x channels): no
    count = math.prod(ranges[d] for d in red)
    return Contraction("reduce", {"mode": "sum", "axes": reduced}, math.prod(sizes), n_inputs=1,
                       identity="zero", mean_count=count, gather=Gather(src, offsets, sizes, consts))


# --- elementwise bodies -----------------------------------------------------------

_BINARY = {"arith.addf": "add", "arith.addi": "add", "arith.subf": "sub", "arith.subi": "sub",
           "arith.mulf": "mul", "arith.muli": "mul", "arith.divf": "div",
           "arith.maximumf": "max", "arith.maxnumf": "max", "arith.maxsi": "max",
           "arith.minimumf": "min", "arith.minnumf": "min", "arith.minsi": "min"}
_CMP = {"ogt": "gt", "ugt": "gt", "sgt": "gt", "olt": "lt", "ult": "lt", "slt": "lt",
        "oge": "ge", "uge": "ge", "sge": "ge", "ole": "le", "ule": "le", "sle": "le"}
_SHIFTS = {"arith.shli": "shl", "arith.shrsi": "shr_s", "arith.shrui": "shr_u"}
_FLOAT_CASTS = {"arith.truncf", "arith.extf"}
# Transcendental functions: table lookup steps (program.TABLE_OPS), float only.
_TABLE_FNS = {"math.exp": "exp", "math.log": "log", "math.tanh": "tanh", "math.erf": "erf",
              "math.rsqrt": "rsqrt", "math.sqrt": "sqrt"}
# x ** n with a constant integer n (math.fpowi, torch's x ** 3 in the tanh
# form of GELU) is n - 1 multiplications; larger |n| stays on host.
_MAX_POWI = 8
# Integer constants travel as f64 in the executable: exact up to 2**53.
_MAX_EXACT_INT = 1 << 53


def _int_width(t: ir.Type) -> str:
    """The integer type name ("i32", "i64", ...) a step wraps to, or "" for floats."""
    s = str(t)
    return s if s in EPILOGUE_INT_TYPES else ""


def _cmp_predicate(op: ir.Operation) -> str:
    # Predicates print as integers in the generic attribute; map through the enum order.
    names_f = ["false", "oeq", "ogt", "oge", "olt", "ole", "one", "ord", "ueq", "ugt", "uge",
               "ult", "ule", "une", "uno", "true"]
    names_i = ["eq", "ne", "slt", "sle", "sgt", "sge", "ult", "ule", "ugt", "uge"]
    v = ir.IntegerAttr(op.attributes["predicate"]).value
    return (names_f if op.name == "arith.cmpf" else names_i)[v]


def _is_identity_like(m: ir.AffineMap) -> bool:
    dims = [_dim(e) for e in m.results]
    return None not in dims and len(set(dims)) == len(dims) and len(dims) == m.n_dims


def _lut_step(op: ir.Operation, extract: ir.Operation, ref) -> EpilogueStep:
    """`tensor.extract %table[%i]` from a constant 1-D integer table: a "lut" step whose
    entries are the table (an int8 activation, compiler/requant.py)."""
    table = constant_of(extract.operands[0])
    width = _int_width(extract.results[0].type)
    if table is None or table.ndim != 1 or len(extract.operands) != 2 or not width \
            or not 1 <= table.size <= MAX_LUT_ENTRIES:
        raise Unsupported(f"tensor.extract in {op.name} body is no lookup in a constant integer table of at "
                          f"most {MAX_LUT_ENTRIES} entries")
    return EpilogueStep(LUT, [ref(extract.operands[1])] + [Ref("const", const=float(t)) for t in table],
                        to=width)


def decode_elementwise(op: ir.Operation, arg_refs: dict[int, Ref], value_base: int = 0,
                       stop: ir.Operation | None = None, stop_value: ir.Value | None = None) -> Epilogue:
    """Translate an elementwise generic body into epilogue steps.

    `arg_refs` gives the Ref of each `ins` block argument; the `outs` argument
    must be unused (no accumulation). Step results are values
    `value_base`, `value_base + 1`, ... (value 0 is the principal result of a
    contraction, so its epilogue uses base 1). With `stop`, decoding ends at
    that body op and the result is `stop_value` (the prologue of a reduction
    body: what its combiner accumulates).
    """
    block = op.regions[0].blocks[0]
    # Keyed by the values themselves: Value.get_name() numbers the whole enclosing module
    # each time (it made decoding quadratic in the module's size).
    values: dict[ir.Value, Ref] = {}
    for i, arg in enumerate(block.arguments):
        if i in arg_refs:
            values[arg] = arg_refs[i]
    steps: list[EpilogueStep] = []
    cmps: dict[ir.Value, tuple[str, Ref, Ref]] = {}

    def ref(v: ir.Value) -> Ref:
        if v in values:
            return values[v]
        c = constant_of(v)
        if c is not None and c.ndim == 0:
            if c.dtype.kind in "iu" and abs(int(c)) > _MAX_EXACT_INT:
                raise Unsupported(f"integer constant {int(c)} in {op.name} body is wider than 53 bits")
            return Ref("const", const=float(c))
        raise Unsupported(f"value {v.get_name()} used in the body of {op.name} comes from outside the op")

    def push(step: EpilogueStep, result: ir.Value):
        steps.append(step)
        values[result] = Ref("value", index=len(steps) - 1 + value_base)

    def push_powi(body_op: ir.Operation):
        """x ** n as repeated f32 multiplication (a division for n < 0)."""
        c = constant_of(body_op.operands[1])
        if c is None or c.ndim != 0 or not 0 < abs(int(c)) <= _MAX_POWI:
            raise Unsupported(f"math.fpowi in {op.name} body needs a constant nonzero exponent of "
                              f"magnitude at most {_MAX_POWI}")
        n, x = int(c), ref(body_op.operands[0])
        acc = x
        for _ in range(abs(n) - 1):
            steps.append(EpilogueStep("mul", [acc, x]))
            acc = Ref("value", index=len(steps) - 1 + value_base)
        if n < 0:
            steps.append(EpilogueStep("div", [Ref("const", const=1.0), acc]))
            acc = Ref("value", index=len(steps) - 1 + value_base)
        values[body_op.results[0]] = acc

    for body_op in region_ops(op):
        name = body_op.name
        at_stop = stop is not None and body_op == stop
        if name == "linalg.yield" or at_stop:
            out = ref(stop_value if at_stop else body_op.operands[0])
            result = out.index if out.kind == "value" else None
            if result is None:
                steps.append(EpilogueStep("add", [out, Ref("const", const=0.0)]))
                result = len(steps) - 1 + value_base
            return Epilogue(steps, result)
        if name == "arith.constant":
            continue
        if name in _BINARY:
            push(EpilogueStep(_BINARY[name], [ref(body_op.operands[0]), ref(body_op.operands[1])],
                              to=_int_width(body_op.results[0].type)), body_op.results[0])
        elif name in _SHIFTS:
            push(EpilogueStep(_SHIFTS[name], [ref(body_op.operands[0]), ref(body_op.operands[1])],
                              to=_int_width(body_op.results[0].type)), body_op.results[0])
        elif name in ("arith.extsi", "arith.index_cast"):
            # Values are held sign-extended already: the wider value (or the index) is the same number.
            values[body_op.results[0]] = ref(body_op.operands[0])
        elif name == "tensor.extract":
            push(_lut_step(op, body_op, ref), body_op.results[0])
        elif name == "arith.extui":
            if _int_width(body_op.operands[0].type) in ("", "i64"):
                raise Unsupported(f"arith.extui from {body_op.operands[0].type} in {op.name} body")
            push(EpilogueStep("zext", [ref(body_op.operands[0])], to=_int_width(body_op.operands[0].type)),
                 body_op.results[0])
        elif name == "arith.trunci":
            push(EpilogueStep("trunc", [ref(body_op.operands[0])], to=_int_width(body_op.results[0].type)),
                 body_op.results[0])
        elif name in ("arith.negf",):
            push(EpilogueStep("neg", [ref(body_op.operands[0])]), body_op.results[0])
        elif name in _TABLE_FNS:
            if mlir_dtype(body_op.results[0].type) not in ("bf16", "f32", "f16"):
                raise Unsupported(f"'{name}' on {body_op.results[0].type} has no Torq lowering")
            push(EpilogueStep(_TABLE_FNS[name], [ref(body_op.operands[0])]), body_op.results[0])
        elif name == "math.fpowi":
            push_powi(body_op)
        elif name in ("arith.cmpf", "arith.cmpi"):
            pred = _cmp_predicate(body_op)
            if pred not in _CMP or (name == "arith.cmpi" and pred.startswith("u")):
                raise Unsupported(f"comparison '{pred}' in {op.name} body")
            cmps[body_op.results[0]] = (_CMP[pred], ref(body_op.operands[0]),
                                                   ref(body_op.operands[1]))
        elif name == "arith.select":
            cond = body_op.operands[0]
            if cond in cmps:
                pred, a, b = cmps[cond]
            elif str(body_op.operands[0].type) == "i1" and cond in values:
                # An i1 operand (a boolean mask, one byte of 0 / 1 per element): true is > 0.
                pred, a, b = "gt", values[cond], Ref("const", const=0.0)
            else:
                raise Unsupported("arith.select whose condition is neither a comparison nor an i1 operand")
            push(EpilogueStep("select_" + pred, [a, b, ref(body_op.operands[1]), ref(body_op.operands[2])]),
                 body_op.results[0])
        elif name in _FLOAT_CASTS:
            push(EpilogueStep("cast", [ref(body_op.operands[0])],
                              to=mlir_dtype(body_op.results[0].type)), body_op.results[0])
        else:
            raise Unsupported(f"'{name}' in an elementwise body has no Torq lowering")
    raise Unsupported("elementwise body without linalg.yield")


# --- padding folded into its consumers ----------------------------------------------

# What a folded `tensor.pad` becomes (torq-fold-padding): an unregistered
# `torq.pad` op with the same operand and result and attrs `low` / `high`.
# It has no TilingInterface, so tiling leaves it outside the tile loops and
# a tile reads a static box of the padded tensor; the NSS program reads only
# the part of that box inside the source tensor and hands the rest to the
# consuming op as its `pad` attr (see torq-build-nss-program).
PAD_VIEW = "torq.pad"


@dataclass
class Padding:
    """Static low / high padding amounts per dim of a `tensor.pad` and its value."""
    low: list[int]
    high: list[int]
    value: float | int


def _window_extents(op: ir.Operation) -> dict[int, int]:
    """Input dim -> window extent ((k - 1) * dilation + 1) of each dim the principal
    `op` reads as `out * stride + k * dilation` through its first operand."""
    its, ranges = _iterators(op), _loop_ranges(op)
    out = {}
    for i, e in enumerate(indexing_maps(op)[0].results):
        terms = _linear_terms(e)
        if terms is None or len(terms) != 2:
            continue
        (a, ca), (b, cb) = terms
        red, c = (a, ca) if its[a] == "reduction" else (b, cb)
        out[i] = (ranges[red] - 1) * c + 1
    return out


def padding_fold(op: ir.Operation) -> Padding:
    """The padding of a `tensor.pad` whose every user can pad its input itself.

    Foldable: static amounts, a constant pad value, and every user a principal
    whose op pads its input (`OpDef.pads_input`: the convs and poolings, with
    any constant value: zero, -inf for max pooling, the input zero point of an
    int8 conv) reading the padded
    tensor as its input (first operand) only, with padding only on the dims
    it slides its window over (H, W), each amount smaller than the window
    extent (so every output reads at least one real element), or the
    function's return (a result the NSS program writes padded: any dims, any
    amounts). Raises Unsupported otherwise.
    """
    try:
        low = int_array(op.attributes["static_low"])
        high = int_array(op.attributes["static_high"])
    except KeyError:
        raise Unsupported("padding with dynamic amounts") from None
    if len(op.operands) != 1 or any(x < 0 for x in low + high):
        raise Unsupported("padding with dynamic or negative amounts")
    body = region_ops(op)
    value = constant_of(body[-1].operands[0]) if body and body[-1].name == "tensor.yield" else None
    if value is None or value.ndim != 0:
        raise Unsupported("padding with a value that is not a constant")
    users = [u.owner for u in op.results[0].uses]
    if not users:
        raise Unsupported("padding nothing reads")
    for user in users:
        if not isinstance(user, ir.Block) and user.name == "func.return":
            continue  # a result: written out padded (see data_movement_reason)
        con = classify_principal(user) if not isinstance(user, ir.Block) else None
        kind = con.kind if con is not None else None
        if kind is None or not OPS[kind].pads_input:
            raise Unsupported(f"padding read by {user.name if not isinstance(user, ir.Block) else 'a block'} "
                              f"(only a conv or pooling input folds its padding)")
        if [i for i, v in enumerate(user.operands) if v == op.results[0]] != [0]:
            raise Unsupported(f"padding read by {kind} other than as its input")
        extents = _window_extents(user)
        for d, (lo, hi) in enumerate(zip(low, high)):
            if (lo or hi) and d not in extents:
                raise Unsupported(f"padding of input dim {d} of {kind}, which is no window dim")
            if (lo or hi) and max(lo, hi) >= extents[d]:
                raise Unsupported(f"padding of {max(lo, hi)} on input dim {d} of {kind}, not smaller "
                                  f"than its window extent {extents[d]}")
    return Padding(low, high, int(value) if value.dtype.kind in "iu" else float(value))


def _copy_of_argument(v: ir.Value) -> bool:
    """Whether `v` is a function argument or a `tensor.extract_slice` (a box) of one."""
    if isinstance(v.owner, ir.Block):
        return True
    return v.owner.name == "tensor.extract_slice" and isinstance(v.owner.operands[0].owner, ir.Block)


def data_movement_reason(func: ir.Operation) -> str:
    """Why some result of `func` is neither computed by a Torq group nor a copy the NSS
    program makes with DMAs alone, or "" if every result is one of those.

    A copy is a function argument, a static box of one (`tensor.extract_slice`),
    or a `tensor.pad` with static amounts and a constant value (`padding_fold`) of
    either: torq-build-nss-program DMAs the source box through LRAM into the
    result (tiled to fit LRAM) and fills a padding's border with its value.
    """
    ret = region_ops(func)[-1]
    for i, v in enumerate(ret.operands):
        owner = v.owner
        if _copy_of_argument(v):
            continue
        if owner.name == "tensor.pad":
            if not _copy_of_argument(owner.operands[0]):
                return f"result {i} pads a value that is no copy of an input"
            try:
                padding_fold(owner)
            except Unsupported as e:
                return f"result {i}: tensor.pad: {e}"
            continue
        if owner.name.startswith("linalg.") and not is_zero_fill(owner):
            continue  # computed by its group (match_group decides)
        what = "a zero fill" if owner.name.startswith("linalg.") else f"'{owner.name}'"
        return f"result {i} is {what}, neither computed nor a copy or padding of an input"
    return ""


# --- groups -------------------------------------------------------------------------

def _single_user(v: ir.Value) -> ir.Operation | None:
    users = [u.owner for u in v.uses]
    return users[0] if len(users) == 1 else None


def fill_value(op: ir.Operation):
    """The scalar a `linalg.fill` (or its generalized form: no tensor ins, body
    yields a constant or its scalar input) writes, or None if `op` is no fill."""
    if op.name == "linalg.fill":
        c = constant_of(op.operands[0])
    elif op.name == "linalg.generic" and n_inputs(op) <= 1:
        body = region_ops(op)
        if len(body) != 1 or body[0].name != "linalg.yield":
            return None
        v = body[0].operands[0]
        if isinstance(v.owner, ir.Block):  # yields its scalar input
            if n_inputs(op) != 1 or v.arg_number != 0 or static_shape(op.operands[0].type):
                return None
            v = op.operands[0]
        c = constant_of(v)
    else:
        return None
    return c if c is not None and c.ndim == 0 else None


def is_zero_fill(op: ir.Operation) -> bool:
    """`linalg.fill` of 0, or its generalized form (no ins, body yields 0)."""
    c = fill_value(op)
    return c is not None and float(c) == 0.0


def _broadcast_source(op: ir.Operation) -> tuple[ir.Value, ir.AffineMap, ir.AffineMap] | None:
    """(input, its map, result map) if `op` is a generic that only broadcasts one tensor."""
    if op.name != "linalg.generic" or n_inputs(op) != 1 or len(op.results) != 1:
        return None
    if any(it != "parallel" for it in _iterators(op)) or static_shape(op.operands[0].type) is None:
        return None
    body = region_ops(op)
    if len(body) != 1 or body[0].name != "linalg.yield":
        return None
    v = body[0].operands[0]
    if not isinstance(v.owner, ir.Block) or v.arg_number != 0:
        return None
    maps = indexing_maps(op)
    if not _is_identity_like(maps[1]) or any(_dim(e) is None for e in maps[0].results):
        return None
    return op.operands[0], maps[0], maps[1]


def _is_lowest(c, elt: ir.Type) -> bool:
    """Whether scalar `c` is the identity of max for element type `elt`."""
    s = str(elt)
    if s in ("f32", "bf16", "f16", "f64"):
        return float(c) == float("-inf")
    if s in EPILOGUE_INT_TYPES:
        return int(c) == -(1 << (EPILOGUE_INT_TYPES[s] - 1))
    return False


def _is_elementwise(op: ir.Operation) -> bool:
    return (op.name == "linalg.generic" and all(it == "parallel" for it in _iterators(op))
            and all(_dim(e) is not None for m in indexing_maps(op) for e in m.results))


def _axes(in_map: ir.AffineMap, out_map: ir.AffineMap) -> tuple[int, ...]:
    out_dims = [_dim(e) for e in out_map.results]
    axes = []
    for e in in_map.results:
        d = _dim(e)
        if d not in out_dims:
            raise Unsupported("operand indexed by a dim the result does not have")
        axes.append(out_dims.index(d))
    return tuple(axes)


def _epilogue_of(ep: ir.Operation, principal_result: ir.Value | None, inputs: list[ir.Value],
                 principal_value: int = 0, principal_axes: tuple[int, ...] | None = None) -> Epilogue:
    """Decode `ep` with its ins as refs; appends non-principal ins to `inputs`.

    The principal result is value `principal_value` (values before it are
    steps the group already has); the decoded steps follow it. `ep` must
    read it along its own result dims in order, or along `principal_axes`
    (principal dim i is result dim principal_axes[i]) when the principal op
    writes its result in that order.
    """
    maps = indexing_maps(ep)
    out_map = maps[-1]
    if not _is_identity_like(out_map):
        raise Unsupported("elementwise op whose result map is not a permutation")
    refs: dict[int, Ref] = {}
    n = n_inputs(ep)
    for i in range(n):
        v = ep.operands[i]
        if principal_result is not None and v == principal_result:
            want = principal_axes if principal_axes is not None else tuple(range(len(out_map.results)))
            if _axes(maps[i], out_map) != want:
                raise Unsupported("epilogue reads the contraction result transposed")
            refs[i] = Ref("value", index=principal_value)
            continue
        c = constant_of(v)
        shape = static_shape(v.type)
        if c is not None and c.size == 1 and shape is not None and c.ndim > 0:
            refs[i] = Ref("const", const=float(c.reshape(-1)[0]))
            continue
        refs[i] = Ref("operand", index=len(inputs), axes=_axes(maps[i], out_map))
        inputs.append(v)
    return decode_elementwise(ep, refs, value_base=0 if principal_result is None else principal_value + 1)


def _transposed_read(ep: ir.Operation, v: ir.Value) -> tuple[int, ...] | None:
    """The result dims along which elementwise `ep` first reads `v`, if a permutation
    other than the identity (a transpose folded into the op producing `v`), else None."""
    maps = indexing_maps(ep)
    for i in range(n_inputs(ep)):
        if ep.operands[i] == v:
            try:
                axes = _axes(maps[i], maps[-1])
            except Unsupported:
                return None
            n = len(maps[-1].results)
            return axes if sorted(axes) == list(range(n)) and axes != tuple(range(n)) else None
    return None


def _is_epilogue_of_producer(op: ir.Operation) -> bool:
    """Whether `op` was fused as the epilogue of the principal op producing one of its inputs.

    A consumer the principal could not take (several users, an op with no
    epilogue step) is a group of its own, so it is matched or refused itself.
    """
    for v in op.operands[: n_inputs(op)]:
        producer = v.owner
        if isinstance(producer, ir.Block) or producer.name != "linalg.generic":
            continue
        if _single_user(v) is None or classify_principal(producer) is None:
            continue
        try:
            group = match_group(producer)
        except Unsupported:
            continue
        if group is not None and group.bottom == op:
            return True
    return False


def _is_init_of_principal(op: ir.Operation) -> bool:
    """Whether `op` (a fill or a broadcast) only initialises the accumulator of a principal op."""
    if len(op.results) != 1 or (fill_value(op) is None and _broadcast_source(op) is None):
        return False
    user = _single_user(op.results[0])
    if user is None or isinstance(user, ir.Block) or classify_principal(user) is None:
        return False
    outs = list(user.operands)[n_inputs(user):]
    return bool(outs) and outs[0] == op.results[0]


def _bf16_round(x: float) -> float:
    import ml_dtypes
    import numpy as np

    return float(np.float32(x).astype(ml_dtypes.bfloat16))


def _fold_division(epi: Epilogue, count: int) -> Epilogue | None:
    """`epi` without its first step if that step divides the principal value 0 by
    `count` (or by `count` rounded to bf16, as f32 -> bf16 demotion leaves it)
    and nothing else reads value 0; None otherwise. Later values shift down by one."""
    if not epi.steps:
        return None
    first = epi.steps[0]
    if first.op != "div" or first.to or len(first.args) != 2:
        return None
    a, b = first.args
    if a.kind != "value" or a.index != 0 or b.kind != "const" or b.const not in (count, _bf16_round(count)):
        return None
    rest = epi.steps[1:]
    if any(r.kind == "value" and r.index == 0 for st in rest for r in st.args) or epi.result == 0:
        return None

    def shift(r: Ref) -> Ref:
        return Ref("value", r.index - 1) if r.kind == "value" else r

    return Epilogue([EpilogueStep(st.op, [shift(r) for r in st.args], st.to) for st in rest],
                    epi.result - 1 if epi.result > 0 else epi.result)


def init_steps(op: ir.Operation, p: Contraction, inputs: list[ir.Value],
               init: ir.Value | None = None) -> tuple[ir.Operation, list[EpilogueStep]]:
    """The accumulator init of principal `op` and the epilogue steps it implies.

    A fill with the identity of the op adds nothing. A contraction may also
    start from a broadcast tensor (IREE puts a grouped conv's bias there): that
    is an epilogue add of the broadcast's input (a constant if it has one
    element), appended to `inputs`. `init` defaults to the op's own init; a tiled
    reduction passes the init of its loop nest.
    """
    init = op.operands[n_inputs(op)] if init is None else init
    init_op = None if isinstance(init.owner, ir.Block) else init.owner
    what = "a zero fill" if p.identity == "zero" else "a fill with the lowest value"
    if init_op is None:
        raise Unsupported(f"{p.kind} whose accumulator is not {what}")
    c = fill_value(init_op)
    elt = ir.RankedTensorType(op.results[0].type).element_type
    if c is not None and (float(c) == 0.0 if p.identity == "zero" else _is_lowest(c, elt)):
        return init_op, []
    if c is not None and p.identity == "lowest" and region_ops(op)[-2].name == "arith.maxnumf" \
            and math.isnan(float(c)):
        return init_op, []  # maxnumf ignores NaN: IREE's softmax decomposition starts max from NaN
    b = _broadcast_source(init_op) if OPS[p.kind].inputs == 2 else None  # a bias of a weighted sum
    if b is None or _single_user(init) is None:
        raise Unsupported(f"{p.kind} whose accumulator is not {what}")
    src, in_map, out_map = b
    cst = constant_of(src)
    if cst is not None and cst.size == 1:
        bias = Ref("const", const=float(cst.reshape(-1)[0]))
    else:
        bias = Ref("operand", index=len(inputs), axes=_axes(in_map, out_map))
        inputs.append(src)
    return init_op, [EpilogueStep("add", [Ref("value", 0), bias], to=_int_width(elt))]


def _prologue_of(op: ir.Operation) -> tuple[list[ir.Value], Epilogue, ir.Type]:
    """The elementwise prologue of a reduction whose body computes what it accumulates.

    Its result is laid out in loop order over all loops; each in is an
    operand broadcast along the loop dims its map reads (size-1 constants are
    scalars).
    """
    n = n_inputs(op)
    maps = indexing_maps(op)
    refs: dict[int, Ref] = {}
    inputs: list[ir.Value] = []
    for i in range(n):
        v = op.operands[i]
        c = constant_of(v)
        if c is not None and c.size == 1:
            refs[i] = Ref("const", const=float(c.reshape(-1)[0]))
            continue
        refs[i] = Ref("operand", index=len(inputs), axes=tuple(_dim(e) for e in maps[i].results))
        inputs.append(v)
    body = region_ops(op)
    combiner = body[-2]
    acc = op.regions[0].blocks[0].arguments[n]
    x = next(v for v in combiner.operands if v != acc)
    steps = decode_elementwise(op, refs, 0, stop=combiner, stop_value=x)
    ranges = _loop_ranges(op)
    return inputs, steps, ir.RankedTensorType.get(ranges, x.type)


@dataclass
class BoxRead:
    """A copy generic that reads a box of its input: `sizes` at `offsets`
    (per input dim), keeping the input dims in `kept` in order (the others
    have size 1 and are dropped)."""
    offsets: list[int]
    sizes: list[int]
    kept: list[int]


def box_read(op: ir.Operation) -> BoxRead | None:
    """The box a `linalg.generic` copies, or None if it is no box read.

    A box read (made by dispatch extraction for a load of part of an input)
    has one in, all loops parallel, a body that yields the in, an identity
    result map, and an input map whose results are `d`, `d + c` or a
    constant `c` (c >= 0), the dims in loop order, each once, that is not
    the whole input (a whole copy is an elementwise group). It computes
    nothing: lowering makes it a `tensor.extract_slice`, which the NSS
    program reads as a DMA box.
    """
    if op.name != "linalg.generic" or n_inputs(op) != 1 or len(op.results) != 1:
        return None
    if any(it != "parallel" for it in _iterators(op)):
        return None
    body = region_ops(op)
    if len(body) != 1 or body[0].name != "linalg.yield" or body[0].operands[0] != \
            op.regions[0].blocks[0].arguments[0]:
        return None
    in_map, out_map = indexing_maps(op)
    if [_dim(e) for e in out_map.results] != list(range(out_map.n_dims)):
        return None
    src, res = static_shape(op.operands[0].type), static_shape(op.results[0].type)
    if src is None or res is None:
        return None
    offsets, sizes, kept = [], [], []
    for i, e in enumerate(in_map.results):
        if isinstance(e, ir.AffineConstantExpr):
            d, c = None, ir.AffineConstantExpr(e).value
        elif isinstance(e, ir.AffineDimExpr):
            d, c = _dim(e), 0
        elif isinstance(e, ir.AffineAddExpr) and isinstance(ir.AffineAddExpr(e).lhs, ir.AffineDimExpr) \
                and isinstance(ir.AffineAddExpr(e).rhs, ir.AffineConstantExpr):
            d, c = _dim(ir.AffineAddExpr(e).lhs), ir.AffineConstantExpr(ir.AffineAddExpr(e).rhs).value
        else:
            return None
        if d is not None:
            if d != len(kept):
                return None  # dims in loop order, each once: no transpose
            kept.append(i)
        size = 1 if d is None else res[d]
        if c < 0 or c + size > src[i]:
            return None
        offsets.append(c)
        sizes.append(size)
    if len(kept) != len(res) or (not any(offsets) and tuple(sizes) == src):
        return None  # a whole-tensor copy is an elementwise op
    return BoxRead(offsets, sizes, kept)


def _box_reads_of(values: list, ops: list[ir.Operation]) -> list[ir.Operation]:
    """The box reads (not in `ops`) defining `values`: they join the group that
    reads them, so tiling fuses them into its loop and never tiles them alone."""
    out: list[ir.Operation] = []
    for v in values:
        owner = None if v is None or isinstance(v.owner, ir.Block) else v.owner.operation
        if owner is not None and box_read(owner) is not None and owner not in ops and owner not in out:
            out.append(owner)
    return out


def match_group(op: ir.Operation) -> Match | None:
    """The Torq group whose principal op is `op`, or None if `op` is no principal.

    Raises Unsupported when `op` is a linalg op no pattern covers, or a
    `tensor.pad` its users cannot fold (`padding_fold`; a foldable one is
    part of no group: torq-fold-padding makes it a view its users read).
    """
    if op.name == "tensor.pad":
        padding_fold(op)
        return None
    if op.name != "linalg.generic":
        return None
    con = classify_principal(op)
    if con is not None:
        elt = str(ir.RankedTensorType(op.results[0].type).element_type)
        # An integer sum accumulates in the i32 accumulator: a narrower result would wrap.
        if con.kind in ("avg_pool2d", "reduce") and con.attrs.get("mode", "sum") == "sum" \
                and elt in EPILOGUE_INT_TYPES and (elt != "i32" or con.kind == "avg_pool2d"):
            raise Unsupported(f"integer sum {'pooling' if con.kind == 'avg_pool2d' else 'reduction'} "
                              f"({elt}) has no Torq lowering")
        prologue = _prologue_of(op) if con.prologue else None
        if prologue is not None or con.gather is not None:
            inputs = [None]  # the prologue's result / the gathered box, made by the rewrite
        else:
            inputs = list(op.operands[: con.n_inputs])
        init_op, pre = init_steps(op, con, inputs)
        ops = [op, init_op]
        bottom = op
        epi = Epilogue(pre, len(pre) if pre else 0)
        user = _single_user(op.results[0])
        perm = None  # a matmul writes its result in the order its epilogue reads it
        # (An elementwise user with several results stays a group of its own, and is refused there.)
        if user is not None and _is_elementwise(user) and len(user.results) == 1 \
                and _is_identity_like(indexing_maps(user)[-1]):
            perm = _transposed_read(user, op.results[0]) if con.kind == "matmul" and not pre else None
            try:
                tail = _epilogue_of(user, op.results[0], inputs_probe := list(inputs), principal_value=len(pre),
                                    principal_axes=perm)
                epi = Epilogue(pre + tail.steps, tail.result)
                inputs = inputs_probe
                ops.append(user)
                bottom = user
            except Unsupported:
                perm = None
        attrs = dict(con.attrs)
        if perm is not None:
            out = [""] * len(perm)
            for letter, axis in zip(attrs["output_dims"], perm):
                out[axis] = letter
            attrs["output_dims"] = "".join(out)
        if con.mean_count:
            folded = _fold_division(epi, con.mean_count)
            if folded is not None:
                epi = folded
                if con.kind == "reduce":
                    attrs["mode"] = "mean"
            elif con.kind == "avg_pool2d":
                kh, kw = con.attrs["kernel"]
                raise Unsupported(
                    f"a {kh}x{kw} window sum not divided by the window size {kh * kw} has no Torq lowering "
                    f"(average pooling with count_include_pad=False divides by a position-dependent count)")
        ops += _box_reads_of(inputs + (prologue[0] if prologue is not None else []), ops)
        return Match(con.kind, op, ops, bottom, inputs, attrs, epi, con.macs, prologue, con.gather)
    if box_read(op) is not None:
        if any(not isinstance(u.owner, ir.Block) and u.owner.name == "func.return" for u in op.results[0].uses):
            raise Unsupported("dispatch returns part of an input unchanged (data movement only)")
        return None  # a DMA box its consumers read (see box_read)
    if is_zero_fill(op) or _is_init_of_principal(op):
        return None  # part of the group that accumulates into it
    if _is_elementwise(op):
        if _is_epilogue_of_producer(op):
            return None  # matched as part of that principal's group
        if len(op.results) != 1:
            raise Unsupported(f"elementwise op with {len(op.results)} results has no Torq pattern "
                              f"(one TorqHL op writes one result)")
        inputs: list[ir.Value] = []
        epi = _epilogue_of(op, None, inputs)
        return Match("elementwise", op, [op] + _box_reads_of(inputs, [op]), op, inputs, {}, epi, 0)
    raise Unsupported(f"'{op.name}' with this structure has no Torq pattern")


def epilogue_to_json(e: Epilogue) -> str:
    return json.dumps({"steps": [{"op": s.op, "to": s.to, "args": [
        {"kind": a.kind, "index": a.index, "axes": list(a.axes), "const": a.const} for a in s.args]}
        for s in e.steps], "result": e.result})


def epilogue_from_json(s: str) -> Epilogue:
    d = json.loads(s)
    return Epilogue([EpilogueStep(st["op"], [Ref(a["kind"], a["index"], tuple(a["axes"]), a["const"])
                                             for a in st["args"]], st["to"]) for st in d["steps"]],
                    d["result"])
