"""The f32 requantization chain of a linalg body, evaluated exactly as IREE llvm-cpu does.

`Chain` reads the body ops once and evaluates them on numpy arrays of
accumulator values: every f32 op correctly rounded, `sitofp` to nearest even,
`divf` a true division, and a single-use `mulf` feeding an `addf`/`subf`
fused into one FMA when the host has FMA (`HostFloat`, read from the
module's llvm-cpu target), as llvm-cpu contracts them. With `check` it also
tracks whether each value is monotone in the accumulator (compiler/requant.py's
exactness argument, points 1 and 2; per row of ranges, compiler/f32_bounds.py)
and raises NotExact on anything it cannot evaluate faithfully.
"""

from __future__ import annotations

import contextlib
import copy
import re
from dataclasses import dataclass

import numpy as np
from iree.compiler import ir

from .f32_bounds import Val as _Val
from .f32_bounds import combine as _combine
from .f32_bounds import div_dir as _div_dir
from .f32_bounds import enclose, enclose_fma, equal_ends_constant
from .f32_bounds import mul_dir as _mul_dir
from .f32_bounds import neg as _neg
from .f32_bounds import sign as _sign
from .ir_utils import constant_of
from .rescale_fit import NotExact, NotMonotone

INT_RANGE = {"i1": (0, 1), "i8": (-128, 127), "i16": (-(1 << 15), (1 << 15) - 1), "i32": (-(1 << 31), (1 << 31) - 1),
             "i64": (-(1 << 63), (1 << 63) - 1)}


def order_key(v: np.ndarray) -> np.ndarray:
    """f32 values as integers in the same order (-0 and +0 one key): bisection on f32 values."""
    bits = np.asarray(v, np.float32).view(np.int32).astype(np.int64)
    return np.where(bits >= 0, bits, -(bits & 0x7FFFFFFF))


def from_order_key(k: np.ndarray) -> np.ndarray:
    """The f32 values of `order_key`s."""
    k = np.asarray(k, np.int64)
    return np.where(k >= 0, k, (-k) | 0x80000000).astype(np.uint32).view(np.float32)


# --- host float semantics -------------------------------------------------------

@dataclass(frozen=True)
class HostFloat:
    """How the host (IREE llvm-cpu) evaluates f32 bodies: whether it fuses mul + add."""
    fma: bool


def host_float_semantics(module_op: ir.Operation) -> HostFloat | None:
    """The f32 semantics of the module's llvm-cpu target, or None when unknown.

    x86-64 fuses a single-use fmul into its fadd when the CPU has FMA
    ("+fma" in cpu_features); AArch64 always has it. Other targets: unknown.
    """
    targets = []
    for op in module_op.regions[0].blocks[0].operations:
        op = op.operation
        if op.name == "util.global" and "initial_value" in op.attributes:
            init = op.attributes["initial_value"]
            if isinstance(init, (ir.DenseElementsAttr, ir.DenseResourceElementsAttr)):
                continue  # a tensor (e.g. a weight): printing it could take long and finds no target
            s = str(init)
            if s.startswith("#hal.device.target"):
                targets += re.findall(r'#hal\.executable\.target<"llvm-cpu".*?target_triple = "([^"]*)"', s)
                features = re.findall(r'cpu_features = "([^"]*)"', s)
    if len(targets) != 1:
        return None
    triple = targets[0]
    if triple.startswith("x86_64"):
        return HostFloat(fma="+fma" in (features[0].split(",") if features else []))
    if triple.startswith(("aarch64", "arm64")):
        return HostFloat(fma=True)
    return None


# --- exact f32 evaluation ---------------------------------------------------------

