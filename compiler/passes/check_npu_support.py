"""torq-check-npu-support: refuse, with the reason, a dispatch function the NPU cannot run.

Contract: takes a Torq dispatch function after requantization lowering and
in-place marking, changes nothing, and raises Unsupported (the dispatch stays
on host; the target's remark gives the reason) when:
- the `torq` VM module has no call with that many tensors (`module_abi`);
- it only quantizes an f32 tensor or dequantizes to f32 (`io_conversion_reason`);
- it converts between integers and floats around float compute (a dequantize or
  quantize requantization lowering left: a quantized softmax or layer norm)
  and --torq-int8-float-ops is not bf16;
- --torq-keep-f32 is given and it computes or passes f32;
- a tensor argument or result has a dtype the slices lack (i64, f64, index);
- a linalg op (or pad) matches no Torq pattern, or a tensor has a dtype the
  slices lack, or an op outside linalg bodies has no Torq lowering;
- a result is neither computed by a fuse group nor a copy a DMA makes;
- a gathering reduction (adaptive average pooling) does not fit LRAM untiled.
"""

from __future__ import annotations

from iree.compiler import ir

from torq.contract.module_abi import MAX_INPUTS, MAX_RESULTS

from ..ir_utils import iterator_types, static_shape, walk_ops
from ..patterns import (
    Unsupported,
    data_movement_ops,
    data_movement_reason,
    is_zero_fill,
    match_group,
    row_gather,
)
from ..patterns.model import steps_reduction
from ..patterns.row_gather import GATHER_VIEW, INDEX_ELEMENT_TYPES
from ..requant_tail import io_conversion_reason
from . import PassOptions, convert_dtypes
from .mark_in_place_updates import IN_PLACE_RESULTS

NAME = "torq-check-npu-support"
SUPPORTED_DTYPES = {"bf16", "i8", "i16", "i32", "f32", "i1", "index"}
# A DDR tensor has a fixed element width: index values are computed, never stored.
IO_DTYPES = SUPPORTED_DTYPES - {"index"}
# Ops a dispatch function may hold outside linalg bodies besides linalg ops.
_STRUCTURAL_OPS = ("func.func", "func.return", "arith.constant", "tensor.empty", "tensor.pad")


def _call_size_reason(func: ir.Operation) -> str:
    ftype = ir.FunctionType(ir.TypeAttr(func.attributes["function_type"]).value)
    in_place = len(ir.ArrayAttr(func.attributes[IN_PLACE_RESULTS])) if IN_PLACE_RESULTS in func.attributes else 0
    n_in, n_out = len(ftype.inputs) + in_place, len(ftype.results)
    if n_in > MAX_INPUTS or n_out > MAX_RESULTS:
        return (f"the torq module calls take at most {MAX_INPUTS} tensors and give at most "
                f"{MAX_RESULTS}, this dispatch needs {n_in} and {n_out}")
    return ""


_INT_FLOAT_CONVERSIONS = {"arith.sitofp": "a dequantize (integer to float)",
                          "arith.fptosi": "a quantize (float to integer)"}


def _int_float_conversion_reason(func: ir.Operation, options: PassOptions) -> str:
    """Why float compute between integer tensors stays on host under --torq-int8-float-ops=host:
    the host computes it in f32 as the model states it; the slices would in bf16."""
    if options.int8_float_ops == "bf16":
        return ""
    int8_io = _io_of(func, ("i8", "ui8"))
    for op in walk_ops(func):
        if op.name in _INT_FLOAT_CONVERSIONS and op.parent is not None and op.parent.name.startswith("linalg.") \
                and (int8_io or _narrow_integer_side(op)):
            return (f"'{op.name}' in a {op.parent.name} body: {_INT_FLOAT_CONVERSIONS[op.name]} in float "
                    f"compute that no integer rescale reproduces stays on host in f32 "
                    f"(--torq-int8-float-ops=bf16 runs it on the NPU in bf16{_pooled_float_hint(func)})")
    return ""


