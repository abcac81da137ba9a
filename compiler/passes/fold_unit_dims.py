"""torq-fold-unit-dims: a contraction over unit dims no pattern reads, without them.

Contract: takes Torq dispatch functions. IREE leaves unit dims in some
contractions: an attention matmul at batch 1 may run over more batch dims than
the matmul pattern has letters for (two, `MATMUL_ROLE_LETTERS`), one of extent
1 (loops 1x2x4x8x16x8). A function with a mul-add generic that no contraction
pattern classifies is rewritten, on a copy, by upstream
`linalg-fold-unit-extent-dims` (every generic loses its unit loop dims). The
copy is kept only when what that leaves outside the generics is a DDR view:
- a `tensor.collapse_shape` of an argument that only drops unit dims becomes
  a rank-reducing `tensor.extract_slice` of the whole argument (the builder's
  rank-reducing box);
- a `tensor.expand_shape` of a returned value that only adds unit dims is
  dropped: the function returns the value, its result type without those
  dims (the target reshapes the call's result back: `flow.tensor.reshape`,
  which moves no data);
and when every mul-add generic then classifies. Otherwise the function is
left as it was, and the support check names the generic's loops.
"""

from __future__ import annotations

from iree.compiler import ir

from ..ir_utils import (
    functions,
    iterator_types,
    n_inputs,
    region_ops,
    replace_function,
    static_shape,
    static_slice,
    sync_function_type,
    walk_ops,
)
from ..pass_managers import run_pipeline
from ..patterns import classify_contraction
from ..patterns.contraction import is_mul_add_body
from . import PassOptions

NAME = "torq-fold-unit-dims"
_UPSTREAM = "builtin.module(linalg-fold-unit-extent-dims,canonicalize,cse)"


def _unclassified_contraction(op: ir.Operation) -> bool:
    """A two-input generic with a reduction and a mul-add body no contraction pattern reads."""
    return op.name == "linalg.generic" and n_inputs(op) == 2 and "reduction" in iterator_types(op) and \
        is_mul_add_body(op) and classify_contraction(op) is None


def _only_unit_dims(small: ir.Type, large: ir.Type) -> bool:
    """Whether `large` is `small` with unit dims inserted."""
    a, b = static_shape(small), static_shape(large)
    return a is not None and b is not None and [d for d in b if d != 1] == [d for d in a if d != 1] \
        and len(b) >= len(a)


def _full_slice(op: ir.Operation) -> None:
    """`tensor.collapse_shape` of an argument dropping unit dims -> a rank-reducing full box."""
    source, result = op.operands[0], op.results[0]
    shape = list(static_shape(source.type))
    with ir.InsertionPoint(op), op.location:
        view = static_slice(source, [0] * len(shape), shape, result.type)
    result.replace_all_uses_with(view)
    op.erase()


def _as_views(func: ir.Operation) -> bool:
    """Rewrites the reshapes the upstream pass left into views (module docstring); False when
    some reshape is no such view."""
    ret = region_ops(func)[-1]
    for op in region_ops(func):
        src = op.operands[0] if op.operands else None
        if op.name == "tensor.collapse_shape" and isinstance(src.owner, ir.Block) and \
                _only_unit_dims(op.results[0].type, src.type):
            _full_slice(op)
        elif op.name == "tensor.expand_shape" and all(u.owner == ret for u in op.results[0].uses) and \
                _only_unit_dims(src.type, op.results[0].type):
            op.results[0].replace_all_uses_with(src)
            op.erase()
        elif op.name in ("tensor.collapse_shape", "tensor.expand_shape"):
            return False
    sync_function_type(func)
    return True


def fold_function(func: ir.Operation) -> ir.Operation:
    """`func` without the unit dims (a new function in its place), or `func` itself."""
    if not any(_unclassified_contraction(o) for o in walk_ops(func)):
        return func
    scratch = ir.Module.create()
    clone = func.clone(ip=ir.InsertionPoint(scratch.body))
    run_pipeline(_UPSTREAM, scratch.operation)
    if not _as_views(clone) or any(_unclassified_contraction(o) for o in walk_ops(clone)):
        return func
    return replace_function(func, clone)


def run(module: ir.Module, options: PassOptions) -> None:
    for func in functions(module):
        fold_function(func)
