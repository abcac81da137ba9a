"""Index arithmetic of a generic's body simplified with the loop ranges (torq-unroll-index-dims).

IREE writes the indices of a dim it collapsed as quotient and remainder of the
loop index (`d2 / 8`, `d2 % 8` for a [2, 8] pair collapsed to 16), and the
index of a dim it re-split as their recombination (`d0 % 2 + (d0 / 2) * 2`).
Where the ranges decide them these fold: an index value is tracked as
`base + offset` (base a `linalg.index`, in [0, extent)); `x / c` is the
constant q and `x % c` is `x - q*c` when every value of x lies in
[q*c, (q+1)*c) (also after a split gave the index an offset: an
`affine.apply` of `d0 + k`), and `x % c + (x / c) * c` is x for x >= 0. torch's
wrap of a negative index, `x < 0 ? x + n : x`, is x when x cannot be negative
(built from loop indices by +, * and quotients / remainders by positive constants).
"""

from __future__ import annotations

from iree.compiler import ir

from .ir_utils import constant_of, erase_unused, loop_ranges, region_ops


def _offset(m: ir.AffineMap) -> int | None:
    """k for a one-result map `x + k` (or `x`) of its single dim or symbol: the offset a split
    gives a piece's index."""
    if len(m.results) != 1 or m.n_dims + m.n_symbols != 1:
        return None
    e = m.results[0]
    if isinstance(e, (ir.AffineDimExpr, ir.AffineSymbolExpr)):
        return 0
    if isinstance(e, ir.AffineAddExpr):
        add = ir.AffineAddExpr(e)
        for x, k in ((add.lhs, add.rhs), (add.rhs, add.lhs)):
            if isinstance(x, (ir.AffineDimExpr, ir.AffineSymbolExpr)) and isinstance(k, ir.AffineConstantExpr):
                return ir.AffineConstantExpr(k).value
    return None


def _form(v: ir.Value, memo: dict) -> tuple[ir.Value | None, int] | None:
    """(base, offset) of index value `v`: base a `linalg.index` value (None for a constant),
    through constants, `affine.apply` of `x + k` and `arith.addi` of a constant."""
    if v in memo:
        return memo[v]
    owner = v.owner
    found = None
    if isinstance(owner, ir.Block):
        return None
    if owner.name == "linalg.index":
        found = (v, 0)
    elif owner.name == "arith.constant" and str(v.type) == "index":
        found = (None, int(constant_of(v)))
    elif owner.name == "affine.apply" and len(owner.operands) == 1:
        k = _offset(ir.AffineMapAttr(owner.attributes["map"]).value)
        inner = _form(owner.operands[0], memo)
        if k is not None and inner is not None:
            found = (inner[0], inner[1] + k)
    elif owner.name == "arith.addi":
        a, b = _form(owner.operands[0], memo), _form(owner.operands[1], memo)
        if a is not None and b is not None and (a[0] is None or b[0] is None):
            found = (a[0] if a[0] is not None else b[0], a[1] + b[1])
    memo[v] = found
    return found


def index_plus_constant(v: ir.Value) -> tuple[ir.Operation | None, int]:
    """(the `linalg.index` op, k) when `v` is a loop index plus a constant (`_form`), else
    (None, 0)."""
    f = _form(v, {})
    return (f[0].owner, f[1]) if f is not None and f[0] is not None else (None, 0)


class _Linear:
    """Index values of one body as base + offset (`_form`), with the bases' ranges."""

    def __init__(self, op: ir.Operation):
        self.ranges = loop_ranges(op)
        self.forms: dict = {}

    def form(self, v: ir.Value) -> tuple[ir.Value | None, int] | None:
        return _form(v, self.forms)

    def bounds(self, f: tuple[ir.Value | None, int]) -> tuple[int, int]:
        base, off = f
        if base is None:
            return off, off
        return off, off + self.ranges[ir.IntegerAttr(base.owner.attributes["dim"]).value] - 1


def _constant(value: int, before: ir.Operation) -> ir.Value:
    with ir.InsertionPoint(before), before.location:
        return ir.Operation.create("arith.constant", results=[ir.IndexType.get()],
                                   attributes={"value": ir.IntegerAttr.get(ir.IndexType.get(), value)}).results[0]


def _quotient_fold(op: ir.Operation, lin: _Linear) -> ir.Value | None:
    """The value of a divsi / remsi by a positive constant whose numerator stays in one quotient."""
    f, c = lin.form(op.operands[0]), constant_of(op.operands[1])
    if f is None or c is None or int(c) <= 0:
        return None
    c = int(c)
    lo, hi = lin.bounds(f)
    if lo < 0 or lo // c != hi // c:
        return None
    q = lo // c
    if op.name == "arith.divsi":
        return _constant(q, op)
    base, off = f
    rest = off - q * c
    if base is None:
        return _constant(rest, op)
    if rest == 0:
        return base
    with ir.InsertionPoint(op), op.location:
        return ir.Operation.create("arith.addi", results=[base.type], operands=[base, _constant(rest, op)]).results[0]


