"""Float requantization in dispatches without a contraction: int8 arithmetic in QDQ form
(and, after a contraction's own requantization, int8 values requantized again:
`lower_requantized_results`).

ONNX Runtime's QDQ form leaves f32 arithmetic between int8 tensors wherever
no integer contraction absorbs it: squeeze-excite (the gate's i32
accumulator rescaled, put through hardsigmoid, multiplied into the int8
feature map), global average pooling (int8 values dequantized, summed in
f32, divided, quantized). After IREE's dispatch creation and linalg's
elementwise fusion (run here), such a dispatch is

  E. one elementwise generic from integer tensors (and constants) to int8,
     split into integer stages (compiler/requant_stages.py), or
  R. a sum reduction of a term per element, then an elementwise generic that
     quantizes the f32 sum (compiler/requant_pooling.py), or
  M. a max pooling of dequantized values quantized back at the same scale
     (PT2E's, where torch-mlir made no integer pool of it): an int8 max
     pooling (compiler/requant_max_pool.py).

Anything else with int8 on both sides and f32 between (a softmax, a
normalization) is a `FloatIsland`.
"""

from __future__ import annotations

from iree.compiler import ir

from .f32_chain import type_name
from .ir_utils import erase_unused, inline_function_text, iterator_types, n_inputs, region_ops
from .pass_managers import run_pipeline
from .passes import RequantMode
from .requant_channels import RESIDUAL_I32_BOUND
from .requant_emit import elementwise_function
from .requant_max_pool import int8_max_pool
from .requant_max_pool import summary as max_pool_summary
from .requant_pooling import lower_pooling
from .requant_stages import Channels, StageSplitter, variable_inputs
from .requant_summary import RequantSummary
from .requant_zero_point import separate_correction
from .rescale_fit import NotExact


def is_int8_arithmetic(func: ir.Operation, known) -> bool:
    """Whether `func` computes integer results from integer tensors (and constants) through f32
    generics, with no integer contraction (those are compiler/requant.py's). A contraction of
    f32 operands (a pooled sum of x * hardsigmoid(x), x dequantized, before elementwise fusion
    folds both factors into it) is f32 arithmetic like any other."""
    from .patterns import classify_contraction
    results = list(list(func.regions[0].blocks[0].operations)[-1].operands)
    elements = [type_name(ir.RankedTensorType(v.type).element_type) for v in results]
    # An i32 result beside them is left as it is when integers alone compute it (the row sums
    # of an int8 result that the next matmul's zero point correction reads).
    if not {"i8", "i16"} & set(elements) or any(
            t not in ("i8", "i16") and (t != "i32" or isinstance(v.owner, ir.Block) or
                                        v.owner.name != "linalg.generic" or not _integer_only(v.owner))
            for v, t in zip(results, elements)):
        return False
    for a in func.regions[0].blocks[0].arguments:
        if isinstance(a.type, ir.RankedTensorType) and not known.is_constant(a) and \
                type_name(ir.RankedTensorType(a.type).element_type) not in ("i8", "i16", "i32"):
            return False
    generics = [o for o in region_ops(func) if o.name == "linalg.generic"]
    return any(o.name == "arith.sitofp" for g in generics for o in region_ops(g)) and \
        not any(classify_contraction(g) is not None and _integer_inputs(g) for g in generics)


def _integer_inputs(op: ir.Operation) -> bool:
    return all(type_name(ir.RankedTensorType(op.operands[i].type).element_type).startswith("i")
               for i in range(n_inputs(op)))


def _forms(func: ir.Operation) -> tuple[list, list]:
    """The generics of `func` that compute in float (not a fill, generalized, nor an integer sum
    of int8 values: those stay as they are) and their iterator types."""
    generics = [o for o in region_ops(func) if o.name == "linalg.generic" and n_inputs(o) and not _integer_only(o)]
    return generics, [iterator_types(g) for g in generics]


def _integer_only(op: ir.Operation) -> bool:
    """Whether generic `op` reads, computes and writes integers only."""
    return all(str(v.type).startswith("i") for v in op.regions[0].blocks[0].arguments) and \
        all(str(r.type).startswith("i") for o in region_ops(op) for r in o.results)


def _fuse_elementwise(func: ir.Operation) -> None:
    """linalg's elementwise fusion of `func`, after giving each result of a multi-result
    elementwise generic its own copy: IREE's aggressive fusion leaves x and hardsigmoid(x)
    as two results of one generic, which linalg does not fuse into their one consumer; each
    copy then has one used result (the fusion erases the rest) and fuses."""
    for op in [o for o in region_ops(func) if o.name == "linalg.generic" and len(o.results) > 1
               and "reduction" not in iterator_types(o)]:
        for result in list(op.results)[1:]:
            copy = op.clone(ip=ir.InsertionPoint(op))
            result.replace_all_uses_with(copy.results[result.result_number])
    run_pipeline("func.func(linalg-fuse-elementwise-ops)", func)


def _raise_if_float_island(func: ir.Operation) -> None:
    """FloatIsland if `func`, fused elementwise, has neither integer form; decided on a copy,
    so an island keeps the ops the bf16 path matches."""
    scratch = ir.Module.create()
    func.clone(ip=ir.InsertionPoint(scratch.body))
    _fuse_elementwise(scratch.body.operations[0].operation)
    _, its = _forms(scratch.body.operations[0].operation)
    if (len(its) == 1 and "reduction" not in its[0]) or \
            (len(its) == 2 and "reduction" in its[0] and "reduction" not in its[1]):
        return
    forms = ", ".join("reduction" if "reduction" in i else "elementwise" for i in its)
    raise FloatIsland(f"int8 arithmetic in f32 as {len(its)} linalg ops ({forms}) is neither one "
                      f"elementwise op nor a sum reduction and its quantize", forms)


