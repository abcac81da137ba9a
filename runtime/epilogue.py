"""The epilogue of a compute: its steps evaluated elementwise on the principal
result and the operands (contract/program.py `Epilogue`), float steps in f32
with bf16 tables for the transcendental functions, integer steps exact and
wrapped to their width, lookups in the program's activation tables.

Contract (values in the compute domain of runtime/kernels.py):
- `eval_epilogue` runs the epilogue steps elementwise. Integer values stay
  int64 (add/sub/mul/neg/max/min/select exact; `div` is floor division, as
  an arithmetic shift right; division by zero is an error); as soon as a float
  is involved the step is float32. A `const` with an integral value is an
  integer. `cast` to bf16/f16/f32 rounds to nearest even; to i8/i16/i32 it
  rounds half to even (floats) and saturates. `round` rounds a float to the
  nearest integer (ties to even) in f32 and leaves an integer as it is.
- Integer steps that name a width in `to` (add/sub/mul/max/min/neg, shl,
  shr_s, shr_u, trunc, zext; see contract/program.py) compute exactly in int64 and
  wrap to that width, so requantization chains are bit-exact with the MLIR
  arith ops they come from. A shift by a negative amount or by the width or
  more is undefined in MLIR and an error here.
- Table steps (`TABLE_OPS`: exp, log, tanh, erf, rsqrt, sqrt) are
  lookups in a table over all 65536 bf16 bit patterns (`table`): the f32
  argument is rounded to bf16, the entry is the bf16 nearest to the function
  of that number (evaluated in double precision). Integer arguments are an
  error.
- Speed never changes a result: `eval_epilogue` writes float steps into
  intermediates no later step reads (the same ufunc), and returns a value
  that already has the result's shape as it is (not a broadcast view of it).
Errors are `KernelError` (a ValueError); the simulator adds the command index.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import ml_dtypes
import numpy as np

from torq.contract.program import EPILOGUE_INT_TYPES, INT_DTYPES, LUT, TABLE_OPS, Epilogue, Ref

from .kernels import NP_DTYPES, KernelError, int_limits, is_integer, to_domain


def _is_int(a: Any) -> bool:
    return is_integer(a.dtype if isinstance(a, np.ndarray) else np.asarray(a).dtype)


def _common(*xs: np.ndarray) -> tuple[np.ndarray, ...]:
    if all(_is_int(x) for x in xs):
        return tuple(np.asarray(x, dtype=np.int64) for x in xs)
    return tuple(np.asarray(x, dtype=np.float32) for x in xs)


def broadcast_operand(a: np.ndarray, axes: tuple[int, ...], shape: tuple[int, ...]) -> np.ndarray:
    """Places operand dim i along output dim axes[i] and broadcasts over the others."""
    if not axes:
        if a.ndim not in (0, len(shape)):
            raise KernelError(f"operand of shape {a.shape} needs axes to broadcast to {shape}")
        axes = tuple(range(a.ndim))
    order = sorted(range(a.ndim), key=lambda i: axes[i])
    view_shape = [1] * len(shape)
    for i in range(a.ndim):
        view_shape[axes[i]] = a.shape[i]
    b = a.transpose(order).reshape(view_shape)
    try:
        return np.broadcast_to(b, shape)
    except ValueError:
        raise KernelError(f"operand of shape {a.shape} with axes {axes} does not broadcast to {shape}") from None


def _cast(v: np.ndarray, to: str) -> np.ndarray:
    if to in INT_DTYPES:
        lo, hi = int_limits(to)
        if not _is_int(v):
            v = np.rint(v.astype(np.float64))
        return np.clip(v, lo, hi).astype(np.int64)
    return v.astype(np.float32).astype(NP_DTYPES[to]).astype(np.float32)


def _wrap(v: np.ndarray, bits: int) -> np.ndarray:
    """Two's-complement wrap of int64 values to `bits` (int64 wraps by itself)."""
    if bits >= 64:
        return v
    half = np.int64(1) << (bits - 1)
    return ((v + half) & ((np.int64(1) << bits) - 1)) - half


def _int_step(op: str, args: list[np.ndarray], bits: int) -> np.ndarray:
    """An integer step of fixed width: exact in int64, then wrapped."""
    xs = [np.asarray(a) for a in args]
    if not all(_is_int(x) for x in xs):
        raise KernelError(f"integer step {op} on a float value")
    xs = [x.astype(np.int64) for x in xs]
    if op == "trunc":
        return _wrap(xs[0], bits)
    if op == "zext":
        if bits >= 64:  # the unsigned value would not fit the int64 domain
            raise KernelError("zext from a 64-bit value")
        return xs[0] & np.int64((1 << bits) - 1)
    if op in ("shl", "shr_s", "shr_u"):
        a, b = xs
        if np.any((b < 0) | (b >= bits)):
            raise KernelError(f"{op} by an amount outside [0, {bits})")
        if op == "shl":
            return _wrap(a << b, bits)
        if op == "shr_s":
            return _wrap(a, bits) >> b
        unsigned = a.astype(np.uint64) & np.uint64((1 << bits) - 1 if bits < 64 else (1 << 64) - 1)
        return _wrap((unsigned >> b.astype(np.uint64)).astype(np.int64), bits)
    if op == "neg":
        return _wrap(-xs[0], bits)
    if op == "round":
        return _wrap(xs[0], bits)
    return _wrap(_step(op, xs, ""), bits)


