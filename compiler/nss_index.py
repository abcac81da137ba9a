"""Index values of a tile loop nest, evaluated at compile time: torq-build-nss-program
executes the loops (static bounds) and needs each slice offset and loop bound as an
integer."""

from __future__ import annotations

from iree.compiler import ir

from .ir_utils import CompileError

_BINARY = {"arith.addi": lambda a, b: a + b, "arith.subi": lambda a, b: a - b, "arith.muli": lambda a, b: a * b}


def index_value(v: ir.Value, env: dict) -> int:
    """The integer `v` holds, from the loop variables bound in `env` (which caches it):
    constants, affine.apply / min / max and index add, sub, mul."""
    if v in env:
        return env[v]
    op = v.owner
    if isinstance(op, ir.Block):
        raise CompileError(f"unbound index value {v.get_name()}")
    name = op.name
    args = [index_value(x, env) for x in op.operands]
    if name == "arith.constant":
        r = ir.IntegerAttr(op.attributes["value"]).value
    elif name in ("affine.apply", "affine.min", "affine.max"):
        m = ir.AffineMapAttr(op.attributes["map"]).value
        vals = [_eval_affine(e, args, m.n_dims) for e in m.results]
        r = vals[0] if name == "affine.apply" else (min(vals) if name == "affine.min" else max(vals))
    elif name in _BINARY:
        r = _BINARY[name](*args)
    else:
        raise CompileError(f"cannot evaluate index op {name} at compile time")
    env[v] = r
    return r


def _eval_affine(e: ir.AffineExpr, args: list[int], n_dims: int) -> int:
    if isinstance(e, ir.AffineDimExpr):
        return args[e.position]
    if isinstance(e, ir.AffineSymbolExpr):
        return args[n_dims + e.position]
    if isinstance(e, ir.AffineConstantExpr):
        return e.value
    a, b = _eval_affine(e.lhs, args, n_dims), _eval_affine(e.rhs, args, n_dims)
    if isinstance(e, ir.AffineAddExpr):
        return a + b
    if isinstance(e, ir.AffineMulExpr):
        return a * b
    if isinstance(e, ir.AffineModExpr):
        return a % b
    if isinstance(e, ir.AffineFloorDivExpr):
        return a // b
    if isinstance(e, ir.AffineCeilDivExpr):
        return -(-a // b)
    raise CompileError(f"unsupported affine expression {e}")
