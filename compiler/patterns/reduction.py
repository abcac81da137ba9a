"""Pooling and reductions (sum / max / mean, with an elementwise prologue),
reductions that gather their input with tensor.extract (torch-mlir's adaptive
average pooling), and `classify_principal`, the one entry for any principal op."""

from __future__ import annotations

import math

import numpy as np
from iree.compiler import ir

from ..ir_utils import constant_of, indexing_maps, n_inputs, region_ops, static_shape
from ..ir_utils import iterator_types as _iterators
from ..ir_utils import loop_ranges as _loop_ranges
from .contraction import classify_contraction, dim_of, linear_terms, window_pair
from .elementwise import cmp_predicate
from .model import Contraction, Gather

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
    the reduced count is folded); the output keeps the other dims, in order or
    (attr result_axes) in the output's order.
    """
    combined = _combiner(op)
    if combined is None:
        return None
    mode, prologue = combined
    n, its, maps = n_inputs(op), _iterators(op), indexing_maps(op)
    if any(static_shape(v.type) is None for v in op.operands):
        return None
    out_dims = [dim_of(e) for e in maps[-1].results]
    red = [d for d, it in enumerate(its) if it == "reduction"]
    if None in out_dims or len(set(out_dims)) != len(out_dims) or any(its[d] != "parallel" for d in out_dims):
        return None
    in_terms = [linear_terms(e) for e in maps[0].results]
    if any(t is None for t in in_terms):
        return None
    ranges = _loop_ranges(op)
    if prologue:
        return _prologue_reduction(its, maps[:n], out_dims, red, ranges, mode)
    if n == 2:
        w_dims = [dim_of(e) for e in maps[1].results]
        if sorted(d for d in w_dims if d is not None) != red or None in w_dims:
            return None
        return _classify_pool(its, in_terms, out_dims, ranges, mode)
    return _plain_reduction(its, in_terms, out_dims, red, ranges, mode)


def _combiner(op: ir.Operation) -> tuple[str, bool] | None:
    """(mode, whether an elementwise prologue computes the accumulated value) of a generic
    whose body ends in `out = max(out, x)` or `out = out + x`, reading the accumulator once;
    without a prologue x is the first input, of one or two (the pooling window)."""
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
    prologue = len(body) > 2
    if prologue and isinstance(others[0].owner, ir.Block):
        return None
    if not prologue and (n not in (1, 2) or others[0] != args[0]):
        return None
    return _REDUCE_BODIES[r.name], prologue


def _identity(mode: str) -> str:
    return "zero" if mode == "sum" else "lowest"


def _prologue_reduction(its, in_maps, out_dims, red, ranges, mode) -> Contraction | None:
    """A reduction of a value computed over all loops (laid out in loop order); every input
    is read by plain dims."""
    if any(dim_of(e) is None for m in in_maps for e in m.results) or 0 in ranges:
        return None
    # The prologue is materialised over every loop: no larger than an input only when some
    # input is read along every loop. Else an input read along a reduced dim makes the body a
    # contraction (a product broadcast over a parallel dim), whose prologue would materialise
    # every product. With such an input, one read along a reduced dim alone is a weight per
    # position (EfficientFormer's head: the mean over tokens of x times a per-token scale).
    every = set(range(len(its)))
    full = any({dim_of(e) for e in m.results} == every for m in in_maps)
    for m in in_maps:
        dims = {dim_of(e) for e in m.results}
        if dims & set(red) and dims != every and not full:
            return None
    if [d for d in range(len(its)) if its[d] == "parallel"] != out_dims:
        return None
    count = math.prod(ranges[d] for d in red)
    return Contraction("reduce", {"mode": mode, "axes": red}, math.prod(ranges), n_inputs=1,
                       identity=_identity(mode), mean_count=count if mode == "sum" else 0, prologue=True)


def _plain_reduction(its, in_terms, out_dims, red, ranges, mode) -> Contraction | None:
    """A reduction of the input read by plain dims: the result keeps the dims not reduced, in
    order or (result_axes) in the output's order."""
    if any(len(t) != 1 or t[0][1] != 1 for t in in_terms):
        return None
    in_dims = [t[0][0] for t in in_terms]
    if sorted(in_dims) != list(range(len(its))):
        return None
    kept = [d for d in in_dims if its[d] == "parallel"]
    if sorted(kept) != sorted(out_dims):
        return None  # the result is the input without the reduced dims
    axes = [i for i, d in enumerate(in_dims) if its[d] == "reduction"]
    attrs = {"mode": mode, "axes": axes}
    if kept != out_dims:  # in another order (a transpose IREE fused into the reduction)
        attrs["result_axes"] = [in_dims.index(d) for d in out_dims]
    count = math.prod(ranges[d] for d in red)
    return Contraction("reduce", attrs, math.prod(ranges), n_inputs=1,
                       identity=_identity(mode), mean_count=count if mode == "sum" else 0)


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
            pair = window_pair(t, its, roles)
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
    form = _gather_form(op)
    if form is None:
        return None
    body, src, ranges = form
    grid = np.meshgrid(*[np.arange(r, dtype=np.int64) for r in ranges], indexing="ij")
    index = _gathered_index(body, grid, ranges, op.regions[0].blocks[0].arguments[n_inputs(op)])
    if index is None:
        return None
    consts = {}
    for i, y in enumerate(list(body[-1].operands)[1:], start=1):
        c = constant_of(y)
        if c is None or c.ndim != 0:
            return None
        consts[i] = float(c)
    return _gathered_box(op, src, index, grid, ranges, consts)