# --------------------------------------------------------------------------
# Lookup tables of the transcendental steps

_TABLE_FNS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "exp": np.exp,
    "log": np.log,
    "tanh": np.tanh,
    "erf": np.vectorize(math.erf, otypes=[np.float64]),
    "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "sqrt": np.sqrt,
}
_TABLES: dict[str, np.ndarray] = {}


def round_to_bf16(y: np.ndarray) -> np.ndarray:
    """The bf16 nearest to each float64 `y` (ties to even), as float32.

    Rounds once, from double precision: a float64 -> float32 -> bf16 cast
    could round twice. Below the smallest normal the bf16 quantum is 2^-133
    (subnormals); magnitudes that round beyond the largest bf16 become inf.
    """
    y = np.asarray(y, dtype=np.float64)
    out = y.copy()  # nan, +-inf and 0 stay as they are
    finite = np.isfinite(y) & (y != 0)
    _, e = np.frexp(y[finite])  # y = m * 2^e with |m| in [0.5, 1): 8 significant bits
    q = np.maximum(e, -125) - 8  # the quantum 2^q; bf16 normals have e >= -125, below it stays 2^-133
    out[finite] = np.ldexp(np.rint(np.ldexp(y[finite], -q)), q)  # rint: ties to even
    with np.errstate(over="ignore"):
        return out.astype(np.float32).astype(ml_dtypes.bfloat16).astype(np.float32)


def table(fn: str) -> np.ndarray:
    """The lookup table of step `fn`: entry i is the value for the bf16 with bits i (float32)."""
    t = _TABLES.get(fn)
    if t is None:
        with np.errstate(all="ignore"):
            x = np.arange(1 << 16, dtype=np.uint16).view(ml_dtypes.bfloat16).astype(np.float64)
            t = round_to_bf16(_TABLE_FNS[fn](x))
        t.setflags(write=False)
        _TABLES[fn] = t
    return t


def table_lookup(fn: str, a: np.ndarray) -> np.ndarray:
    """Step `fn` on f32 values `a`: round to bf16 (the index), read the table."""
    if _is_int(a):
        raise KernelError(f"table step {fn} on an integer value")
    bits = np.asarray(a, dtype=np.float32).astype(ml_dtypes.bfloat16).view(np.uint16)
    return table(fn)[bits]


def lut_lookup(index: np.ndarray, entries: list[np.ndarray]) -> np.ndarray:
    """Step "lut": entry `index` of the table `entries` (integer constants)."""
    if not _is_int(index) or not all(_is_int(e) for e in entries):
        raise KernelError("lut step: the index and the entries must be integers")
    index = np.asarray(index, dtype=np.int64)
    if np.any((index < 0) | (index >= len(entries))):
        raise KernelError(f"lut step: index outside [0, {len(entries)})")
    return np.asarray(entries, dtype=np.int64).reshape(-1)[index]


def _step(op: str, args: list[np.ndarray], to: str) -> np.ndarray:
    if op == "cast":
        return _cast(args[0], to)
    if op == LUT:
        return lut_lookup(args[0], args[1:])
    if op in TABLE_OPS:
        if to:
            raise KernelError(f"table step {op} with integer width {to!r}")
        return table_lookup(op, args[0])
    if to:
        if to not in EPILOGUE_INT_TYPES:
            raise KernelError(f"integer step {op} with unknown width {to!r}")
        return _int_step(op, args, EPILOGUE_INT_TYPES[to])
    if op == "neg":
        return -_common(args[0])[0]
    if op == "round":
        return args[0] if _is_int(args[0]) else np.rint(np.asarray(args[0], dtype=np.float32))
    if op.startswith("select_"):
        a, b = _common(args[0], args[1])
        c, d = _common(args[2], args[3])
        cond = {"gt": a > b, "lt": a < b, "ge": a >= b, "le": a <= b}[op[len("select_"):]]
        return np.where(cond, c, d)
    a, b = _common(args[0], args[1])
    if op == "add":
        return a + b
    if op == "sub":
        return a - b
    if op == "mul":
        return a * b
    if op == "max":
        return np.maximum(a, b)
    if op == "min":
        return np.minimum(a, b)
    if op == "div":
        if _is_int(a):
            if np.any(b == 0):
                raise KernelError("integer division by zero in epilogue")
            return np.floor_divide(a, b)
        return a / b
    raise KernelError(f"unknown epilogue op {op!r}")


# Float steps the evaluator may write into a dead intermediate (same ufunc as `_step`).
_FLOAT_UFUNCS = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.true_divide,
                 "max": np.maximum, "min": np.minimum}