def fma_f32(x: np.ndarray, y: np.ndarray, z: np.ndarray) -> np.ndarray:
    """x * y + z rounded once to f32 (nearest even), for f32 x, y, z.

    x * y is exact in f64 (48 significant bits); TwoSum gives the f64 sum s
    and its exact error e. Rounding s to f32 is the correctly rounded result
    unless s is exactly halfway between two f32 numbers (then e decides): for
    an s in f32's normal range, when the 29 bits f32 drops are 1 followed by
    zeros; elsewhere (f32 subnormals, overflow) compared with both neighbours.
    """
    s = np.multiply(x, y, dtype=np.float64)  # exact: 24 + 24 significant bits
    if isinstance(s, np.ndarray) and s.shape == np.broadcast_shapes(s.shape, np.shape(z)):
        np.add(s, z, out=s)  # (x y is recomputed where it is needed: few values)
    else:
        s = np.add(s, z, dtype=np.float64)
    r = s.astype(np.float32)
    suspect = (np.ascontiguousarray(s).view(np.uint64) & np.uint64((1 << 29) - 1)) == np.uint64(1 << 28)
    # s outside f32's normal range has |r| <= the least normal, or >= the largest f32 (f32
    # rounding is monotone): tested on r, in f32, and elementwise only when some r is there.
    size = np.abs(r)
    if not (np.size(size) and size.min() > _F32_NORMAL32 and size.max() < _F32_MAX32):
        suspect = suspect | ~((size > _F32_NORMAL32) & (size < _F32_MAX32))
    if not np.any(suspect):
        return r
    # TwoSum's error only where it can matter (a few of millions: several passes saved on the rest).
    r = np.atleast_1d(r)  # (r is this call's own array: corrected in place)
    idx = np.unravel_index(np.flatnonzero(np.broadcast_to(suspect, r.shape)), r.shape)
    xc, yc, zc = (np.broadcast_to(np.asarray(v), r.shape)[idx].astype(np.float64) for v in (x, y, z))
    rc, pc, sc = r[idx], xc * yc, np.broadcast_to(s, r.shape)[idx]
    bb = sc - pc
    ec = (pc - (sc - bb)) + (zc - bb)
    other = np.where(rc.astype(np.float64) < sc, np.nextafter(rc, np.float32(np.inf)),
                     np.nextafter(rc, np.float32(-np.inf)))
    tie = (ec != 0) & (np.abs(rc.astype(np.float64) - sc) == np.abs(other.astype(np.float64) - sc))
    r[idx] = np.where(tie, np.where(ec > 0, np.maximum(rc, other), np.minimum(rc, other)), rc)
    return r.reshape(np.shape(s))


_F32_NORMAL = float(np.finfo(np.float32).tiny)
_F32_MAX = float(np.finfo(np.float32).max)
_F32_NORMAL32, _F32_MAX32 = np.float32(_F32_NORMAL), np.float32(_F32_MAX)


def _erf(x):
    """scipy's vectorised f64 erf: 30x math.erf under np.vectorize (a GELU chain evaluates it on
    every accumulator value of every channel); the two differ by a few f64 ulps, and on 5M
    sampled f32 inputs in [-6, 6] not once after rounding to f32. Imported at first use: a
    compile without a GELU chain does not pay for scipy.special."""
    from scipy.special import erf

    return erf(x)


_FLOAT_BIN = {"arith.addf": np.add, "arith.subf": np.subtract, "arith.mulf": np.multiply,
              "arith.divf": np.divide}
_MAXMIN = {"arith.maxnumf": np.fmax, "arith.minnumf": np.fmin, "arith.maximumf": np.maximum,
           "arith.minimumf": np.minimum, "arith.maxsi": np.maximum, "arith.minsi": np.minimum}
# Transcendental functions, evaluated in f64 and rounded once to f32 (correctly rounded but
# for double rounding, which cannot move a value by more than an ulp); llvm-cpu evaluates
# them with polynomial approximations a few ulps off that, so a caller that must match it
# evaluates the chain again with their results moved by `Chain.ulps`. Direction: +1 / -1.
_TRANSCENDENTAL = {"math.exp": (np.exp, 1), "math.tanh": (np.tanh, 1), "math.log": (np.log, 1),
                   "math.sqrt": (np.sqrt, 1), "math.rsqrt": (lambda x: 1.0 / np.sqrt(x), -1),
                   "math.erf": (_erf, 1)}