def _recombined(op: ir.Operation) -> ir.Value | None:
    """x for `x % c + (x / c) * c` (either order) with x >= 0; `x % (c k)` for
    `x % c + ((x / c) % k) * c` with x >= 0 (Falcon's column of a head, d % 16, written
    from the two halves of its 8 columns)."""
    for rem, prod in (op.operands, reversed(list(op.operands))):
        if isinstance(rem.owner, ir.Block) or isinstance(prod.owner, ir.Block):
            continue
        if rem.owner.name != "arith.remsi" or prod.owner.name != "arith.muli":
            continue
        x, c = rem.owner.operands[0], constant_of(rem.owner.operands[1])
        if c is None or not _non_negative(x):
            continue
        for quotient, k in (prod.owner.operands, reversed(list(prod.owner.operands))):
            if constant_of(k) != c or isinstance(quotient.owner, ir.Block):
                continue
            wrapped = quotient.owner.name == "arith.remsi" and constant_of(quotient.owner.operands[1]) is not None
            div = quotient.owner.operands[0].owner if wrapped else quotient.owner
            if isinstance(div, ir.Block) or div.name != "arith.divsi" or div.operands[0] != x or \
                    constant_of(div.operands[1]) != c:
                continue
            if not wrapped:
                return x
            with ir.InsertionPoint(op), op.location:
                modulus = _constant(int(c) * int(constant_of(quotient.owner.operands[1])), op)
                return ir.Operation.create("arith.remsi", results=[x.type], operands=[x, modulus]).results[0]
    return None


def _non_negative(v: ir.Value) -> bool:
    """Whether index (or index_cast) value `v` is >= 0 on every loop index: built from loop
    indices and non-negative constants by +, * and quotients / remainders by positive ones."""
    f = _form(v, {})
    if f is not None:
        return f[1] >= 0  # a loop index (>= 0) or nothing, plus a constant
    owner = v.owner
    if isinstance(owner, ir.Block):
        return False
    if owner.name == "arith.constant":
        c = constant_of(v)
        return c is not None and c.size == 1 and int(c) >= 0
    if owner.name in ("arith.divsi", "arith.remsi"):
        c = constant_of(owner.operands[1])
        return c is not None and c.size == 1 and int(c) > 0 and _non_negative(owner.operands[0])
    if owner.name in ("arith.addi", "arith.muli"):
        return all(_non_negative(x) for x in owner.operands)
    if owner.name == "arith.index_cast":
        return _non_negative(owner.operands[0])
    return False


def _wrap_fold(op: ir.Operation) -> ir.Value | None:
    """x for `x < 0 ? x + n : x` (torch's wrap of a negative index) when x >= 0."""
    cond, _, otherwise = op.operands
    cmp = cond.owner
    if isinstance(cmp, ir.Block) or cmp.name != "arith.cmpi" or ir.IntegerAttr(cmp.attributes["predicate"]).value != 2:
        return None  # 2: slt
    zero = constant_of(cmp.operands[1])
    if cmp.operands[0] != otherwise or zero is None or zero.size != 1 or int(zero) != 0:
        return None
    return otherwise if _non_negative(otherwise) else None


def simplify_indices(op: ir.Operation) -> bool:
    """Applies the module docstring's folds to `op`'s body; True if any."""
    lin, changed = _Linear(op), False
    for o in region_ops(op):
        if o.name in ("arith.divsi", "arith.remsi"):
            new = _quotient_fold(o, lin)
        elif o.name == "arith.addi":
            new = _recombined(o)
        elif o.name == "arith.select" and str(o.results[0].type) in ("index", "i64", "i32"):
            new = _wrap_fold(o)
        elif o.name == "arith.index_cast" and not isinstance(o.operands[0].owner, ir.Block) and \
                o.operands[0].owner.name == "arith.index_cast" and \
                o.operands[0].owner.operands[0].type == o.results[0].type:
            new = o.operands[0].owner.operands[0]  # a round trip through i64 (the wrap's)
        else:
            continue
        if new is not None:
            o.results[0].replace_all_uses_with(new)
            changed = True
    if changed:
        # A dead `d0 % 2` would still count as a computed use of d0.
        erase_unused(lambda: region_ops(op), _PURE_INDEX_OPS)
    return changed


_PURE_INDEX_OPS = ("arith.divsi", "arith.remsi", "arith.muli", "arith.addi", "arith.subi", "affine.apply",
                   "linalg.index", "arith.select", "arith.cmpi", "arith.index_cast")