class FloatIsland(NotExact):
    """Int8 in, int8 out, and f32 between in a form no integer rescale reproduces (a softmax,
    a normalization): with --torq-requant=nearest it runs in bf16 (`forms`: its linalg ops)."""

    def __init__(self, message: str, forms: str):
        super().__init__(message)
        self.forms = forms


def lower_int8_arithmetic(func: ir.Operation, known, host, mode: RequantMode) -> list:
    """Rewrites `func` (`is_int8_arithmetic`) into integer generics (E or R in the module
    docstring); returns its RequantSummary. Raises NotExact when it has neither form or a
    stage cannot be reproduced within one output step; `func` may then have been fused
    elementwise (same semantics)."""
    host = host() if callable(host) else host
    if host is None:
        raise NotExact("the host target's float semantics (FMA contraction) are unknown")
    max_pool = int8_max_pool(func, host)
    if max_pool is not None:  # M: dequantize, max pool, the same quantize (requant_max_pool.py)
        quant, text, x = max_pool
        quant.results[0].replace_all_uses_with(inline_function_text(text, quant, [x]))
        quant.erase()
        erase_unused(lambda: func.regions[0].blocks[0].operations,
                     ("linalg.generic", "linalg.fill", "tensor.empty", "tensor.pad", "arith.constant"))
        return [max_pool_summary()]
    _raise_if_float_island(func)
    _fuse_elementwise(func)
    generics, its = _forms(func)
    if len(generics) == 1 and "reduction" not in its[0]:
        op = generics[0]
        new, summary = _integer_elementwise(op, known, host, mode)
    elif len(generics) == 2 and "reduction" in its[0] and "reduction" not in its[1]:
        op = generics[1]
        new, summary = lower_pooling(generics[0], op, known, host, mode)
    else:  # _raise_if_float_island saw one of the two
        raise AssertionError("linalg-fuse-elementwise-ops fused differently on a copy")
    op.results[0].replace_all_uses_with(new)
    op.erase()
    erase_unused(lambda: func.regions[0].blocks[0].operations,
                 ("linalg.generic", "linalg.fill", "tensor.empty", "arith.constant"))
    return [summary]


def _integer_elementwise(op: ir.Operation, known, host, mode: RequantMode) -> tuple[ir.Value, RequantSummary]:
    """Form E: elementwise `op` from integer tensors to int8 through f32 as integer stages,
    inserted before it (its value and summary); NotExact when a stage is not reproduced."""
    variables, ranges = variable_inputs(op, known)
    channels = Channels.of(op, known, set(variables))
    body = region_ops(op)
    ops, result = body[:-1], body[-1].operands[0]
    args = op.regions[0].blocks[0].arguments
    correction = separate_correction(op, known, RESIDUAL_I32_BOUND)
    if correction is not None:  # a' = acc - c in i32, the one leaf of what follows
        acc_index, corr = correction
        ops = [o for o in ops if o not in corr.ops]
        for i in (acc_index, *corr.operands):
            del ranges[args[i]]
        ranges[corr.corrected] = (-corr.bound, corr.bound)
    stages = StageSplitter(ops, channels, host, mode, ranges).split(result)
    new = inline_function_text(elementwise_function(op, variables, stages, channels.dims, correction), op,
                               [op.operands[i] for i in variables])
    return new, RequantSummary.of_stages("int8 elementwise", stages)


def _requantizes_integers(op: ir.Operation, known) -> bool:
    """Whether `op` is elementwise from integer tensors (and constants) to an int8 / i16 result
    through f32: a requantization of int8 values."""
    if op.name != "linalg.generic" or len(op.results) != 1 or any(it != "parallel" for it in iterator_types(op)):
        return False
    if type_name(ir.RankedTensorType(op.results[0].type).element_type) not in ("i8", "i16"):
        return False
    names = {o.name for o in region_ops(op)}
    return "arith.sitofp" in names and "arith.fptosi" in names and all(
        known.is_constant(op.operands[i]) or
        type_name(ir.RankedTensorType(op.operands[i].type).element_type) in ("i8", "i16", "i32")
        for i in range(n_inputs(op)))


def lower_requantized_results(func: ir.Operation, known, host, mode: RequantMode) -> list:
    """After compiler/requant.py has rescaled a contraction's requantization, the elementwise
    generics left that requantize integer values again (GhostNet: the conv's int8 map
    requantized to the concatenation's scale, a second result of the dispatch) become integer
    stages (form E); their summaries. One no integer stage reproduces is left as it is (the
    support check then decides, as before)."""
    host = host() if callable(host) else host
    out = []
    for op in [o for o in region_ops(func) if _requantizes_integers(o, known)]:
        try:
            new, summary = _integer_elementwise(op, known, host, mode)
        except NotExact:
            continue
        op.results[0].replace_all_uses_with(new)
        op.erase()
        out.append(summary)
    erase_unused(lambda: func.regions[0].blocks[0].operations, ("tensor.empty", "arith.constant"))
    return out