def _gather_form(op: ir.Operation) -> tuple[list, ir.Value, list[int]] | None:
    """(body, the tensor it extracts from, loop ranges) of a reduction generic reading one
    tensor with `tensor.extract`, its result 0 laid out over the output loops in order."""
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
    ranges = _loop_ranges(op)
    if 0 in ranges or math.prod(ranges) > _GATHER_MAX_POINTS:
        return None
    par = [d for d, it in enumerate(_iterators(op)) if it == "parallel"]
    if [dim_of(e) for e in indexing_maps(op)[n_inputs(op)].results] != par:
        return None
    return body, src, ranges


def _gathered_index(body: list, grid: list[np.ndarray], ranges: list[int], acc_arg: ir.Value) \
        -> list[np.ndarray] | None:
    """The extract's index per tensor dim at every iteration point, evaluated from the body's
    index arithmetic; None unless the body sums the extracted value, always unmasked, into
    its accumulator as its result 0."""
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
                pred = cmp_predicate(b)
                a, c = ival(b.operands[0]), ival(b.operands[1])
                if pred.startswith("u") and (np.any(a < 0) or np.any(c < 0)):
                    return None
                env[b.results[0]] = _ICMP[pred](a, c)
            elif name == "tensor.extract":
                index = [np.broadcast_to(ival(i), ranges) for i in b.operands[1:]]
                data[b.results[0]] = np.ones(ranges, dtype=bool)
            elif name == "arith.select":
                masked = _masked(b, data, env)
                if masked is None:
                    return None
                data[b.results[0]] = masked
            elif name == "arith.addf" and acc is None and acc_arg in list(b.operands):
                x = next(v for v in b.operands if v != acc_arg)
                if x not in data:
                    return None
                acc = (b.results[0], data[x])
            else:
                return None
    except KeyError:
        return None
    if acc is None or index is None or body[-1].operands[0] != acc[0] or not acc[1].all():
        return None  # a mask that is sometimes false would read zeros: not a plain box
    return index


def _masked(select: ir.Operation, data: dict, env: dict) -> np.ndarray | None:
    """The mask of `select(cond, value, 0)` (or `select(cond, 0, value)`) of a gathered value."""
    cond, t, f = select.operands
    zt, zf = (constant_of(v) for v in (t, f))
    if t in data and zf is not None and float(zf) == 0.0:
        return data[t] & env[cond]
    if f in data and zt is not None and float(zt) == 0.0:
        return data[f] & ~env[cond]
    return None


def _gathered_box(op: ir.Operation, src: ir.Value, index: list[np.ndarray], grid: list[np.ndarray],
                  ranges: list[int], consts: dict) -> Contraction | None:
    """The reduce of the box `index` reads, when the output loops enumerate its kept dims and
    the window loops the others, both in row-major order."""
    its = _iterators(op)
    par = [d for d, it in enumerate(its) if it == "parallel"]
    red = [d for d, it in enumerate(its) if it == "reduction"]
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


def classify_principal(op: ir.Operation) -> Contraction | None:
    """The principal structure of a linalg op (contraction, pooling, reduction), or None."""
    if op.name != "linalg.generic":
        return None
    return classify_contraction(op) or classify_reduction(op) or classify_gather_reduction(op)
