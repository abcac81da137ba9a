"""torq-lower-to-torq-hl: replace each fused group with one TorqHL op.

Contract: runs the same matchers as marking (`patterns.match_group`), in
rewrite mode, on every linalg op of the function, inside tile loops or not.
Each group becomes one unregistered `torq_hl.<kind>` op (`conv2d`, `matmul`,
`depthwise_conv2d`, `maxpool2d`, `avg_pool2d`, `reduce`, `elementwise`)
whose operands are the group's inputs (principal inputs first, then epilogue
operands), whose result replaces the group's bottom op, and whose attributes
carry the layout attributes, the folded epilogue (`epilogue`, a dictionary) and
`macs`. A reduction with an elementwise prologue is preceded by a
`torq_hl.elementwise` computing its input; a gathering reduction (adaptive
average pooling) reads a `tensor.extract_slice` of the gathered box, and its
constant extra results become operand-less `torq_hl.elementwise` ops. A box
read (`patterns.box_read`: a copy of part of an input) becomes the
`tensor.extract_slice` of that box, which the NSS program reads as a DMA box.
Padded views (`torq.pad`, torq-fold-padding) stay as they are: the NSS
program reads their boxes and hands the padding to the consuming op.
A reduction loop nest from torq-super-tiling (a conv2d / matmul / sum whose
reduction dims are tiled: scf.for with the accumulator as iter_arg,
initialised from the group's fill or bias broadcast) is lowered first
(`lower_reduction_nest`): a zeroing `torq_hl.elementwise` on an f32 / i32
accumulator before the nest, the contraction in accumulate form (attr
`accumulate` = 1, the accumulator as operand 2, no epilogue) in the loop,
and the group's epilogue as one `torq_hl.elementwise` after the nest.
Afterwards no linalg op remains but row gathers (`patterns.row_gather`, an
embedding lookup the dispatch returns: torq-build-nss-program writes it with
gather DMAs); a linalg op no pattern covers is a compile error naming it.
"""

from __future__ import annotations

from iree.compiler import ir

from torq.contract.ops import ACCUMULATE, OPS
from torq.contract.program import Epilogue, EpilogueStep, Ref

from ..ir_utils import (
    CompileError,
    element_type,
    erase_unused,
    indexing_maps,
    location_str,
    n_inputs,
    static_shape,
    static_slice,
    walk_ops,
)
from ..patterns import (
    PAD_VIEW,
    Gather,
    Match,
    Unsupported,
    box_read,
    classify_principal,
    epilogue_attr,
    epilogue_of,
    init_steps,
    is_elementwise,
    is_identity_like,
    is_zero_fill,
    match_group,
    prologue_of,
    row_gather,
)
from . import PassOptions

NAME = "torq-lower-to-torq-hl"


def _attr(v) -> ir.Attribute:
    if isinstance(v, str):
        return ir.StringAttr.get(v)
    if isinstance(v, int):
        return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), v)
    if isinstance(v, list):
        return ir.ArrayAttr.get([_attr(x) for x in v])
    raise TypeError(v)


def rewrite_group(match: Match) -> ir.Operation:
    attrs = {k: _attr(v) for k, v in match.attrs.items()}
    attrs["epilogue"] = epilogue_attr(match.epilogue)
    attrs["macs"] = _attr(int(match.macs))
    operands = list(match.inputs)
    with ir.InsertionPoint(match.bottom), match.bottom.location:
        if match.prologue is not None:  # an elementwise op first; its result is operand 0
            operands[0] = _elementwise(*match.prologue).results[0]
        if match.gather is not None:  # the box the principal reads, as a slice (a DMA box)
            operands[0] = _box(match.gather)
        new = ir.Operation.create(OPS[match.kind].mlir_name, results=[match.bottom.results[0].type],
                                  operands=operands, attributes=attrs)
        if match.gather is not None:
            for i, c in match.gather.consts.items():  # further results: scalar constants
                r = match.principal.results[i]
                const = _elementwise([], Epilogue([EpilogueStep("add", [Ref("const", const=c),
                                                                        Ref("const", const=0.0)])], 0), r.type)
                r.replace_all_uses_with(const.results[0])
    match.bottom.results[0].replace_all_uses_with(new.results[0])
    # Erase users before producers. An accumulator fill CSE made common to
    # several groups (two matmuls of one shape) stays until its last group.
    for op in [match.bottom] + [o for o in match.ops if o is not match.bottom and not is_zero_fill(o)] \
            + [o for o in match.ops if is_zero_fill(o)]:
        if all(not list(r.uses) for r in op.results):
            op.erase()
    return new


def _box(g: Gather) -> ir.Value:
    """`g.source` itself, or the slice of it the gathered box covers."""
    shape = static_shape(g.source.type)
    if all(o == 0 for o in g.offsets) and list(g.sizes) == list(shape):
        return g.source
    elt = ir.RankedTensorType(g.source.type).element_type
    return static_slice(g.source, g.offsets, g.sizes, ir.RankedTensorType.get(list(g.sizes), elt))