def _operand_view(a: np.ndarray, axes: tuple[int, ...], shape: tuple[int, ...]) -> np.ndarray:
    """`broadcast_operand` without the broadcast: a view that broadcasts against `shape`
    (numpy broadcasts each step; the values are the same)."""
    if not axes:
        if a.ndim not in (0, len(shape)):
            raise KernelError(f"operand of shape {a.shape} needs axes to broadcast to {shape}")
        axes = tuple(range(a.ndim))
    view_shape = [1] * len(shape)
    for i in range(a.ndim):
        view_shape[axes[i]] = a.shape[i]
    if any(v != 1 and v != n for v, n in zip(view_shape, shape)):
        raise KernelError(f"operand of shape {a.shape} with axes {axes} does not broadcast to {shape}")
    order = sorted(range(a.ndim), key=lambda i: axes[i])
    return a.transpose(order).reshape(view_shape)


def _broadcast_shape(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """np.broadcast_shapes(a, b) (slow per call) without its work in the common cases."""
    if a == b or not b:
        return a
    return b if not a else np.broadcast_shapes(a, b)


def _fits(value: Any, shape: tuple[int, ...]) -> bool:
    """True if `value` is an array of exactly `shape`: nothing to broadcast."""
    return isinstance(value, np.ndarray) and value.shape == tuple(shape)


def _last_uses(steps: list, base: int, result: int) -> dict[int, int]:
    """Value index -> the last step reading it; the stored result (`result`) as read after
    every step, so never overwritten."""
    last_use = {base + k: k for k in range(len(steps))}
    for k, st in enumerate(steps):
        for r in st.args:
            if r.kind == "value":
                last_use[r.index] = k
    last_use[result if result >= 0 else base + len(steps) + result] = len(steps)
    return last_use


def _reusable(args: list, k: int, values: list, owned: set[int], last_use: dict[int, int],
              out_shape: tuple[int, ...]) -> np.ndarray | None:
    """An f32 intermediate of `out_shape` made here that step k reads last: its buffer may
    take step k's result."""
    for r in args:
        if r.kind == "value" and r.index in owned and last_use.get(r.index) == k:
            v = values[r.index]
            if isinstance(v, np.ndarray) and v.shape == out_shape and v.dtype == np.float32:
                return v
    return None


def eval_epilogue(
    epilogue: Epilogue, principal: np.ndarray | None, operands: list[np.ndarray], shape: tuple[int, ...]
) -> np.ndarray:
    """Evaluates the epilogue over the result `shape`; returns the stored value (compute domain)."""
    steps = epilogue.steps
    if not steps and principal is not None and epilogue.result in (0, -1) and _fits(principal, shape):
        return principal  # no epilogue (most matmuls): the principal result as it is
    values: list[np.ndarray] = [] if principal is None else [principal]
    # Operands broadcast lazily (by each step) unless the result is empty, where a
    # check on the unbroadcast operand could see values the broadcast drops.
    lazy = math.prod(shape) > 0
    domain: dict[int, np.ndarray] = {}
    # Intermediates made here (not the principal, not operands) that no later step
    # reads may take the result of a float step in place: same ufunc, same values.
    last_use = _last_uses(steps, len(values), epilogue.result)
    owned: set[int] = set()

    def load(r: Ref) -> np.ndarray:
        if r.kind == "value":
            return values[r.index]
        if r.kind == "operand":
            a = domain.get(r.index)
            if a is None:
                a = domain[r.index] = to_domain(operands[r.index])
            return _operand_view(a, tuple(r.axes), shape) if lazy else broadcast_operand(a, tuple(r.axes), shape)
        c = float(r.const)
        return np.asarray(int(c), dtype=np.int64) if c.is_integer() else np.asarray(c, dtype=np.float32)

    with np.errstate(all="ignore"):  # float inf/nan behave as IEEE f32
        for k, s in enumerate(steps):
            try:
                args = [load(r) for r in s.args]
                ufunc = _FLOAT_UFUNCS.get(s.op) if not s.to else None
                if ufunc is not None and len(args) == 2 and not (_is_int(args[0]) and _is_int(args[1])):
                    a, b = np.asarray(args[0], dtype=np.float32), np.asarray(args[1], dtype=np.float32)
                    out = _reusable(s.args, k, values, owned, last_use, _broadcast_shape(a.shape, b.shape))
                    values.append(ufunc(a, b, out=out) if out is not None else ufunc(a, b))
                    owned.add(len(values) - 1)
                else:
                    values.append(_step(s.op, args, s.to))
                    if s.op.startswith("select_"):
                        owned.add(len(values) - 1)  # np.where: a new array
            except (IndexError, KeyError, OverflowError) as e:
                raise KernelError(f"epilogue step {k} ({s.op}): bad reference ({e})") from None
    if not values:
        raise KernelError("epilogue computes no value")
    out = values[epilogue.result]
    if _fits(out, shape):
        return out  # what np.broadcast_to would return a view of
    try:
        return np.broadcast_to(out, shape)
    except ValueError:
        raise KernelError(f"epilogue value of shape {np.shape(out)} does not fit the result shape {shape}") from None
