"""Groups: a principal op with its fill, prologue, epilogue and box reads
(`match_group`), the one matcher marking and lowering share."""

from __future__ import annotations

import math
from dataclasses import dataclass

from iree.compiler import ir

from torq.contract.ops import OPS
from torq.contract.program import EPILOGUE_INT_TYPES, Epilogue, EpilogueStep, Ref

from ..ir_utils import box_term, constant_of, indexing_maps, n_inputs, region_ops, static_shape
from ..ir_utils import iterator_types as _iterators
from ..ir_utils import loop_ranges as _loop_ranges
from .contraction import dim_of
from .elementwise import decode_elementwise, int_width, is_identity_like
from .inits import broadcast_source, fill_value, is_lowest, is_zero_fill, single_user
from .model import Contraction, Match, Unsupported
from .padding import padding_fold
from .reduction import classify_principal
from .row_gather import row_gather


def is_elementwise(op: ir.Operation) -> bool:
    return (op.name == "linalg.generic" and all(it == "parallel" for it in _iterators(op))
            and all(dim_of(e) is not None for m in indexing_maps(op) for e in m.results))


def _axes(in_map: ir.AffineMap, out_map: ir.AffineMap) -> tuple[int, ...]:
    out_dims = [dim_of(e) for e in out_map.results]
    axes = []
    for e in in_map.results:
        d = dim_of(e)
        if d not in out_dims:
            raise Unsupported("operand indexed by a dim the result does not have")
        axes.append(out_dims.index(d))
    return tuple(axes)