_ROUND = {"math.roundeven": np.rint, "math.floor": np.floor, "math.ceil": np.ceil, "math.trunc": np.trunc}
_CMPF = ["false", "oeq", "ogt", "oge", "olt", "ole", "one", "ord", "ueq", "ugt", "uge", "ult", "ule",
         "une", "uno", "true"]
_CMPI = ["eq", "ne", "slt", "sle", "sgt", "sge", "ult", "ule", "ugt", "uge"]


EITHER_FMA = "llvm-cpu may fuse either product of this sum into an FMA"


def type_name(t) -> str:
    s = t if isinstance(t, str) else str(t)
    if s == "f32" or s in INT_RANGE:
        return s
    raise NotExact(f"the chain computes in {s}")


class _ChainValue:
    """An SSA value of the chain, read from the IR once (evaluation runs per channel and per
    bisection step: reading types, users and constants from the bindings each time was most
    of a QDQ model's compile)."""
    __slots__ = ("type", "owner", "n_uses", "const", "value")

    def __init__(self, v: ir.Value, owner: "_ChainOp | None"):
        self.type, self.owner, self.n_uses, self.value = str(v.type), owner, len(list(v.uses)), v
        self.const = constant_of(v) if owner is None or owner.name == "arith.constant" else None

    @property
    def label(self) -> str:  # for messages only: get_name() numbers the whole module
        return self.value.get_name()


class _ChainOp:
    __slots__ = ("name", "operands", "results", "predicate")

    def __init__(self, op: ir.Operation, values: dict):
        self.name = op.name
        self.predicate = ir.IntegerAttr(op.attributes["predicate"]).value if "predicate" in op.attributes else None
        self.operands = [_chain_value(v, values) for v in op.operands]
        self.results = []
        for r in op.results:
            values[r] = _ChainValue(r, self)
            self.results.append(values[r])


def _chain_value(v: ir.Value, values: dict) -> _ChainValue:
    if v not in values:  # a block argument or a value defined outside the chain
        values[v] = _ChainValue(v, None)
    return values[v]