def _pooled_float_hint(func: ir.Operation) -> str:
    """A hint for a quantized reduction of f32 inputs (f32 in, int8 out): IREE's default fusion
    left the dequantize of its int8 input in another dispatch (MobileNetV3's float hardswish
    before its mean); fused into one int8 dispatch it runs on the NPU in integers."""
    io = list(_tensor_io(func))
    ins = {element for kind, _, _, element in io if kind == "argument"}
    outs = {element for kind, _, _, element in io if kind == "result"}
    reduces = any(op.name == "linalg.generic" and "reduction" in iterator_types(op) for op in walk_ops(func))
    if reduces and ins == {"f32"} and outs and outs <= {"i8", "ui8"}:
        return ("; its f32 inputs may be int8 values dequantized in other dispatches: "
                "--iree-dispatch-creation-enable-aggressive-fusion makes such a chain one int8 dispatch")
    return ""


def _narrow_integer_side(conversion: ir.Operation) -> bool:
    """Whether an int <-> float conversion's integer is at most 16 bits: a quantize to, or a
    dequantize of, an int8 level (with its zero point: i16), even in a dispatch with float
    tensors only (a model's final quantize-dequantize pair). A float model's own conversions
    (an average pooling's count, from an index) are of i32 / i64."""
    value = conversion.results[0] if conversion.name == "arith.fptosi" else conversion.operands[0]
    t = value.type
    return isinstance(t, ir.IntegerType) and ir.IntegerType(t).width <= 16


def _tensor_io(func: ir.Operation):
    """("argument" | "result", index, type, element type name) of each tensor argument and result."""
    ftype = ir.FunctionType(ir.TypeAttr(func.attributes["function_type"]).value)
    for kind, types in (("argument", ftype.inputs), ("result", ftype.results)):
        for i, t in enumerate(types):
            if isinstance(t, ir.ShapedType):
                yield kind, i, t, str(ir.ShapedType(t).element_type)


def _io_of(func: ir.Operation, element_types: tuple[str, ...]) -> bool:
    """Whether an argument or result of `func` is a tensor of one of `element_types`."""
    return any(element in element_types for _, _, _, element in _tensor_io(func))


def _io_dtype_reason(func: ir.Operation) -> str:
    """A tensor argument or result of a dtype the slices lack (i64, f64): the program model
    has no such DDR tensor, even for a dispatch that only copies it; except the indices of
    a row gather (an embedding's i64 tokens), which only its DMA reads."""
    args = func.regions[0].blocks[0].arguments
    for kind, i, t, element in _tensor_io(func):
        if element not in IO_DTYPES and not (kind == "argument" and element in INDEX_ELEMENT_TYPES
                                             and _only_gather_indices(args[i])):
            return f"tensor {kind} {i} ({t}) is of {element}, which the slices do not support"
    return ""


def _only_gather_indices(v: ir.Value) -> bool:
    """Whether every use of `v` is as a row gather's indices, directly or through a box."""
    for use in v.uses:
        user = use.owner
        if user.name == "tensor.extract_slice" and use.operand_number == 0:
            if not _only_gather_indices(user.results[0]):
                return False
        elif not (row_gather(user) is not None and use.operand_number == 0 or
                  user.name == GATHER_VIEW and use.operand_number == 1):
            return False
    return True