def lower_box_reads(func: ir.Operation) -> None:
    """Replace every box read with the `tensor.extract_slice` of its box."""
    boxes = [(op, b) for op in walk_ops(func) if (b := box_read(op)) is not None]
    for op, b in boxes:
        with ir.InsertionPoint(op), op.location:
            view = static_slice(op.operands[0], b.offsets, b.sizes, op.results[0].type, b.strides)
        op.results[0].replace_all_uses_with(view)
        op.erase()


# --- reduction loops (reduction-dim tiling) -----------------------------------------

def _reduction_nest(loop: ir.Operation) -> tuple[list[ir.Operation], ir.Operation] | None:
    """(loops, principal) when `loop` is the outer loop of a nest that tiles the reduction
    dims of a contraction: each loop has one iter_arg, the inner loop's init is the
    outer loop's iter_arg, and the innermost body yields the contraction (a
    principal whose op has an accumulate form, contract/ops.py) that accumulates into its iter_arg."""
    loops, cur = [], loop
    while cur.name == "scf.for" and len(cur.results) == 1:
        body = cur.regions[0].blocks[0]
        loops.append(cur)
        yielded = [o.operation for o in body.operations][-1].operands[0]
        owner = yielded.owner
        if isinstance(owner, ir.Block):
            return None
        if owner.name == "scf.for":
            if len(owner.operands) != 4 or owner.operands[3] != body.arguments[1]:
                return None
            cur = owner
            continue
        if owner.name != "linalg.generic" or owner.operands[n_inputs(owner)] != body.arguments[1]:
            return None
        con = classify_principal(owner)
        return (loops, owner) if con is not None and con.steps else None
    return None


def _elementwise(operands: list[ir.Value], epilogue: Epilogue, result: ir.Type) -> ir.Operation:
    return ir.Operation.create(OPS["elementwise"].mlir_name, results=[result], operands=operands,
                               attributes={"epilogue": epilogue_attr(epilogue),
                                           "macs": _attr(0)})


def lower_reduction_nest(loops: list[ir.Operation], principal: ir.Operation) -> None:
    """Lower a reduction-loop nest (`_reduction_nest`) to the accumulate form.

    Before the nest, a `torq_hl.elementwise` zeroes the accumulator; it is f32
    for float inputs and i32 for integer ones, so partial sums are never rounded
    to the output dtype between steps (the iter_args and loop results take that
    type). In the innermost body the contraction becomes its `torq_hl` op with
    attr `accumulate` = 1 and the accumulator as operand 2: result = operand 2 +
    this step's contraction, no epilogue, `macs` of this step (the steps sum to
    the untiled MACs). After the nest, one `torq_hl.elementwise` reads the
    accumulator (operand 0, copied into value 0 by a first `add 0` step) and
    runs the group's epilogue (bias, activation, requant, cast: the steps that
    the untiled op would run on its principal value 0) once, producing the
    group's output type in place of its bottom op.
    """
    outer, inner = loops[0], loops[-1]
    con = classify_principal(principal)
    integer = isinstance(element_type(principal.operands[0]), ir.IntegerType)
    elt = ir.IntegerType.get_signless(32) if integer else ir.F32Type.get()
    acc_type = ir.RankedTensorType.get(list(static_shape(principal.results[0].type)), elt)
    inputs: list[ir.Value] = []
    init_op, pre = init_steps(principal, con, inputs, init=outer.operands[3])
    result = outer.results[0]
    epi, inputs, bottom = _nest_epilogue(result, pre, inputs)
    out_type = bottom.results[0].type if bottom is not None else result.type
    with ir.InsertionPoint(outer), outer.location:
        zero = _elementwise([], Epilogue([EpilogueStep("add", [Ref("const", const=0.0), Ref("const", const=0.0)])]),
                            acc_type)
    outer.operands[3] = zero.results[0]
    for loop in loops:
        loop.regions[0].blocks[0].arguments[1].set_type(acc_type)
        loop.results[0].set_type(acc_type)
    _accumulate_step(principal, con, inner.regions[0].blocks[0].arguments[1], acc_type)
    after = bottom if bottom is not None else outer
    with ir.InsertionPoint.after(after), after.location:
        tail_op = _elementwise([result] + inputs, _after_nest(epi), out_type)
    if bottom is not None:
        bottom.results[0].replace_all_uses_with(tail_op.results[0])
        bottom.erase()
    else:
        result.replace_all_uses_except(tail_op.results[0], tail_op)
    if init_op is not None and not list(init_op.results[0].uses):
        init_op.erase()