class Chain:
    """The body of a requantization generic, as a function of the accumulator.

    `ops` are the body ops up to and including `result_op` (whose first
    result is the value computed); `acc` is the block argument of the
    accumulator; `scalars` maps each other block argument to its value for
    the channel being evaluated (set with `for_channel`).
    """

    def __init__(self, ops: list[ir.Operation], result: ir.Value, acc: ir.Value, host: HostFloat,
                 extra: tuple = (), fma_pick: int | None = None, fuse_shared: bool | None = None):
        self.values: dict = {}
        self.acc = _chain_value(acc, self.values)
        # Further variable inputs (a residual's int8 value), given to `evaluate` as arrays.
        self.extra = [_chain_value(v, self.values) for v in extra]
        # A sum of two single-use products: which one llvm-cpu fuses into an FMA (operand
        # order), when the caller evaluates both choices; None refuses such a sum.
        self.fma_pick = fma_pick
        # A product with several users feeding a sum: whether llvm-cpu fuses it (True) or not
        # (False), when the caller evaluates both choices; None refuses such a sum.
        self.fuse_shared = fuse_shared
        # Transcendental results moved by this many f32 ulps (see _TRANSCENDENTAL).
        self.ulps = 0
        # An f32 `acc` standing for an integer sum S times a constant (a pooled sum of
        # dequantized int8 values): the chain is evaluated on fl32(S * acc_scale).
        self.acc_scale: float | None = None
        self.ops = [_ChainOp(op, self.values) for op in ops]
        self.result, self.host = self.values[result], host
        self.args: dict = {}
        uses: dict = {}
        for op in self.ops:
            for v in op.operands:
                uses[v] = uses.get(v, 0) + 1
        self.uses = uses

    def for_channel(self, args: dict) -> "Chain":
        """The chain with block argument values `args` ({ir.Value: scalar})."""
        c = copy.copy(self)
        c.args = {self.values[k]: v for k, v in args.items() if k in self.values}
        return c

    def for_channels(self, args: list[dict]) -> "Chain":
        """The chain evaluated for several channels at once: `args` per channel as in
        `for_channel`; the accumulators given to it are (channels, points) arrays. Only values
        (not directions) are meaningful for such a chain."""
        keys = args[0].keys() if args else ()
        return self.for_channel({k: np.array([a[k] for a in args]) for k in keys})

    def channel_rows(self, rows: np.ndarray) -> "Chain":
        """The `for_channels` chain of channels `rows` (indices, repeats allowed) of this
        `for_channels` chain: its per-channel values indexed, not gathered again per channel."""
        c = copy.copy(self)
        c.args = {k: v[rows] if np.ndim(v) else v for k, v in self.args.items()}
        return c

    def __call__(self, a: np.ndarray, check: bool = False) -> np.ndarray:
        return self.evaluate(a, check).v

    def direction(self, lo: int, hi: int) -> int:
        """+1 / -1 / 0 if the chain is monotone on [lo, hi] (checked at both ends); raises NotExact."""
        r = self.evaluate(np.array([lo, hi], np.int64), check=True)
        if r.dir is None:
            raise NotMonotone("the chain is not monotone in the accumulator")
        return r.dir

    def directions(self, ends: np.ndarray) -> np.ndarray:
        """Per row of `ends` ((rows, 2) accumulator ranges, in one evaluation): +1 / -1 / 0
        when the chain is proven monotone or constant on it (constant also when its enclosure
        is one value: f32_bounds), 2 when unproven or where `direction` would raise NotExact."""
        ends = np.asarray(ends)
        try:
            run = self._run(ends, check=True, extra=(), constants=None, rows=True)
        except NotExact:  # the chain's form, not its values: no row is proven
            return np.full(len(ends), 2, np.int64)
        r = run.env[self.result]
        level = np.where(np.isnan(r.dir), np.where(r.lo == r.hi, 0, 2), r.dir) if r.lo is not None else \
            np.where(np.isnan(r.dir), 2, r.dir)
        return np.where(run.failed, 2, np.broadcast_to(level, run.failed.shape)).astype(np.int64)

    def sign_signatures(self, ends: np.ndarray) -> list[bytes | None]:
        """Per channel of a `for_channels` chain: a key such that channels with equal keys have
        equal `direction`s, or None for a channel to ask `direction` itself.

        A direction is derived from the signs of the values that do not depend on the
        accumulator and are a product's factor or a divisor; the key is the signs of all of
        them. A zero among them (a product by zero is constant) changes which signs matter, so
        such a channel gets None. The evaluation on `ends`, a (channels, 2) array
        of accumulator ranges, also checks every channel's range as `direction` does (raises
        NotExact without naming the channel)."""
        seen: list = []
        self.evaluate(ends, check=True, constants=seen)
        n = len(ends)
        cols = [np.full(n, np.sign(a.reshape(-1)[0])) if a.size == 1 else np.sign(a.reshape(n, -1)[:, 0])
                for a in (np.asarray(v, np.float64) for v in seen) if a.ndim == 0 or a.shape[-1] == 1]
        table = np.stack(cols, 1) if cols else np.ones((n, 0))
        regular = np.all(table != 0, 1) & ~np.isnan(table).any(1)
        return [row.tobytes() if ok else None for row, ok in zip(table, regular)]

    def with_fma_pick(self, pick: int, fuse_shared: bool | None = None) -> "Chain":
        c = copy.copy(self)
        c.fma_pick, c.fuse_shared = pick, fuse_shared
        return c

    @property
    def transcendental(self) -> bool:
        return any(op.name in _TRANSCENDENTAL for op in self.ops)

    def of_scaled_sum(self, scale: float) -> "Chain":
        """The chain as a function of the integer S its f32 input `acc` holds times `scale`."""
        c = copy.copy(self)
        c.acc_scale = float(scale)
        return c

    def with_ulps(self, ulps: int) -> "Chain":
        c = copy.copy(self)
        c.ulps = ulps
        return c

    def contraction_variants(self, a: np.ndarray, extra: tuple = (), check: bool = False) -> list[np.ndarray]:
        """The chain's values on `a` under every way llvm-cpu may contract its products into
        FMAs (one list entry when the chain leaves it no choice), the default choice first:
        a shared product not fused (LLVM fuses single-use products only), the first product
        of a sum of two."""
        try:
            return [self.evaluate(a, check, extra).v]
        except NotExact as e:
            if str(e) != EITHER_FMA:
                raise
        out = []
        for shared in (False, True):
            for pick in (0, 1):
                try:
                    out.append(self.with_fma_pick(pick, shared).evaluate(a, check, extra).v)
                except NotExact as e:
                    if str(e) != EITHER_FMA:
                        raise
        if not out:
            raise NotExact(EITHER_FMA)
        return out

    def evaluate(self, a: np.ndarray, check: bool = False, extra: tuple = (),
                 constants: list | None = None) -> _Val:
        """The chain's value on accumulators `a` (`extra`: the further variable inputs); with
        `check`, also its direction, and NotExact where llvm-cpu's result would be undefined
        (a NaN) or non-finite (an infinity in the result); `constants` collects the factors a
        direction depends on."""
        r = self._run(a, check, extra, constants, rows=False).env[self.result]
        if np.ndim(r.dir) or np.ndim(r.lo) or np.ndim(r.hi):
            return r
        scalar = lambda b: None if b is None or np.isnan(b) else float(b)  # noqa: E731
        return _Val(r.v, None if np.isnan(r.dir) else int(r.dir), r.t, scalar(r.lo), scalar(r.hi))

    def _run(self, a: np.ndarray, check: bool, extra: tuple, constants: list | None, rows: bool) -> "_Evaluation":
        run = _Evaluation(self, a, check, extra, constants, rows)
        with np.errstate(all="ignore") if rows else contextlib.nullcontext():
            for op in self.ops:
                run.step(op)
        return run


