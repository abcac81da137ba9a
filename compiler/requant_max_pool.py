"""A max pooling of dequantized int8 values quantized back at the same scale, as an int8 max
pooling.

PT2E (X86InductorQuantizer) quantizes a max pool's output with its input's scale and zero
point, and where torch-mlir does not fuse it into an integer pool (GoogLeNet's 3x3 stride-1
pool with ceil_mode) IREE forms

    D = deq(x)                  x an int8 tensor, dequantized (an elementwise generic)
    P = pad(D, -inf)            (optional)
    M = max over each window of P, from -inf
    q = quant(M)                an elementwise generic to int8

Exact as an int8 max pooling of x, padded with -128, where, on all 256 levels, deq is
strictly increasing and quant(deq(x)) == x, and quant(-inf) == -128: the max of a window's
values is one of them, deq(x*) for its largest x*, so quant gives x*; a window of padding
alone gives quant(-inf) = -128 on one side and the pad on the other. Checked by evaluating
both chains as llvm-cpu does (compiler/f32_chain.py). Anything else is left as it was.
"""

from __future__ import annotations

import numpy as np
from iree.compiler import ir

from .f32_chain import Chain
from .ir_utils import constant_of, indexing_maps, iterator_types, loop_ranges, n_inputs, region_ops, static_shape
from .patterns.contraction import linear_terms
from .requant_summary import RequantSummary
from .rescale_fit import NotExact

_MAX = ("arith.maximumf", "arith.maxnumf")


def int8_max_pool(func: ir.Operation, host) -> tuple[ir.Operation, str, ir.Value] | None:
    """(the quantize generic, the int8 max pool's function text, its int8 input) when `func`
    holds the form of the module docstring, else None."""
    generics = [o for o in region_ops(func) if o.name == "linalg.generic"]
    reductions = [g for g in generics if "reduction" in iterator_types(g)]
    if len(reductions) != 1:
        return None
    red = reductions[0]
    generics = [g for g in generics if g != red.operands[n_inputs(red)].owner]  # a fill, generalized
    if len(generics) != 3:
        return None
    body = region_ops(red)
    block = red.regions[0].blocks[0]
    if n_inputs(red) != 2 or len(body) != 2 or body[0].name not in _MAX or set(body[0].operands) != {block.arguments[0], block.arguments[-1]}:
        return None
    src, pad = red.operands[0], None
    if not isinstance(src.owner, ir.Block) and src.owner.name == "tensor.pad":
        pad, src = src.owner, src.owner.operands[0]
    deq = None if isinstance(src.owner, ir.Block) else src.owner
    users = [u.owner for u in red.results[0].uses]
    if deq not in generics or len(users) != 1 or users[0] not in generics or not _fills_with(red, -np.inf) or \
            (pad is not None and not _pads_with(pad, -np.inf)):
        return None
    quant = users[0]
    if not all(_elementwise_of_one(g) for g in (deq, quant)) or _element(deq.operands[0]) != "i8" or \
            _element(quant.results[0]) != "i8":
        return None
    levels = np.arange(-128, 128, dtype=np.int64)
    try:
        values = np.asarray(_chain(deq, host)(levels), np.float32)
        back = np.asarray(_chain(quant, host)(np.append(values, np.float32(-np.inf))), np.int64)
    except NotExact:  # a body the chain does not evaluate: not this form
        return None
    read = _extents_read(red)
    if not (np.all(np.diff(values) > 0) and np.array_equal(back[:-1], levels) and back[-1] == -128) or read is None:
        return None
    return quant, _function_text(red, pad, read, deq.operands[0].type, quant.results[0].type), deq.operands[0]


def summary() -> RequantSummary:
    """An int8 max pooling is exact: no value differs."""
    return RequantSummary("int8 max pooling", [0], [1])


def _element(v: ir.Value) -> str:
    return str(ir.RankedTensorType(v.type).element_type)


def _chain(op: ir.Operation, host) -> Chain:
    body = region_ops(op)
    return Chain(body[:-1], body[-1].operands[0], op.regions[0].blocks[0].arguments[0], host)