def epilogue_of(ep: ir.Operation, principal_result: ir.Value | None, inputs: list[ir.Value],
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
    if not is_identity_like(out_map):
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
        if single_user(v) is None or classify_principal(producer) is None:
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
    if len(op.results) != 1 or (fill_value(op) is None and broadcast_source(op) is None):
        return False
    user = single_user(op.results[0])
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
    return Epilogue(_renumbered(rest, -1), epi.result - 1 if epi.result > 0 else epi.result)


def _renumbered(steps: list[EpilogueStep], delta: int) -> list[EpilogueStep]:
    """`steps` with every value reference moved by `delta` (steps dropped or added before them)."""
    def shift(r: Ref) -> Ref:
        return Ref("value", r.index + delta) if r.kind == "value" else r

    return [EpilogueStep(st.op, [shift(r) for r in st.args], st.to) for st in steps]


def _window_sum(epi: Epilogue, count: int) -> Epilogue:
    """`epi` for an average pooling op whose epilogue reads the window sum undivided (torch's
    count_include_pad=False divides it by the count of positions inside the input, a
    constant operand after torq-fold-index-constants): a first step multiplies the op's
    mean back by the window size `count`, in f32 (within an f32 rounding of the sum);
    every later reference to value k reads value k + 1."""
    undivide = EpilogueStep("mul", [Ref("value", 0), Ref("const", const=float(count))])
    return Epilogue([undivide] + _renumbered(epi.steps, 1), epi.result + 1)


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
    if c is not None and (float(c) == 0.0 if p.identity == "zero" else is_lowest(c, elt)):
        return init_op, []
    if c is not None and p.identity == "lowest" and region_ops(op)[-2].name == "arith.maxnumf" \
            and math.isnan(float(c)):
        return init_op, []  # maxnumf ignores NaN: IREE's softmax decomposition starts max from NaN
    b = broadcast_source(init_op) if OPS[p.kind].inputs == 2 else None  # a bias of a weighted sum
    if b is None or single_user(init) is None:
        raise Unsupported(f"{p.kind} whose accumulator is not {what}")
    src, in_map, out_map = b
    cst = constant_of(src)
    if cst is not None and cst.size == 1:
        bias = Ref("const", const=float(cst.reshape(-1)[0]))
    else:
        bias = Ref("operand", index=len(inputs), axes=_axes(in_map, out_map))
        inputs.append(src)
    return init_op, [EpilogueStep("add", [Ref("value", 0), bias], to=int_width(elt))]


def prologue_of(op: ir.Operation) -> tuple[list[ir.Value], Epilogue, ir.Type]:
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
        refs[i] = Ref("operand", index=len(inputs), axes=tuple(dim_of(e) for e in maps[i].results))
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
    (per input dim), every `strides`-th element, keeping the input dims in `kept` in
    order (the others have size 1 and are dropped)."""
    offsets: list[int]
    sizes: list[int]
    kept: list[int]
    strides: list[int]

    @property
    def strided(self) -> bool:
        return any(st != 1 for st in self.strides)


def box_read(op: ir.Operation) -> BoxRead | None:
    """The box a `linalg.generic` copies, or None if it is no box read.

    A box read (made by dispatch extraction for a load of part of an input)
    has one in, all loops parallel, a body that yields the in, an identity
    result map, and an input map whose results are `d`, `d * s + c` or a
    constant `c` (c >= 0, s >= 1: `ir_utils.box_term`), the dims in loop order,
    each once, that is not the whole input (a whole copy is an elementwise
    group). It computes nothing: lowering makes it a `tensor.extract_slice`,
    which the NSS program reads as a DMA box (a strided one when some s > 1).
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
    if [dim_of(e) for e in out_map.results] != list(range(out_map.n_dims)):
        return None
    src, res = static_shape(op.operands[0].type), static_shape(op.results[0].type)
    if src is None or res is None:
        return None
    offsets, sizes, kept, strides = [], [], [], []
    for i, e in enumerate(in_map.results):
        term = box_term(e)
        if term is None:
            return None
        d, st, c = term
        if d is not None:
            if d != len(kept):
                return None  # dims in loop order, each once: no transpose
            kept.append(i)
        size = 1 if d is None else res[d]
        if size and c + (size - 1) * st >= src[i]:
            return None
        offsets.append(c)
        sizes.append(size)
        strides.append(st if size > 1 else 1)
    if len(kept) != len(res) or (not any(offsets) and tuple(sizes) == src):
        return None  # a whole-tensor copy is an elementwise op
    return BoxRead(offsets, sizes, kept, strides)


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
    return _principal_match(op, con) if con is not None else _group_without_principal(op)


def _principal_match(op: ir.Operation, con: Contraction) -> Match:
    """The group of principal `op` (`con`): its init, its single elementwise user as the
    epilogue where one folds, a mean's division folded, and the box reads of its inputs."""
    elt = str(ir.RankedTensorType(op.results[0].type).element_type)
    # An integer sum accumulates in the i32 accumulator: a narrower result would wrap.
    if con.kind in ("avg_pool2d", "reduce") and con.attrs.get("mode", "sum") == "sum" \
            and elt in EPILOGUE_INT_TYPES and (elt != "i32" or con.kind == "avg_pool2d"):
        raise Unsupported(f"integer sum {'pooling' if con.kind == 'avg_pool2d' else 'reduction'} "
                          f"({elt}) has no Torq lowering")
    prologue = prologue_of(op) if con.prologue else None
    if prologue is not None or con.gather is not None:
        inputs = [None]  # the prologue's result / the gathered box, made by the rewrite
    else:
        inputs = list(op.operands[: con.n_inputs])
    init_op, pre = init_steps(op, con, inputs)
    ops = [op, init_op]
    epi, bottom, perm = Epilogue(pre, len(pre) if pre else 0), op, None
    user = single_user(op.results[0])
    # (An elementwise user with several results stays a group of its own, and is refused there.)
    if user is not None and is_elementwise(user) and len(user.results) == 1 \
            and is_identity_like(indexing_maps(user)[-1]):
        # A matmul writes its result in the order its epilogue reads it.
        perm = _transposed_read(user, op.results[0]) if con.kind == "matmul" and not pre else None
        try:
            tail = epilogue_of(user, op.results[0], inputs_probe := list(inputs), principal_value=len(pre),
                                principal_axes=perm)
            epi, inputs, bottom = Epilogue(pre + tail.steps, tail.result), inputs_probe, user
            ops.append(user)
        except Unsupported:
            perm = None
    attrs = dict(con.attrs)
    if perm is not None:
        out = [""] * len(perm)
        for letter, axis in zip(attrs["output_dims"], perm):
            out[axis] = letter
        attrs["output_dims"] = "".join(out)
    if con.mean_count:
        epi = _mean_epilogue(con, epi, attrs)
    ops += _box_reads_of(inputs + (prologue[0] if prologue is not None else []), ops)
    return Match(con.kind, op, ops, bottom, inputs, attrs, epi, con.macs, prologue, con.gather)


def _mean_epilogue(con: Contraction, epi: Epilogue, attrs: dict) -> Epilogue:
    """A sum's epilogue with its division by the count folded (a reduce becomes mode mean),
    or an average pool's multiply-back of the window sum."""
    folded = _fold_division(epi, con.mean_count)
    if folded is not None:
        if con.kind == "reduce":
            attrs["mode"] = "mean"
        return folded
    return _window_sum(epi, con.mean_count) if con.kind == "avg_pool2d" else epi


def _group_without_principal(op: ir.Operation) -> Match | None:
    """A generic that is no principal: a gather or box read (DMA), an init, an epilogue of
    its producer (part of that group), or an elementwise group of its own; else Unsupported."""
    if row_gather(op) is not None:
        if any(isinstance(u.owner, ir.Block) or u.owner.name != "func.return" for u in op.results[0].uses):
            raise Unsupported("a row gather (embedding lookup) that a compute of the same dispatch reads has "
                              "no Torq form: only a gather the dispatch returns is a DMA")
        return None  # the NSS program's gather DMA makes the result (nss_gathers)
    if box_read(op) is not None:
        if any(not isinstance(u.owner, ir.Block) and u.owner.name == "func.return" for u in op.results[0].uses):
            raise Unsupported("dispatch returns part of an input unchanged (data movement only)")
        return None  # a DMA box its consumers read (see box_read)
    if is_zero_fill(op) or _is_init_of_principal(op):
        return None  # part of the group that accumulates into it
    if is_elementwise(op):
        if _is_epilogue_of_producer(op):
            return None  # matched as part of that principal's group
        if len(op.results) != 1:
            raise Unsupported(f"elementwise op with {len(op.results)} results has no Torq pattern "
                              f"(one TorqHL op writes one result)")
        inputs: list[ir.Value] = []
        epi = epilogue_of(op, None, inputs)
        return Match("elementwise", op, [op] + _box_reads_of(inputs, [op]), op, inputs, {}, epi, 0)
    body = {o.name for o in region_ops(op)}
    if "reduction" in _iterators(op) and "arith.extui" in body and "arith.muli" in body:
        raise Unsupported("a contraction of a zero-extended (unsigned) integer operand: the NPU multiplies "
                          "signed integers")
    raise Unsupported(f"'{op.name}' with this structure has no Torq pattern{_structure(op)}")


def _structure(op: ir.Operation) -> str:
    """` (loops 1x4x8x16x8: p p p r p)` for a linalg op with loops, for the remark: which
    of a dispatch's ops, and what about it (two batch dims, a reduction not innermost)."""
    try:
        ranges, kinds = _loop_ranges(op), _iterators(op)
    except (KeyError, ValueError, TypeError):
        return ""
    return f" (loops {'x'.join(map(str, ranges))}: {' '.join(k[0] for k in kinds)})"