class _Evaluation:
    """One evaluation of a `Chain`: the values computed so far, op by op."""

    def __init__(self, chain: Chain, a: np.ndarray, check: bool, extra: tuple, constants: list | None,
                 rows: bool = False):
        self.chain, self.check, self.constants = chain, check, constants
        # Per row of `a` (its last axis the points of one range), whether a check failed there:
        # `refuse` marks the row instead of raising, and the others are still proven.
        self.failed = np.zeros(np.shape(a)[:-1], bool) if rows else None
        # Directions are tracked only with `check` (a value evaluation's are unknown: NaN).
        rising = 1.0 if check else _UNKNOWN
        if chain.acc_scale is None and type_name(chain.acc.type) == "f32":  # an f32 value as it is
            self.env: dict = {chain.acc: _Val(np.asarray(a, np.float32), rising, "f32")}
        elif chain.acc_scale is None:
            self.env = {chain.acc: _Val(np.asarray(a, np.int64), rising, type_name(chain.acc.type))}
        else:  # S * scale is exact in f64 (|S| < 2^29, a 24-bit scale), then rounded once
            self.env = {chain.acc: _Val((np.asarray(a, np.float64) * chain.acc_scale).astype(np.float32),
                                        rising * _sign(chain.acc_scale), "f32")}
        for v, x in zip(chain.extra, extra):
            self.env[v] = _Val(np.asarray(x, np.int64), _UNKNOWN, type_name(v.type))
        self.cmps: dict = {}  # comparison value -> (lhs, rhs, outcome, whether it is constant)

    def refuse(self, where: np.ndarray, message: str) -> None:
        """NotExact(message) if `where` (per point) holds anywhere; per row when evaluating rows."""
        if self.failed is None:
            if np.any(where):
                raise NotExact(message)
            return
        where = np.asarray(where)
        self.failed |= np.broadcast_to(where.any(-1) if where.ndim else where, self.failed.shape)

    def step(self, op: "_ChainOp") -> None:
        """Evaluates `op` into `env` (an FMA when llvm-cpu contracts it)."""
        name = op.name
        if name == "arith.constant":
            return
        res = op.results[0]
        t = type_name(res.type)
        if name in ("arith.addf", "arith.subf") and self.chain.host.fma and self._fused(op, t):
            self._defined(res, t)
            return
        handler = _STEPS.get(name)
        if handler is None:
            raise NotExact(f"'{name}' in the chain")
        handler(self, op, t)
        val = self._defined(res, t)
        if val is None:
            return
        val.dir = equal_ends_constant(val)
        if self.check and np.any(np.isnan(val.dir)):
            operands = op.operands[1:] if name == "arith.select" else op.operands
            val.lo, val.hi = enclose(name, [self.ref(v) for v in operands], _UNARY.get(name),
                                     _ENCLOSURE_ULPS if name in _TRANSCENDENTAL else 0) or (_UNKNOWN, _UNKNOWN)

    def _defined(self, res: "_ChainValue", t: str) -> "_Val | None":
        """`res`'s value (None for a comparison's outcome, kept apart in `cmps`); with `check`,
        NotExact on a NaN, or an infinity in the chain's result. An infinity inside the chain
        is IEEE's, as llvm-cpu computes it (exp overflowing to +inf, 1 / inf = 0: SiLU of a
        large negative value; a clamp takes +-inf to the int8 range's ends)."""
        val = self.env.get(res)
        if val is not None and t == "f32" and self.check:
            self.refuse(np.isnan(val.v), "the chain is undefined (NaN) on the accumulator range")
            if res is self.chain.result:
                self.refuse(~np.isfinite(val.v), "the chain overflows f32 on the accumulator range")
        return val

    def ref(self, v: "_ChainValue") -> _Val:
        if v in self.env:
            return self.env[v]
        t = type_name(v.type)
        if v in self.chain.args:
            c = self.chain.args[v]
        else:
            c = v.const
            if c is None or c.size != 1:
                raise NotExact(f"value {v.label} of the chain is neither a constant nor per channel")
        c = np.asarray(c)
        if c.size > 1:  # one value per channel (`for_channels`): a column against a row per channel
            return _Val(c.reshape(-1, 1).astype(np.float32 if t == "f32" else np.int64), 0.0, t)
        c = c.reshape(())
        return _Val(np.float32(c) if t == "f32" else np.int64(c), 0.0, t)

    def factors(self, *vals: _Val) -> None:
        """Records the factors of a product (a division) of the accumulator: the signs of
        the constant ones set its direction (one of constants only is a constant)."""
        if self.constants is not None and any(np.ndim(x.v) and np.shape(x.v)[-1] != 1 for x in vals):
            self.constants.extend(x.v for x in vals)

    def int_result(self, x: np.ndarray, t: str) -> np.ndarray:
        lo, hi = INT_RANGE[t]
        if self.check:
            self.refuse((x < lo) | (x > hi), f"the chain's {t} arithmetic wraps on the accumulator range")
        return x

    def _fused(self, op: "_ChainOp", t: str) -> bool:
        """Evaluates add / sub `op` as the FMA llvm-cpu makes of it with a product, if it does."""
        chain, env = self.chain, self.env
        prods = [v for v in op.operands if v.owner is not None and v.owner.name == "arith.mulf" and v in env]
        single = [v for v in prods if chain.uses.get(v, 0) == 1 and v.n_uses == 1]
        if len(single) != len(prods):
            if chain.fuse_shared is None:
                raise NotExact(EITHER_FMA)
            single = prods if chain.fuse_shared else single
        if len(single) > 1:
            if chain.fma_pick is None:
                raise NotExact(EITHER_FMA)
            single = [single[chain.fma_pick]]
        if not single:
            return False
        p = single[0].owner
        x, y = self.ref(p.operands[0]), self.ref(p.operands[1])
        self.factors(x, y)
        z = self.ref(op.operands[1] if op.operands[0] == single[0] else op.operands[0])
        if op.name == "arith.subf" and op.operands[0] == single[0]:  # x*y - z
            x, y, z = x, y, _negated(z)
        elif op.name == "arith.subf":  # z - x*y
            x, y, z = _negated(x), y, z
        d = _combine(_mul_dir(x, y), z.dir)
        env[op.results[0]] = _Val(fma_f32(x.v, y.v, z.v), d, t)
        if self.check and np.any(np.isnan(d)):
            env[op.results[0]].lo, env[op.results[0]].hi = enclose_fma(x, y, z, fma_f32)
        return True

    def float_binary(self, op, t):
        name = op.name
        x, y = self.ref(op.operands[0]), self.ref(op.operands[1])
        if name in ("arith.mulf", "arith.divf"):
            self.factors(x, y)
        with np.errstate(all="ignore"):
            r = _FLOAT_BIN[name](np.float32(x.v) if np.ndim(x.v) == 0 else x.v,
                                 np.float32(y.v) if np.ndim(y.v) == 0 else y.v).astype(np.float32, copy=False)
        if name == "arith.addf":
            d = _combine(x.dir, y.dir)
        elif name == "arith.subf":
            d = _combine(x.dir, _neg(y.dir))
        elif name == "arith.mulf":
            d = _mul_dir(x, y)
        else:
            d = _div_dir(x, y)
        self.env[op.results[0]] = _Val(r, d, t)

    def negate(self, op, t):
        x = self.ref(op.operands[0])
        self.env[op.results[0]] = _Val(-x.v, _neg(x.dir), t)

    def int_binary(self, op, t):
        x, y = self.ref(op.operands[0]), self.ref(op.operands[1])
        if op.name == "arith.addi":
            r, d = x.v + y.v, _combine(x.dir, y.dir)
        elif op.name == "arith.subi":
            r, d = x.v - y.v, _combine(x.dir, _neg(y.dir))
        else:
            self.factors(x, y)
            r, d = x.v * y.v, _mul_dir(x, y)
        self.env[op.results[0]] = _Val(self.int_result(r, t), d, t)

    def int_cast(self, op, t):
        x = self.ref(op.operands[0])
        self.env[op.results[0]] = _Val(self.int_result(x.v, t), x.dir, t)

    def to_float(self, op, t):
        x = self.ref(op.operands[0])
        self.env[op.results[0]] = _Val(np.asarray(x.v, np.int64).astype(np.float32), x.dir, t)

    def to_int(self, op, t):
        x = self.ref(op.operands[0])
        lo, hi = INT_RANGE[t]
        outside = ~np.isfinite(x.v) | (x.v <= lo - 1) | (x.v >= hi + 1)
        self.refuse(outside, f"arith.fptosi to {t} of a value out of range (undefined)")
        self.env[op.results[0]] = _Val(np.trunc(np.where(outside, 0, x.v)).astype(np.int64), x.dir, t)

    def round_to_integral(self, op, t):
        x = self.ref(op.operands[0])
        self.env[op.results[0]] = _Val(_ROUND[op.name](x.v).astype(np.float32, copy=False), x.dir, t)

    def transcendental(self, op, t):
        x = self.ref(op.operands[0])
        fn, sense = _TRANSCENDENTAL[op.name]
        with np.errstate(all="ignore"):
            r = np.asarray(fn(np.asarray(x.v, np.float64))).astype(np.float32)
        step = np.float32(np.inf if self.chain.ulps > 0 else -np.inf)
        for _ in range(abs(self.chain.ulps)):
            r = np.nextafter(r, step)
        self.env[op.results[0]] = _Val(r, x.dir * sense, t)

    def power(self, op, t):
        """math.fpowi by a constant exponent of 1 to 3: the products llvm-cpu makes of it
        (LLVM expands a small constant power by squaring: x * x, x * (x * x)), each rounded."""
        x, n = self.ref(op.operands[0]), self.ref(op.operands[1])
        k = int(np.asarray(n.v).reshape(-1)[0]) if np.all(n.dir == 0) else None
        if k not in (1, 2, 3):
            raise NotExact("math.fpowi in the chain whose exponent is not a constant 1, 2 or 3")
        with np.errstate(all="ignore"):
            r = np.asarray(x.v, np.float32)
            square = r * r
            r = {1: r, 2: square, 3: r * square}[k]
        self.env[op.results[0]] = _Val(r, x.dir if k == 1 else x.dir * _UNKNOWN, t)

    def round_half_away(self, op, t):  # math.round, exactly (f32 -> f64 is exact)
        x = self.ref(op.operands[0])
        x64 = np.asarray(x.v, np.float64)
        self.env[op.results[0]] = _Val((np.sign(x64) * np.floor(np.abs(x64) + 0.5)).astype(np.float32), x.dir, t)

    def max_min(self, op, t):
        x, y = self.ref(op.operands[0]), self.ref(op.operands[1])
        self.env[op.results[0]] = _Val(_MAXMIN[op.name](x.v, y.v), _combine(x.dir, y.dir), t)

    def compare(self, op, t):
        names = _CMPF if op.name == "arith.cmpf" else _CMPI
        full = names[op.predicate]
        pred = full[1:] if op.name == "arith.cmpf" or full[0] == "s" else full
        x, y = self.ref(op.operands[0]), self.ref(op.operands[1])
        if pred not in ("gt", "ge", "lt", "le"):  # (unsigned integer comparisons included)
            raise NotExact(f"comparison '{pred}' in the chain")
        fn = {"gt": np.greater, "ge": np.greater_equal, "lt": np.less, "le": np.less_equal}[pred]
        if op.name == "arith.cmpf" and self.check:
            self.refuse(np.isnan(x.v) | np.isnan(y.v), "the chain compares NaN")
        self.cmps[op.results[0]] = (op.operands[0], op.operands[1], fn(x.v, y.v), (x.dir == 0) & (y.dir == 0))

    def select(self, op, t):
        if op.operands[0] not in self.cmps:
            raise NotExact("arith.select whose condition is no comparison")
        cx, cy, cond, cond_fixed = self.cmps[op.operands[0]]
        tv, fv = self.ref(op.operands[1]), self.ref(op.operands[2])
        # select(x > y, x, y) is max(x, y), select(x > y, y, x) min: monotone.
        maxmin = {op.operands[1], op.operands[2]} == {cx, cy}
        d = _combine(tv.dir, fv.dir) if maxmin else np.where((tv.dir == 0) & (fv.dir == 0) & cond_fixed, 0.0, np.nan)
        self.env[op.results[0]] = _Val(np.where(cond, tv.v, fv.v), d, t)