def _nest_epilogue(result: ir.Value, pre: list, inputs: list[ir.Value]) -> tuple[Epilogue, list, ir.Operation | None]:
    """(epilogue, its inputs, the op it replaces or None) after a reduction nest: the init's
    steps `pre`, then the nest result's single elementwise user where it folds."""
    users = [u.owner for u in result.uses]
    user = users[0] if len(users) == 1 else None
    if user is not None and not isinstance(user, ir.Block) and user.name == "linalg.generic" \
            and is_elementwise(user) and is_identity_like(indexing_maps(user)[-1]):
        try:
            probe = list(inputs)
            tail = epilogue_of(user, result, probe, principal_value=len(pre))
            return Epilogue(pre + tail.steps, tail.result), probe, user
        except Unsupported:
            pass
    return Epilogue(pre, len(pre) if pre else 0), inputs, None


def _accumulate_step(principal: ir.Operation, con, acc: ir.Value, acc_type: ir.Type) -> None:
    """Replace `principal` by its torq_hl op in accumulate form (its principal inputs, then the
    accumulator); a sum whose body computes what it adds (a prologue: GroupNorm's squares)
    reads the step's prologue, a `torq_hl.elementwise` before it, as `rewrite_group` does."""
    attrs = {k: _attr(v) for k, v in con.attrs.items()}
    attrs.update({ACCUMULATE: _attr(1), "macs": _attr(int(con.macs)),
                  "epilogue": epilogue_attr(Epilogue())})
    operands = list(principal.operands[:OPS[con.kind].inputs])
    with ir.InsertionPoint(principal), principal.location:
        if con.prologue:
            operands[0] = _elementwise(*prologue_of(principal)).results[0]
        step = ir.Operation.create(OPS[con.kind].mlir_name, results=[acc_type],
                                   operands=operands + [acc], attributes=attrs)
    principal.results[0].replace_all_uses_with(step.results[0])
    principal.erase()


def _after_nest(epi: Epilogue) -> Epilogue:
    """The epilogue after the nest: value 0 is the accumulator (operand 0, copied by a first
    `add 0` step); the group's operands follow it."""
    shift = [EpilogueStep(st.op, [Ref(r.kind, r.index + 1, r.axes, r.const) if r.kind == "operand" else r
                                  for r in st.args], st.to) for st in epi.steps]
    first = EpilogueStep("add", [Ref("operand", 0), Ref("const", const=0.0)])
    return Epilogue([first] + shift, epi.result)


def lower_reduction_loops(func: ir.Operation) -> None:
    """Lower every reduction-loop nest of the function (see `lower_reduction_nest`)."""
    while True:
        nest = next((n for op in walk_ops(func) if op.name == "scf.for" and (n := _reduction_nest(op))
                     and not (op.parent.name == "scf.for" and _reduction_nest(op.parent))), None)
        if nest is None:
            return
        try:
            lower_reduction_nest(*nest)
        except Unsupported as e:
            raise CompileError(f"{location_str(nest[1])}: error: {nest[1].name}: {e}") from None


def lower_function(func: ir.Operation) -> None:
    lower_box_reads(func)
    lower_reduction_loops(func)
    changed = True
    while changed:  # until a walk rewrites nothing (a rewrite may make an earlier op matchable)
        changed = False
        # One walk per round, not per group (that was quadratic in a tiled function's size):
        # the ops a rewrite consumed are skipped, as their handles may be erased.
        # (Positions, not handles: an erased op's handle no longer compares equal.)
        ops = [o for o in walk_ops(func) if o.name.startswith("linalg.")
               and not o.parent.name.startswith("linalg.")]  # not linalg.yield / index in bodies
        position = {op: i for i, op in enumerate(ops)}
        consumed: set[int] = set()
        for i, op in enumerate(ops):
            if i in consumed:
                continue
            try:
                match = match_group(op)
            except Unsupported as e:
                raise CompileError(f"{location_str(op)}: error: {op.name}: {e}") from None
            if match is not None:
                consumed.update(position[o.operation] for o in [*match.ops, match.bottom] if o.operation in position)
                rewrite_group(match)
                changed = True
    # A row gather stays: torq-build-nss-program writes its result with gather DMAs.
    leftovers = [op for op in walk_ops(func) if op.name.startswith("linalg.") and
                 not op.parent.name.startswith("linalg.") and row_gather(op) is None]
    if leftovers:
        op = leftovers[0]
        raise CompileError(f"{location_str(op)}: error: {op.name} is not part of any Torq pattern")
    # Side-effect-free ops left without users (tiling may leave a copy of a padded view
    # in a loop).
    erase_unused(lambda: walk_ops(func), {"tensor.empty", "tensor.extract_slice", "arith.constant", PAD_VIEW})


def run(module: ir.Module, options: PassOptions) -> None:
    for op in module.body.operations:
        if op.operation.name == "func.func":
            lower_function(op.operation)