def _op_reason(op: ir.Operation, options: PassOptions, groups: list, moves: set) -> str:
    """Why `op` has no NPU form ("" if it has); a matched fuse group goes into `groups`.
    `moves`: the function's ops the NSS program performs with DMAs alone
    (`patterns.data_movement_ops`)."""
    if op.name.startswith("linalg.") or op.name == "tensor.pad":
        if is_zero_fill(op):
            return ""
        try:
            m = match_group(op)
        except Unsupported as e:
            return f"{op.name}: {e}"
        if m is not None:
            groups.append(m)
    for r in op.results:
        # Scalars (constants feeding linalg bodies) are checked by the body
        # decoder; only tensors must have a slice dtype (a box of a gather's indices
        # is only read by its DMA).
        if not isinstance(r.type, ir.ShapedType) or op.name == "tensor.extract_slice" and _only_gather_indices(r):
            continue
        s = str(ir.ShapedType(r.type).element_type)
        if s == "f32" and options.keep_f32:
            return "f32 compute requested on host (--torq-keep-f32)"
        if s not in SUPPORTED_DTYPES:
            return f"{op.name} computes in {s}, which the slices do not support"
    if op.name not in _STRUCTURAL_OPS and op not in moves and not op.name.startswith("linalg.") \
            and op.parent is not None and op.parent.name == "func.func":
        return f"'{op.name}' has no Torq lowering"
    return ""


def _untileable_group(groups: list):
    """A group tiling cannot slice, or None: a reduction that gathers its input
    (torch-mlir's adaptive average pooling) reads the whole box from one op body; a
    reduction of a whole tensor to one value has no result dim to tile, and only a sum
    (GroupNorm(1, C)'s statistics) accumulates across steps of its reduction loop."""
    for m in groups:
        whole = m.kind == "reduce" and static_shape(m.principal.results[0].type) == ()
        if m.gather is not None or (whole and not steps_reduction(m.kind, m.attrs, m.gather)):
            return m
    return None


def _untiled_fit_reason(func: ir.Operation, group, options: PassOptions) -> str:
    """An `_untileable_group`'s dispatch must fit LRAM untiled (the allocator decides, on the
    bf16 function the pipeline will see)."""
    from ..tiling.cost import footprint

    scratch = ir.Module.create()
    func.clone(ip=ir.InsertionPoint(scratch.body))
    clone = scratch.body.operations[0].operation
    if not options.keep_f32:
        convert_dtypes.convert_function(clone)
    need, budget = footprint(clone, None, options), options.hw.available_lram_bytes
    if need <= budget:
        return ""
    if group.gather is not None:
        return (f"{group.principal.name}: a gathering reduction (adaptive average pooling) needs "
                f"{need} bytes of LRAM untiled, the budget is {budget}, and its gather form cannot be tiled")
    return (f"{group.principal.name}: a reduction of a whole tensor to one value needs {need} bytes of LRAM "
            f"untiled, the budget is {budget}, and it cannot be tiled (a {group.attrs.get('mode')} does not "
            f"accumulate across steps, only a sum does)")


def float_conversion_reason(func: ir.Operation, options: PassOptions) -> str:
    """Why `func` stays on host for converting between integers and f32 ("" when it does not)."""
    return io_conversion_reason(func) or _int_float_conversion_reason(func, options)


def unsupported_reason(func: ir.Operation, options: PassOptions) -> str:
    """Why the NPU cannot run `func` ("" when it can)."""
    reason = _call_size_reason(func) or float_conversion_reason(func, options)
    if reason:
        return reason
    if options.keep_f32 and _io_of(func, ("f32",)):  # also a copy, which has no op computing in f32
        return "f32 compute requested on host (--torq-keep-f32)"
    groups: list = []
    moves = data_movement_ops(func)
    for op in walk_ops(func):
        reason = _op_reason(op, options, groups, moves)
        if reason:
            return reason
    reason = _io_dtype_reason(func)  # after the ops' reasons, which say more (a gather's index op)
    if reason:
        return reason
    reason = data_movement_reason(func)  # results no group computes must be copies DMAs make
    if reason:
        return reason if groups else f"no compute the NPU runs, and {reason}"
    untileable = _untileable_group(groups)
    return _untiled_fit_reason(func, untileable, options) if untileable is not None else ""


def run(module: ir.Module, options: PassOptions) -> None:
    for op in module.body.operations:
        if op.operation.name == "func.func":
            reason = unsupported_reason(op.operation, options)
            if reason:
                raise Unsupported(reason)