def _negated(x: _Val) -> _Val:
    return _Val(-x.v, _neg(x.dir), x.t, None if x.hi is None else -x.hi, None if x.lo is None else -x.lo)


_UNKNOWN = np.float64(np.nan)  # a direction or a bound not known


# Unary ops monotone in their argument, for enclosures (f32_bounds.enclose): the function.
_UNARY = {**_ROUND, **{n: f for n, (f, _) in _TRANSCENDENTAL.items()}, "arith.fptosi": np.trunc,
          "arith.sitofp": lambda v: v.astype(np.float32), "arith.extsi": lambda v: v, "arith.trunci": lambda v: v,
          "math.round": lambda v: np.sign(v) * np.floor(np.abs(v) + 0.5)}
# A transcendental result's enclosure is widened by this many ulps either way (llvm-cpu's
# approximations; see _TRANSCENDENTAL).
_ENCLOSURE_ULPS = 8


# How `_Evaluation.step` evaluates each op it knows.
_STEPS = {**{n: _Evaluation.float_binary for n in _FLOAT_BIN}, "arith.negf": _Evaluation.negate,
          **{n: _Evaluation.int_binary for n in ("arith.addi", "arith.subi", "arith.muli")},
          "arith.extsi": _Evaluation.int_cast, "arith.trunci": _Evaluation.int_cast,
          "arith.sitofp": _Evaluation.to_float, "arith.fptosi": _Evaluation.to_int,
          **{n: _Evaluation.round_to_integral for n in _ROUND},
          **{n: _Evaluation.transcendental for n in _TRANSCENDENTAL}, "math.round": _Evaluation.round_half_away,
          "math.fpowi": _Evaluation.power,
          **{n: _Evaluation.max_min for n in _MAXMIN},
          "arith.cmpf": _Evaluation.compare, "arith.cmpi": _Evaluation.compare, "arith.select": _Evaluation.select}
