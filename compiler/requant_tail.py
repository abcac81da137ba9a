"""What a requantization dispatch leaves to the host: the f32 tail after its integer result,
and the quantize of an f32 input before it.

The NPU computes no f32. When a dispatch's f32 result is a dequantize of an
integer value (the model's output DequantizeLinear fused into the last
conv's dispatch; PT2E's float output after an int8 conv, a dequantize of the
accumulator itself), the NPU writes the integer tensor and a small host
dispatch computes the tail from it (`HostTail`, built into a dispatch by
host_dispatches.host_tail_dispatch):

- `split_tail`: the ops after the last float-to-int conversion, reading only
  that int value and scalar constants;
- `accumulator_tail`: a body with no conversion at all, reading the
  contraction's i32 accumulator, per-channel constants (its bias and
  scales) and run-time tensors (`runtime_tensors`: an f32 residual, a dynamic
  quantization's scale, zero point and column sums), all of it the tail; also
  runtime_zero_point's integer `acc - z * W` (`is_accumulator_correction`).

The mirror image, `split_input_quantizes`: a model's input QuantizeLinear that
IREE fused into its consumer's dispatch (as its aggressive fusion does) is an
elementwise generic quantizing an f32 argument; the argument becomes the
integer tensor and the host computes the quantize before the call (a "head",
in the same `HostTail` form).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from iree.compiler import ir

from .ir_utils import (
    constant_of,
    function_argument,
    indexing_maps,
    iterator_types,
    map_dims,
    n_inputs,
    region_ops,
    static_shape,
    sync_function_type,
)
from .rescale_fit import NotExact


@dataclass
class HostTail:
    """Elementwise ops after the integer value, run on the host.

    `ops_text` is a generic-form op sequence reading `%q` (an `in_type`
    scalar) and `%p<k>` (element k of `channel_values`) whose value `result`
    (of `result_type`) is the element the original dispatch stored.
    """
    ops_text: str
    result: str
    in_type: str
    result_type: str
    # Per-channel constants the tail reads: (result dims they vary along, element type, values:
    # nested lists, one level per dim).
    channel_values: list[tuple[tuple[int, ...], str, list]] = field(default_factory=list)
    # Tensors the tail reads as `%x<j>`, each along some of the result's dims (an f32 residual
    # added to a dequantized accumulator, along all of them; a dynamic quantization's runtime
    # scale and zero point, along none; its zero-point correction's column sums, along the
    # channels): (function argument number, element type, the result dim of each of the
    # tensor's dims), and, once the target knows them, their dispatch operand indices.
    tensors: list[tuple[int, str, tuple[int, ...]]] = field(default_factory=list)
    tensor_operands: list[int] = field(default_factory=list)
    # -1: `%q` is the NPU's result of the same index. k >= 0: a result the NPU does not write,
    # `%q` the finished (tail applied) value of dispatch result k (`derived_tails`).
    source: int = -1


def split_tail(op: ir.Operation) -> tuple[ir.Operation, list[ir.Operation]]:
    """(the fptosi giving the quantized value, the ops after it up to the yield)."""
    body = region_ops(op)
    q = [o for o in body if o.name == "arith.fptosi"][-1]
    k = body.index(q)
    tail = body[k + 1:-1]
    inside = {q.results[0]} | {r for o in tail for r in o.results}
    for o in tail:
        for v in o.operands:
            if v not in inside and constant_of(v) is None:
                raise NotExact("the dequantize after the int8 value reads per-channel values")
    # Nothing before the conversion may reach the yield except through it.
    before = {r for o in body[:k] for r in o.results}
    if any(v in before for o in tail for v in o.operands) or body[-1].operands[0] in before:
        raise NotExact("the chain's result does not go through its int8 value")
    return q, tail


def tail_text(q: ir.Value, tail: list[ir.Operation], per_channel: dict | None = None,
              tensors: dict | None = None) -> HostTail:
    """The tail ops in generic form, renamed: `%q` is the value `q`, scalar constants are
    re-created, the block arguments in `per_channel` ({arg: (dim, values)}) become `%p<k>`,
    those in `tensors` ({arg: (function argument number, result dims)}) `%x<j>`."""
    tensors = tensors or {}
    names = {q: "%q"} | {v: f"%x{j}" for j, v in enumerate(tensors)}
    lines = []
    channel_values = []
    per_channel = per_channel or {}

    def name(v):
        if v not in names:
            if v in per_channel and per_channel[v][0] is not None:
                dims, values = per_channel[v]  # a grouped conv's vary along groups x channels
                names[v] = f"%p{len(channel_values)}"
                channel_values.append((tuple(dims), str(v.type), np.asarray(values).tolist()))
                return names[v]
            if v in per_channel:  # one value for every channel
                n = f"%c{len(names)}"
                value = np.asarray(per_channel[v][1]).reshape(-1)[0]
                literal = repr(float(value)) if str(v.type).startswith(("f", "bf")) else str(int(value))
                lines.append(f'{n} = "arith.constant"() <{{value = {literal} : {v.type}}}> : () -> {v.type}')
                names[v] = n
                return n
            n = f"%c{len(names)}"  # a scalar constant (checked by the caller)
            lines.append(f'{n} = "arith.constant"() <{{value = {v.owner.attributes["value"]}}}> : () -> {v.type}')
            names[v] = n
        return names[v]

    for o in tail:
        operands = [name(v) for v in o.operands]
        res = f"%t{len(names)}"
        attrs = ", ".join(f"{a} = {o.attributes[a]}" for a in o.attributes)
        props = f" <{{{attrs}}}>" if attrs else ""
        lines.append(f'{res} = "{o.name}"({", ".join(operands)}){props} : '
                     f'({", ".join(str(v.type) for v in o.operands)}) -> {o.results[0].type}')
        names[o.results[0]] = res
    return HostTail("\n".join(lines), names[tail[-1].results[0]], str(q.type), str(tail[-1].results[0].type),
                    channel_values, [(n, str(v.type), dims) for v, (n, dims) in tensors.items()])


def accumulator_tail(op: ir.Operation, acc_index: int, per_channel: dict, tensors: dict | None = None) -> HostTail:
    """The whole body of `op` (no float-to-int conversion: a dequantize of the accumulator to
    f32) as the host's tail, reading the accumulator, `per_channel` constants and `tensors`
    (block argument -> (function argument number, result dims): `runtime_tensors`)."""
    body = region_ops(op)
    args = op.regions[0].blocks[0].arguments
    tensors = tensors or {}
    for o in body[:-1]:
        for v in o.operands:
            if isinstance(v.owner, ir.Block) and v != args[acc_index] and v not in per_channel and v not in tensors:
                raise NotExact("the dequantize of the accumulator reads a tensor that is not a constant")
            if not isinstance(v.owner, ir.Block) and v.owner.name == "arith.constant" and constant_of(v) is not None \
                    and constant_of(v).size != 1:
                raise NotExact("the dequantize of the accumulator reads a constant tensor")
    return tail_text(args[acc_index], body[:-1], per_channel, tensors)


def is_accumulator_correction(op: ir.Operation, known) -> bool:
    """Whether `op` is runtime_zero_point's `acc - z * W` on the i32 accumulator of an integer
    contraction (a ConvInteger's, which another dispatch dequantizes): an elementwise generic
    whose body is exactly that, acc read from a contraction (a generic with a reduction loop),
    z a 0-d argument that is no constant (`known.is_constant`: a run-time zero point). Its i32
    result is the dispatch's; the host computes it, as a dequantize of the accumulator."""
    if op.name != "linalg.generic" or len(op.results) != 1 or set(iterator_types(op)) != {"parallel"} \
            or str(ir.RankedTensorType(op.results[0].type).element_type) != "i32":
        return False
    ops = region_ops(op)
    if [o.name for o in ops] != ["arith.muli", "arith.subi", "linalg.yield"]:
        return False
    mul, sub, yield_ = ops
    args, maps = list(op.regions[0].blocks[0].arguments), indexing_maps(op)
    if sub.operands[0] not in args[:n_inputs(op)] or sub.operands[1] != mul.results[0] \
            or yield_.operands[0] != sub.results[0]:
        return False
    acc = op.operands[args.index(sub.operands[0])]
    contraction = not isinstance(acc.owner, ir.Block) and acc.owner.name == "linalg.generic" \
        and "reduction" in iterator_types(acc.owner)
    scalars = [args[i] for i in range(n_inputs(op)) if not maps[i].results
               and isinstance(op.operands[i].owner, ir.Block) and not known.is_constant(op.operands[i])]
    return contraction and any(z in list(mul.operands) for z in scalars)


def derived_tails(op: ir.Operation, readers: list[ir.Operation]) -> list[tuple[ir.Operation, int, HostTail]]:
    """(reader, the function result it is, its tail reading `op`'s f32 result) for each of
    `readers`, the other users of a dequantized accumulator the function also returns:
    MobileNetV3's SE input (the f32 activation, pooled on the host) quantized for the
    multiply by its gate. IREE yields both from one generic, split into a chain by
    torq-split-elementwise-results. The host computes the reader from the f32 value it
    computes anyway, so the NPU writes the accumulator once. NotExact unless each reader
    is an elementwise generic of that value alone (and scalar constants), in its layout,
    whose result only the function returns."""
    out = []
    for g in readers:
        uses = list(g.results[0].uses) if g.name == "linalg.generic" and len(g.results) == 1 else []
        if len(uses) != 1 or uses[0].owner.name != "func.return" or n_inputs(g) != 1 or \
                set(iterator_types(g)) != {"parallel"} or len(set(map(str, indexing_maps(g)))) != 1 or \
                static_shape(g.results[0].type) != static_shape(op.results[0].type):
            raise NotExact("the f32 dequantize of the accumulator has a reader other than an elementwise "
                           "generic the dispatch returns")
        arg = g.regions[0].blocks[0].arguments[0]
        body = region_ops(g)[:-1]
        inside = {arg} | {r for o in body for r in o.results}
        if not body or any(v not in inside and not _scalar_constant(v) for o in body for v in o.operands):
            raise NotExact("a reader of the f32 dequantize of the accumulator reads other values")
        out.append((g, uses[0].operand_number, tail_text(arg, body)))
    return out


def runtime_tensors(op: ir.Operation, acc_index: int, known) -> dict:
    """{block argument: (function argument number, result dims)} of the tensors a dequantize of
    the accumulator (`op`) reads besides it, function arguments read along some of the
    result's dims, which the host tail reads as they are. An f32 residual added to it (DeiT's
    fc2 + x under PT2E) is read along all of them; a dynamic quantization's run-time scale and
    zero point (0-d) along none, its zero-point correction's column sums (computed at load
    time) along the channels. A constant argument read that way (a per-channel weight scale, a
    bias) is one too: the host tail reads the flow-level constant the dispatch reads, so the
    tail is the same executable for every layer and the NPU compile never reads its value
    (the dispatch cache shares it between layers, compiler/dispatch_cache.py). Any other
    constant is left to `per_channel_constants`; NotExact for any other tensor."""
    maps, block = indexing_maps(op), op.regions[0].blocks[0]
    out, shape = map_dims(maps[-1]), static_shape(op.results[0].type)
    found = {}
    for i in range(n_inputs(op)):
        v = op.operands[i]
        if i == acc_index or not list(block.arguments[i].uses):
            continue  # (unread: a zero-point correction fold_zero_products folded to 0)
        argument = function_argument(v)
        if argument is None and constant_of(v) is not None:
            continue  # an arith.constant: a scalar the tail re-creates
        if argument is None:
            raise NotExact(f"operand {i} of the dequantize of the accumulator is computed in the dispatch")
        dims = map_dims(maps[i])
        along = tuple(out.index(d) for d in dims) if out is not None and dims is not None and \
            set(dims) <= set(out) and len(set(dims)) == len(dims) else None
        if along is None or static_shape(v.type) != tuple(shape[d] for d in along):
            if known.is_constant(v):
                continue
            raise NotExact(f"operand {i} of the dequantize of the accumulator is not read along the result's dims")
        found[block.arguments[i]] = (argument, along)
    return found


def split_input_quantizes(func: ir.Operation, known) -> dict[int, HostTail]:
    """Cuts the quantize of each f32 argument of `func` that only an elementwise generic
    quantizing it reads (to an integer, with scalar constants, its result read by other
    ops): the argument takes the generic's integer type and replaces its result. Returns
    {argument index: the quantize for the host}; `known(arg)` is an argument's constant."""
    heads: dict[int, HostTail] = {}
    for k, arg in enumerate(func.regions[0].blocks[0].arguments):
        generic = _input_quantize(arg, known)
        if generic is None:
            continue
        heads[k] = tail_text(generic.regions[0].blocks[0].arguments[0], region_ops(generic)[:-1])
        init = generic.operands[1].owner
        arg.set_type(generic.results[0].type)
        generic.results[0].replace_all_uses_with(arg)
        generic.erase()
        if not isinstance(init, ir.Block) and init.name == "tensor.empty" and not list(init.results[0].uses):
            init.erase()
    if heads:
        sync_function_type(func)
    return heads


def _input_quantize(arg: ir.Value, known) -> ir.Operation | None:
    """The generic quantizing f32 argument `arg` elementwise (see split_input_quantizes), or None."""
    if known.is_constant(arg) or not isinstance(arg.type, ir.RankedTensorType) or \
            str(ir.RankedTensorType(arg.type).element_type) != "f32":
        return None
    uses = list(arg.uses)
    generic = uses[0].owner if len(uses) == 1 else None
    if generic is None or generic.name != "linalg.generic" or n_inputs(generic) != 1 or len(generic.results) != 1 \
            or set(iterator_types(generic)) != {"parallel"}:
        return None
    identity = ir.AffineMap.get_identity(len(iterator_types(generic)))
    result = generic.results[0]
    if any(m != identity for m in indexing_maps(generic)) or \
            str(ir.RankedTensorType(result.type).element_type) not in ("i8", "i16"):
        return None
    users = [u.owner for u in result.uses]
    if not users or any(u.name == "func.return" for u in users):
        return None  # a dispatch that only quantizes its input stays whole on the host
    body = region_ops(generic)
    inside = {generic.regions[0].blocks[0].arguments[0]} | {r for o in body for r in o.results}
    if "arith.fptosi" not in [o.name for o in body] or \
            any(v not in inside and not _scalar_constant(v) for o in body[:-1] for v in o.operands):
        return None
    return generic


def _scalar_constant(v: ir.Value) -> bool:
    c = constant_of(v)
    return c is not None and c.size == 1


def io_conversion_reason(func: ir.Operation) -> str:
    """Why a dispatch that only quantizes an f32 tensor to int8, or dequantizes an int8 tensor
    to f32 (a model's input QuantizeLinear, its output DequantizeLinear, or one IREE left
    between f32 data movement ops), stays on host; "" for
    any other dispatch. The slices compute no f32: in bf16 such a conversion would move values
    by a step, so the host does it in f32 as the model states it."""
    generics = [o for o in region_ops(func) if o.name == "linalg.generic"]
    if len(generics) != 1 or n_inputs(generics[0]) != 1:
        return ""
    op = generics[0]
    src = str(ir.RankedTensorType(op.operands[0].type).element_type)
    dst = str(ir.RankedTensorType(op.results[0].type).element_type)
    names = {o.name for o in region_ops(op)}
    if src == "f32" and dst in ("i8", "ui8", "i16") and "arith.fptosi" in names:
        return (f"quantize of an f32 tensor to {dst} (a QuantizeLinear): the slices compute no f32 "
                f"and bf16 would move values by a step")
    if src in ("i8", "ui8", "i16") and dst == "f32" and "arith.sitofp" in names and "arith.fptosi" not in names:
        return f"dequantize of an {src} tensor to f32 (a DequantizeLinear): the slices produce no f32"
    return ""