def _elementwise_of_one(op: ir.Operation) -> bool:
    maps = indexing_maps(op)
    return n_inputs(op) == 1 and len(op.results) == 1 and set(iterator_types(op)) == {"parallel"} and \
        maps[0] == maps[1]


def _fills_with(red: ir.Operation, value: float) -> bool:
    """Whether `red` starts from `value`: a linalg.fill, or the generic it generalizes to."""
    init = None if isinstance(red.operands[n_inputs(red)].owner, ir.Block) else red.operands[n_inputs(red)].owner
    if init is None or init.name not in ("linalg.fill", "linalg.generic") or n_inputs(init) != 1:
        return False
    if init.name == "linalg.generic" and [o.name for o in region_ops(init)] != ["linalg.yield"]:
        return False
    return _is_scalar(constant_of(init.operands[0]), value)


def _pads_with(pad: ir.Operation, value: float) -> bool:
    return _is_scalar(constant_of(region_ops(pad)[-1].operands[0]), value)


def _is_scalar(c: np.ndarray | None, value: float) -> bool:
    return c is not None and c.size == 1 and float(c.reshape(-1)[0]) == value


def _extents_read(red: ir.Operation) -> list[int] | None:
    """Per dim of `red`'s input: one past the largest index its map reads, for sums of loop
    dims times non-negative constants (each term largest at its loop's last value); else None."""
    ranges = loop_ranges(red)
    out = []
    for e in indexing_maps(red)[0].results:
        terms = linear_terms(e)
        if terms is None or any(c < 0 for _, c in terms):
            return None
        out.append(sum((ranges[d] - 1) * c for d, c in terms) + 1)
    return out


def _function_text(red: ir.Operation, pad: ir.Operation | None, read: list[int], x_type: ir.Type,
                   out_type: ir.Type) -> str:
    """@f(%x) -> the max pooling `red` of `x` (padded as `pad`, with -128, up to the extents
    `read`) in int8."""
    x, out = str(x_type), str(out_type)
    window = red.operands[1]
    maps = ", ".join(str(ir.AffineMapAttr.get(m)) for m in indexing_maps(red))
    iterators = ", ".join(f'"{t}"' for t in iterator_types(red))
    src, padded = "%x", x
    lines = ["  %lowest = arith.constant -128 : i8"]
    if pad is not None:
        low, high = (list(ir.DenseI64ArrayAttr(pad.attributes[k])) for k in ("static_low", "static_high"))
        # Only the padding the windows read: ceil mode pads the high end by more than that
        # (the NPU's pool takes its output size from its padded input).
        high = [min(h, max(0, r - d - lo)) for h, r, d, lo in zip(high, read, static_shape(x_type), low)]
        padded = f"tensor<{'x'.join(str(d + lo + h) for d, lo, h in zip(static_shape(x_type), low, high))}xi8>"
        n = len(low)
        lines += [f"  %p = tensor.pad %x low{low} high{high} {{",
                  f"  ^bb0({', '.join(f'%i{k}: index' for k in range(n))}):",
                  "    %pad = arith.constant -128 : i8",  # in the region: inlining remaps top-level operands only
                  "    tensor.yield %pad : i8",
                  f"  }} : {x} to {padded}"]
        src = "%p"
    lines += [f"  %w = tensor.empty() : {window.type}",
              f"  %e = tensor.empty() : {out}",
              f"  %init = linalg.fill ins(%lowest : i8) outs(%e : {out}) -> {out}",
              f"  %r = linalg.generic {{indexing_maps = [{maps}], iterator_types = [{iterators}]}}",
              f"      ins({src}, %w : {padded}, {window.type}) outs(%init : {out}) {{",
              f"  ^bb0(%a: i8, %b: {_element(window)}, %o: i8):",
              "    %m = arith.maxsi %o, %a : i8",
              "    linalg.yield %m : i8",
              f"  }} -> {out}",
              f"  return %r : {out}"]
    return f"func.func @f(%x: {x}) -> {out} {{\n" + "\n".join(lines) + "\n}\n"
