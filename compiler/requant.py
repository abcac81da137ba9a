"""Float requantization after an int8 contraction, made integer arithmetic.

A QDQ int8 model (ONNX QuantizeLinear / DequantizeLinear, torch's
quantize_per_tensor / dequantize_per_tensor) reaches dispatch creation as an
i8 x i8 -> i32 contraction (conv, matmul) followed by an elementwise generic
that requantizes its accumulator in f32, e.g.

    a -> subi corr -> sitofp -> mulf sx -> mulf sw -> addf bias -> [relu]
      -> divf sy -> roundeven -> addf zy -> clamp [-128, 127] -> fptosi i8
      [-> extsi -> subi zy -> sitofp -> mulf sy: a dequantize to f32]

The NPU has no f32 epilogue. `lower_float_requantization` replaces that
generic with an integer rescale the Torq epilogue runs (the steps TOSA
rescale lowers to), per output channel c:

    q = clamp(((a + C_c) * M_c + R_c) >> S_c, lo_c, hi_c)

exactly equal to the f32 chain for *every* accumulator value the
contraction can produce where such a rescale exists, and otherwise (the
default, --torq-requant=nearest) the nearest one: at most one output step
off anywhere on the reachable range, with the number of accumulator values
on which it differs measured exactly per channel and reported
(`RequantSummary`; compiler/rescale_fit.py). With --torq-requant=exact, or
when even the nearest rescale is more than one step off, the dispatch stays
on host with a remark naming the channel (`Unsupported`). A dequantize tail after the int8 value (f32 compute) is cut off and left to a
host dispatch (`HostTail`), so the NPU result is the int8 tensor.

Exactness argument:
1. The chain is evaluated here exactly as IREE's llvm-cpu evaluates it:
   every f32 op correctly rounded (numpy float32, IEEE round to nearest
   even), `sitofp` rounding to nearest even, `divf` a true division (llvm
   does not turn it into a reciprocal multiply), and a `mulf` whose only user
   is an `addf`/`subf` fused into one FMA (one rounding) when the host target
   has FMA: llvm-cpu contracts those pairs (checked against llvm-cpu on
   accumulators next to step points, tests/e2e/test_qdq_int8.py).
   Chains whose evaluation order llvm could choose (a sum of two products,
   a product with several users feeding an add) are refused.
2. Every op of the chain is monotone in the accumulator a: IEEE rounding is
   monotone, so fl(x * s), fl(x / s) (s a per-channel constant), fl(x + b),
   fma, sitofp, roundeven / round / floor / ceil, max / min / relu (as
   cmpf + select of its own operands) and fptosi preserve (or, for s < 0,
   reverse) the order of their variable operand; integer add / sub / mul by
   constants are monotone as long as they do not wrap, which is checked at
   both ends of the range (a monotone value is extreme there). The analysis
   tracks the direction of every value and refuses anything else. So per
   channel q = f(a) is a monotone step function of a.
3. The reachable range of a: with x in the input dtype's range (i8:
   [-128, 127], padding included) and the weights known constants (resolved
   from the dispatch's operands), a(p) = sum_r x * w lies in
   [sum min(w x_min, w x_max), sum max(w x_min, w x_max)] over the weights
   the output channel reads (times the multiplicity of reduction dims the
   weight does not use); without constant weights, the dtype bound. A range
   that can reach 2^31 (i32 wrap) is refused.
4. A monotone step function on [lo, hi] is determined by q(lo), q(hi) and its
   step points T_k = min{a in [lo, hi] : q(a) >= k} for q(lo) < k <= q(hi)
   (at most 255 for int8), found by bisection. The integer form
   g(a) = clamp(floor((a * M + R) / 2^S), q(lo), q(hi)) with M > 0 is also
   monotone, and equals q on [lo, hi] iff M T_k + R >= k 2^S and
   M (T_k - 1) + R < k 2^S for every k (`fit_rescale` solves exactly these
   inequalities: an interval of slopes from all pairs of steps, then integer
   M, S, R on it). After fitting, both functions are compared at lo, hi
   and every T_k - 1, T_k: two monotone functions that agree at both ends of
   each constant piece of q agree on the whole range.
When no (M, S, R) with |M| < 2^31, S <= 62 and no i64 overflow satisfies the
inequalities (the f32 rounding moved some step points off every line), no
exact rescale exists: --torq-requant=exact leaves the dispatch on host and
the remark says which channel and why, the default takes the nearest. That is
common when step points lie at large accumulators (f32 keeps 24 bits: near
|a| ~ 10^6 the rounding of a * sx * sw moves a step by a good part of one
accumulator unit) and when scales are round numbers (sx * sw / sy = 1/80
exactly puts every step point on a tie that f32 noise breaks either way).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import numpy as np
from iree.compiler import ir

from .ir_utils import constant_of, indexing_maps, map_dims, n_inputs, region_ops, static_shape
from .rescale_fit import (ChannelFit, NotExact, Rescale, brute_force_step_points, derive_rescale,  # noqa: F401
                          fit_channel, fit_rescale, step_points)

_INT_RANGE = {"i1": (0, 1), "i8": (-128, 127), "i16": (-(1 << 15), (1 << 15) - 1), "i32": (-(1 << 31), (1 << 31) - 1),
              "i64": (-(1 << 63), (1 << 63) - 1)}


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
    unless s is exactly halfway between two f32 numbers (then e decides).
    """
    x, y, z = (np.asarray(v, np.float64) for v in (x, y, z))
    p = x * y
    s = p + z
    bb = s - p
    e = (p - (s - bb)) + (z - bb)
    r = s.astype(np.float32)
    other = np.where(r.astype(np.float64) < s, np.nextafter(r, np.float32(np.inf)),
                     np.nextafter(r, np.float32(-np.inf)))
    tie = (np.abs(r.astype(np.float64) - s) == np.abs(other.astype(np.float64) - s)) & (e != 0)
    toward = np.where(e > 0, np.maximum(r, other), np.minimum(r, other))
    return np.where(tie, toward, r).astype(np.float32)


@dataclass
class _Val:
    v: np.ndarray
    dir: int | None  # +1 / -1: monotone in a; 0: constant; None: not monotone
    t: str  # "f32" or an integer type name


def _combine(d1, d2):
    if d1 is None or d2 is None:
        return None
    if d1 == 0 or d2 == 0 or d1 == d2:
        return d1 or d2
    return None


def _sign(x) -> int:
    x = float(np.asarray(x).reshape(-1)[0])
    return (x > 0) - (x < 0)


def _mul_dir(x: "_Val", y: "_Val") -> int | None:
    """Direction of x * y: monotone only when one factor is a constant."""
    if x.dir is None or y.dir is None or (x.dir and y.dir):
        return None
    return x.dir * _sign(y.v) if y.dir == 0 else y.dir * _sign(x.v)


def _neg(d: int | None) -> int | None:
    return None if d is None else -d


_FLOAT_BIN = {"arith.addf": np.add, "arith.subf": np.subtract, "arith.mulf": np.multiply,
              "arith.divf": np.divide}
_MAXMIN = {"arith.maxnumf": np.fmax, "arith.minnumf": np.fmin, "arith.maximumf": np.maximum,
           "arith.minimumf": np.minimum, "arith.maxsi": np.maximum, "arith.minsi": np.minimum}
_ROUND = {"math.roundeven": np.rint, "math.floor": np.floor, "math.ceil": np.ceil, "math.trunc": np.trunc}
_CMPF = ["false", "oeq", "ogt", "oge", "olt", "ole", "one", "ord", "ueq", "ugt", "uge", "ult", "ule",
         "une", "uno", "true"]
_CMPI = ["eq", "ne", "slt", "sle", "sgt", "sge", "ult", "ule", "ugt", "uge"]


def _type_name(t) -> str:
    s = t if isinstance(t, str) else str(t)
    if s == "f32" or s in _INT_RANGE:
        return s
    raise NotExact(f"the chain computes in {s}")


class _ChainValue:
    """An SSA value of the chain, read from the IR once (evaluation runs per channel and per
    bisection step: reading types, users and constants from the bindings each time was most
    of a QDQ model's compile)."""
    __slots__ = ("type", "owner", "n_uses", "const", "label")

    def __init__(self, v: ir.Value, owner: "_ChainOp | None"):
        self.type, self.owner, self.n_uses, self.label = str(v.type), owner, len(list(v.uses)), v.get_name()
        self.const = constant_of(v) if owner is None or owner.name == "arith.constant" else None


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

    def __init__(self, ops: list[ir.Operation], result: ir.Value, acc: ir.Value, host: HostFloat):
        self.values: dict = {}
        self.acc = _chain_value(acc, self.values)
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
        c = Chain.__new__(Chain)
        c.__dict__.update(self.__dict__)
        c.args = {self.values[k]: v for k, v in args.items() if k in self.values}
        return c

    def __call__(self, a: np.ndarray, check: bool = False) -> np.ndarray:
        return self.evaluate(a, check).v

    def direction(self, lo: int, hi: int) -> int:
        """+1 / -1 / 0 if the chain is monotone on [lo, hi] (checked at both ends); raises NotExact."""
        r = self.evaluate(np.array([lo, hi], np.int64), check=True)
        if r.dir is None:
            raise NotExact("the chain is not monotone in the accumulator")
        return r.dir

    def evaluate(self, a: np.ndarray, check: bool = False) -> _Val:
        env: dict = {self.acc: _Val(np.asarray(a, np.int64), 1, _type_name(self.acc.type))}
        cmps: dict = {}

        def ref(v: ir.Value) -> _Val:
            if v in env:
                return env[v]
            t = _type_name(v.type)
            if v in self.args:
                c = self.args[v]
            else:
                c = v.const
                if c is None or c.size != 1:
                    raise NotExact(f"value {v.label} of the chain is neither a constant nor per channel")
            c = np.asarray(c).reshape(())
            return _Val(np.float32(c) if t == "f32" else np.int64(c), 0, t)

        def int_result(x: np.ndarray, t: str) -> np.ndarray:
            lo, hi = _INT_RANGE[t]
            if check and (np.any(x < lo) or np.any(x > hi)):
                raise NotExact(f"the chain's {t} arithmetic wraps on the accumulator range")
            return x

        fused: set = set()
        for op in self.ops:
            name = op.name
            if name == "arith.constant":
                continue
            res = op.results[0]
            t = _type_name(res.type)
            if name in ("arith.addf", "arith.subf") and self.host.fma and op not in fused:
                prods = [v for v in op.operands if v.owner is not None and v.owner.name == "arith.mulf" and v in env]
                single = [v for v in prods if self.uses.get(v, 0) == 1 and v.n_uses == 1]
                if len(prods) > 1 or len(prods) != len(single):
                    raise NotExact("llvm-cpu may fuse either product of this sum into an FMA")
                if single:
                    p = single[0].owner
                    x, y = ref(p.operands[0]), ref(p.operands[1])
                    z = ref(op.operands[1] if op.operands[0] == single[0] else op.operands[0])
                    pd = _mul_dir(x, y)
                    if name == "arith.subf" and op.operands[0] == single[0]:  # x*y - z
                        r, d = fma_f32(x.v, y.v, -z.v), _combine(pd, _neg(z.dir))
                    elif name == "arith.subf":  # z - x*y
                        r, d = fma_f32(-x.v, y.v, z.v), _combine(_neg(pd), z.dir)
                    else:
                        r, d = fma_f32(x.v, y.v, z.v), _combine(pd, z.dir)
                    env[res] = _Val(r, d, t)
                    continue
            if name in _FLOAT_BIN:
                x, y = ref(op.operands[0]), ref(op.operands[1])
                with np.errstate(all="ignore"):
                    r = _FLOAT_BIN[name](np.float32(x.v) if np.ndim(x.v) == 0 else x.v,
                                         np.float32(y.v) if np.ndim(y.v) == 0 else y.v).astype(np.float32)
                if name == "arith.addf":
                    d = _combine(x.dir, y.dir)
                elif name == "arith.subf":
                    d = _combine(x.dir, _neg(y.dir))
                elif name == "arith.mulf":
                    d = _mul_dir(x, y)
                else:  # x / c only
                    d = None if x.dir is None or y.dir != 0 else x.dir * _sign(y.v)
                env[res] = _Val(r, d, t)
            elif name == "arith.negf":
                x = ref(op.operands[0])
                env[res] = _Val(-x.v, _neg(x.dir), t)
            elif name in ("arith.addi", "arith.subi", "arith.muli"):
                x, y = ref(op.operands[0]), ref(op.operands[1])
                if name == "arith.addi":
                    r, d = x.v + y.v, _combine(x.dir, y.dir)
                elif name == "arith.subi":
                    r, d = x.v - y.v, _combine(x.dir, _neg(y.dir))
                else:
                    r, d = x.v * y.v, _mul_dir(x, y)
                env[res] = _Val(int_result(r, t), d, t)
            elif name in ("arith.extsi", "arith.trunci"):
                x = ref(op.operands[0])
                env[res] = _Val(int_result(x.v, t), x.dir, t)
            elif name == "arith.sitofp":
                x = ref(op.operands[0])
                env[res] = _Val(np.asarray(x.v, np.int64).astype(np.float32), x.dir, t)
            elif name == "arith.fptosi":
                x = ref(op.operands[0])
                lo, hi = _INT_RANGE[t]
                if np.any(~np.isfinite(x.v)) or np.any(x.v <= lo - 1) or np.any(x.v >= hi + 1):
                    raise NotExact(f"arith.fptosi to {t} of a value out of range (undefined)")
                env[res] = _Val(np.trunc(x.v).astype(np.int64), x.dir, t)
            elif name in _ROUND:
                x = ref(op.operands[0])
                env[res] = _Val(_ROUND[name](x.v).astype(np.float32), x.dir, t)
            elif name == "math.round":  # half away from zero, exactly (f32 -> f64 is exact)
                x = ref(op.operands[0])
                x64 = np.asarray(x.v, np.float64)
                env[res] = _Val((np.sign(x64) * np.floor(np.abs(x64) + 0.5)).astype(np.float32), x.dir, t)
            elif name in _MAXMIN:
                x, y = ref(op.operands[0]), ref(op.operands[1])
                env[res] = _Val(_MAXMIN[name](x.v, y.v), _combine(x.dir, y.dir), t)
            elif name in ("arith.cmpf", "arith.cmpi"):
                names = _CMPF if name == "arith.cmpf" else _CMPI
                full = names[op.predicate]
                pred = full[1:] if name == "arith.cmpf" or full[0] == "s" else full
                x, y = ref(op.operands[0]), ref(op.operands[1])
                if pred not in ("gt", "ge", "lt", "le"):  # (unsigned integer comparisons included)
                    raise NotExact(f"comparison '{pred}' in the chain")
                fn = {"gt": np.greater, "ge": np.greater_equal, "lt": np.less, "le": np.less_equal}[pred]
                if name == "arith.cmpf" and check and (np.any(np.isnan(x.v)) or np.any(np.isnan(y.v))):
                    raise NotExact("the chain compares NaN")
                cmps[res] = (op.operands[0], op.operands[1], fn(x.v, y.v), x.dir == y.dir == 0)
            elif name == "arith.select":
                if op.operands[0] not in cmps:
                    raise NotExact("arith.select whose condition is no comparison")
                cx, cy, cond, cond_fixed = cmps[op.operands[0]]
                tv, fv = ref(op.operands[1]), ref(op.operands[2])
                # select(x > y, x, y) is max(x, y), select(x > y, y, x) min: monotone.
                maxmin = {op.operands[1], op.operands[2]} == {cx, cy}
                d = _combine(tv.dir, fv.dir) if maxmin else (0 if tv.dir == fv.dir == 0 and cond_fixed else None)
                env[res] = _Val(np.where(cond, tv.v, fv.v), d, t)
            else:
                raise NotExact(f"'{name}' in the chain")
            if t == "f32" and check and np.any(~np.isfinite(env[res].v)):
                raise NotExact("the chain overflows f32 on the accumulator range")
        return env[self.result]


# --- the IR rewrite ---------------------------------------------------------------------

@dataclass
class HostTail:
    """Elementwise ops after the int8 value (a dequantize to f32), run on the host.

    `ops_text` is a generic-form op sequence reading `%q` (an `in_type`
    scalar) whose value `result` (of `result_type`) is the element the
    original dispatch stored.
    """
    ops_text: str
    result: str
    in_type: str
    result_type: str


@dataclass
class RequantLowering:
    """What `lower_float_requantization` did to one dispatch function."""
    rescaled: list["RequantSummary"] = field(default_factory=list)  # one per rewritten generic
    host_tails: dict[int, HostTail] = field(default_factory=dict)  # function result -> tail


def _is_float_requant(op: ir.Operation) -> bool:
    if op.name != "linalg.generic" or len(op.results) != 1:
        return False
    names = {o.name for o in region_ops(op)}
    return "arith.sitofp" in names and "arith.fptosi" in names


class _Known:
    """Constant values of a function's tensors: arith.constant or a resolved argument."""

    def __init__(self, arg_constants):
        self.args = arg_constants

    def __call__(self, v: ir.Value) -> np.ndarray | None:
        if isinstance(v.owner, ir.Block):
            owner = v.owner.owner
            if owner is not None and owner.operation.name == "func.func":
                return self.args.get(ir.BlockArgument(v).arg_number)
            return None
        return constant_of(v)


def _accumulator_range(con: ir.Operation, known: _Known) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """(lo, hi, dims): bounds of the contraction's i32 result, as arrays over its
    result dims `dims` (the parallel dims its constant weight varies along; [] if uniform)."""
    maps = indexing_maps(con)
    its = [str(a).split("<")[-1].rstrip(">") for a in ir.ArrayAttr(con.attributes["iterator_types"])]
    shapes = [static_shape(v.type) for v in list(con.operands)[:2]]
    ranges = [0] * maps[0].n_dims
    for shape, m in zip(shapes + [static_shape(con.results[0].type)], maps):
        for size, e in zip(shape, m.results):
            if isinstance(e, ir.AffineDimExpr):
                ranges[ir.AffineDimExpr(e).position] = size
    red = [d for d, it in enumerate(its) if it == "reduction"]
    out_dims = map_dims(maps[2])
    bounds = []
    for i in range(2):
        t = str(ir.RankedTensorType(con.operands[i].type).element_type)
        if t not in ("i8", "i16"):
            raise NotExact(f"contraction operand {i} is {t}, not i8/i16")
        bounds.append(_INT_RANGE[t])
    const_i = next((i for i in (1, 0) if known(con.operands[i]) is not None and map_dims(maps[i]) is not None), None)
    total = math.prod(ranges[d] for d in red)
    if const_i is None:
        m = max(abs(b) for b in bounds[0]) * max(abs(b) for b in bounds[1]) * total
        return np.array(-m), np.array(m), []
    w = known(con.operands[const_i]).astype(np.int64)
    xlo, xhi = bounds[1 - const_i]
    w_dims = map_dims(maps[const_i])
    par = [k for k, d in enumerate(w_dims) if its[d] == "parallel"]
    if any(w_dims[k] not in out_dims for k in par) or len(set(w_dims)) != len(w_dims):
        raise NotExact("the weight's parallel dims are not result dims")
    mult = math.prod(ranges[d] for d in red if d not in w_dims)
    order = par + [k for k in range(w.ndim) if k not in par]
    w = w.transpose(order).reshape([w.shape[k] for k in par] + [-1])
    hi = np.maximum(w * xlo, w * xhi).sum(-1) * mult
    lo = np.minimum(w * xlo, w * xhi).sum(-1) * mult
    return lo, hi, [out_dims.index(w_dims[k]) for k in par]


def _channel_values(op: ir.Operation, acc_index: int, known: _Known, range_dims: list[int],
                    acc_lo: np.ndarray, acc_hi: np.ndarray, acc_map_dims: list[int]):
    """Per channel: ({block arg: scalar}, lo, hi). The channel dim is the one result dim
    every per-channel value (operands, accumulator bounds) varies along, if any."""
    maps = indexing_maps(op)
    out = map_dims(maps[-1])
    shape = static_shape(op.results[0].type)
    args = op.regions[0].blocks[0].arguments
    per: dict = {}
    chan_dims = set()
    for i in range(n_inputs(op)):
        if i == acc_index:
            continue
        c = known(op.operands[i])
        d = map_dims(maps[i])
        if c is None or d is None:
            raise NotExact(f"operand {i} of the requantization is not a constant")
        if c.size == 1:
            per[args[i]] = (None, c.reshape(-1)[0])
            continue
        loops = [dd for dd, n in zip(d, c.shape) if n != 1]
        if len(loops) != 1:
            raise NotExact(f"operand {i} of the requantization varies along several dims")
        chan_dims.add(out.index(loops[0]))
        per[args[i]] = (out.index(loops[0]), c.reshape(-1))
    # Accumulator bounds vary along contraction result dims; map them to this op's result dims.
    for rd in range_dims:
        chan_dims.add(out.index(acc_map_dims[rd]))
    if len(chan_dims) > 1:
        raise NotExact("the requantization parameters vary along more than one dim")
    chan = chan_dims.pop() if chan_dims else None
    n = shape[chan] if chan is not None else 1
    lo = np.broadcast_to(np.asarray(acc_lo).reshape(-1), (n,)) if acc_lo.size in (1, n) else None
    hi = np.broadcast_to(np.asarray(acc_hi).reshape(-1), (n,)) if acc_hi.size in (1, n) else None
    if lo is None or hi is None:
        raise NotExact("accumulator bounds and parameters disagree on the channel count")
    channels = []
    for ch in range(n):
        vals = {a: (v if dim is None else v[ch]) for a, (dim, v) in per.items()}
        channels.append((vals, int(lo[ch]), int(hi[ch])))
    return chan, channels


def _split_tail(op: ir.Operation) -> tuple[ir.Operation, list[ir.Operation]]:
    """(the fptosi giving the quantized value, the ops after it up to the yield)."""
    body = region_ops(op)
    fptosi = [o for o in body if o.name == "arith.fptosi"]
    if len(fptosi) != 1:
        raise NotExact("the chain has several float -> int conversions")
    q = fptosi[0]
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


def _tail_text(q: ir.Operation, tail: list[ir.Operation]) -> HostTail:
    """The tail ops in generic form, renamed: `%q` is the int8 value, constants are re-created."""
    names = {q.results[0]: "%q"}
    lines = []

    def name(v):
        if v not in names:
            n = f"%c{len(names)}"  # a scalar constant (checked by _split_tail)
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
    return HostTail("\n".join(lines), names[tail[-1].results[0]], str(q.results[0].type),
                    str(tail[-1].results[0].type))


@dataclass
class RequantSummary:
    """How one float requantization was compiled: per channel, the accumulator values on
    which the integer rescale's level differs from the f32 chain's (0: exact) and the
    span of accumulator values over which the chain's level changes."""
    kind: str  # the contraction it follows: conv2d, depthwise_conv2d, matmul, ...
    differing: list[int]
    step_span: list[int]

    @property
    def channels(self) -> int:
        return len(self.differing)

    @property
    def exact_channels(self) -> int:
        return sum(d == 0 for d in self.differing)

    @property
    def differing_share(self) -> float:
        """Differing accumulator values / accumulator values where the level changes."""
        span = sum(self.step_span)
        return sum(self.differing) / span if span else 0.0

    def line(self) -> str:
        n = self.channels
        head = f"{self.kind}: f32 requantization -> integer rescale, {self.exact_channels} of {n} channel" \
               f"{'s' if n > 1 else ''} exact"
        if self.exact_channels == n:
            return head
        worst = max(d / s for d, s in zip(self.differing, self.step_span) if s)
        return (f"{head}, the others nearest (one output step off on {sum(self.differing)} of "
                f"{sum(self.step_span)} accumulator values where the level changes, "
                f"{100 * self.differing_share:.3g}%; worst channel {100 * worst:.3g}%)")

    def as_dict(self) -> dict:
        return {"kind": self.kind, "channels": self.channels, "exact_channels": self.exact_channels,
                "differing_share": self.differing_share, "differing": self.differing,
                "step_span": self.step_span}


@dataclass
class _Plan:
    op: ir.Operation  # the float requantization generic
    acc_index: int
    chan: int | None  # result dim the parameters vary along
    rescales: list[Rescale]
    q_type: str  # element type of the integer result
    tail: HostTail | None
    result_index: int  # function result it feeds (tail only), else -1
    summary: RequantSummary


def _plan(op: ir.Operation, known: _Known, host, nearest: bool) -> _Plan | None:
    """The rewrite of float requantization `op`, or None when `op` does not follow an integer
    contraction (then it is not ours). Raises NotExact when it does but cannot be reproduced
    (exactly, or with `nearest` within one output step per channel)."""
    from .patterns import classify_contraction, is_zero_fill

    maps = indexing_maps(op)
    acc_index = None
    for i in range(n_inputs(op)):
        v = op.operands[i]
        p = None if isinstance(v.owner, ir.Block) else v.owner
        if p is not None and p.name == "linalg.generic" and str(ir.RankedTensorType(v.type).element_type) == "i32" \
                and classify_contraction(p) is not None:
            acc_index, con = i, p
            break
    if acc_index is None:
        return None
    kind = classify_contraction(con).kind
    if len(list(con.results[0].uses)) != 1:
        raise NotExact(f"the {kind} accumulator has other users")
    init = con.operands[n_inputs(con)]
    if isinstance(init.owner, ir.Block) or not is_zero_fill(init.owner):
        raise NotExact(f"the {kind} accumulator does not start from zero")
    host = host() if callable(host) else host
    if host is None:
        raise NotExact("the host target's float semantics (FMA contraction) are unknown")
    out = map_dims(maps[-1])
    acc_dims = map_dims(maps[acc_index])
    if out is None or sorted(out) != list(range(len(out))) or acc_dims is None or sorted(acc_dims) != sorted(out):
        raise NotExact("the requantization reads the accumulator through a non-permutation map")
    body = region_ops(op)
    block = op.regions[0].blocks[0]
    yield_v = body[-1].operands[0]
    tail = None
    if str(yield_v.type) == "f32":
        q, tail_ops = _split_tail(op)
        result, ops = q.results[0], body[:body.index(q) + 1]
        users = [u.owner for u in op.results[0].uses]
        if not tail_ops or len(users) != 1 or users[0].name != "func.return":
            raise NotExact("the dequantized f32 result is not only the dispatch's result")
        tail = _tail_text(q, tail_ops)
        result_index = next(u.operand_number for u in op.results[0].uses)
    else:
        result, ops, result_index = yield_v, body[:-1], -1
    q_type = _type_name(result.type)
    if q_type not in ("i8", "i16"):
        raise NotExact(f"the requantized value is {q_type}, not i8/i16")
    acc_lo, acc_hi, range_dims = _accumulator_range(con, known)
    if max(abs(int(np.min(acc_lo))), abs(int(np.max(acc_hi)))) >= 1 << 31:
        raise NotExact(f"the {kind} accumulator can wrap (i32 overflow)")
    chan, channels = _channel_values(op, acc_index, known, range_dims, acc_lo, acc_hi, acc_dims)
    chain = Chain(ops, result, block.arguments[acc_index], host)
    fits: list[ChannelFit] = []
    for ch, (vals, lo, hi) in enumerate(channels):
        f = chain.for_channel(vals)
        try:
            fits.append(fit_channel(f, lo, hi, f.direction(lo, hi), nearest))
        except NotExact as e:
            where = f"channel {ch}" if chan is not None else "the tensor"
            raise NotExact(f"{kind} float requantization, {where} (accumulator range [{lo}, {hi}]): {e}") from None
    summary = RequantSummary(kind, [x.differing for x in fits], [x.step_span for x in fits])
    return _Plan(op, acc_index, chan, [x.rescale for x in fits], q_type, tail, result_index, summary)


_PARAMS = ("offset", "multiplier", "rounding", "shift", "qmin", "qmax")


def _rescale_generic(plan: _Plan) -> str:
    """A module whose function holds the integer requantization of `plan` (text)."""
    op = plan.op
    acc_t = op.operands[plan.acc_index].type
    shape = static_shape(op.results[0].type)
    res_t = f"tensor<{'x'.join(map(str, shape))}x{plan.q_type}>"
    rank = len(shape)
    dims = ", ".join(f"d{k}" for k in range(rank))
    ident = f"affine_map<({dims}) -> ({dims})>"
    # The accumulator is read like the original op read it.
    acc_map = str(ir.AffineMapAttr.get(indexing_maps(op)[plan.acc_index]))
    tensors, scalars = [], {}
    for p in _PARAMS:
        vals = [getattr(r, p) for r in plan.rescales]
        if len(set(vals)) == 1:
            scalars[p] = vals[0]
        else:
            tensors.append((p, vals))
    n = len(plan.rescales)
    chan_map = f"affine_map<({dims}) -> (d{plan.chan})>" if plan.chan is not None else ""
    consts = "\n".join(f"  %{p} = arith.constant dense<{vals}> : tensor<{n}xi32>" for p, vals in tensors)
    ins = ", ".join(["%acc"] + [f"%{p}" for p, _ in tensors])
    in_types = ", ".join([str(acc_t)] + [f"tensor<{n}xi32>"] * len(tensors))
    maps = ", ".join([acc_map] + [chan_map] * len(tensors) + [ident])
    args = ", ".join(["%a: i32"] + [f"%in_{p}: i32" for p, _ in tensors] + [f"%out: {plan.q_type}"])
    lines = ["%a64 = arith.extsi %a : i32 to i64"]

    def param(p):
        if p in scalars:
            lines.append(f"%{p}64 = arith.constant {scalars[p]} : i64")
        else:
            lines.append(f"%{p}64 = arith.extsi %in_{p} : i32 to i64")
        return f"%{p}64"

    v = "%a64"
    if scalars.get("offset") != 0:
        lines.append(f"%shifted = arith.addi {v}, {param('offset')} : i64")
        v = "%shifted"
    lines.append(f"%scaled = arith.muli {v}, {param('multiplier')} : i64")
    v = "%scaled"
    if scalars.get("rounding") != 0:
        lines.append(f"%rounded = arith.addi {v}, {param('rounding')} : i64")
        v = "%rounded"
    if scalars.get("shift") != 0:
        lines.append(f"%down = arith.shrsi {v}, {param('shift')} : i64")
        v = "%down"
    lines.append(f"%above = arith.maxsi {v}, {param('qmin')} : i64")
    lines.append(f"%below = arith.minsi %above, {param('qmax')} : i64")
    lines.append(f"%q = arith.trunci %below : i64 to {plan.q_type}")
    lines.append(f"linalg.yield %q : {plan.q_type}")
    body = "\n    ".join(lines)
    parallel = ", ".join(['"parallel"'] * rank)
    return f"""
func.func @rescale(%acc: {acc_t}) -> {res_t} {{
{consts}
  %e = tensor.empty() : {res_t}
  %r = linalg.generic {{indexing_maps = [{maps}], iterator_types = [{parallel}]}}
      ins({ins} : {in_types}) outs(%e : {res_t}) {{
  ^bb0({args}):
    {body}
  }} -> {res_t}
  return %r : {res_t}
}}"""


def lower_float_requantization(func: ir.Operation, arg_constants, host, nearest: bool = True) -> RequantLowering:
    """Rewrites every float requantization after an integer contraction in `func` (see the
    module docstring); raises NotExact, leaving `func` untouched, if one cannot be
    reproduced: exactly, or with `nearest` (--torq-requant=nearest) within one output step.

    `arg_constants.get(k)` is the known value of function argument k, or None;
    `host` the host's `HostFloat` (or a callable giving it, asked only when a
    requantization is found). The
    function's type is updated when a dequantize tail is cut off (the result
    becomes the int8 tensor; `host_tails` says what the host computes from it).
    Arguments left without users are not removed here (see `unused_arguments`).
    """
    known = _Known(arg_constants)
    block = func.regions[0].blocks[0]
    plans = []
    for op in [o.operation for o in block.operations]:
        if _is_float_requant(op):
            plan = _plan(op, known, host, nearest)
            if plan is not None:
                plans.append(plan)
    # Everything is decided; only now is IR changed (no handles into erased IR survive).
    done = RequantLowering()
    for plan in plans:
        template = ir.Module.parse(_rescale_generic(plan))
        tops = [o.operation for o in template.body.operations[0].regions[0].blocks[0].operations][:-1]
        ip = ir.InsertionPoint(plan.op)
        cloned = [t.clone(ip=ip) for t in tops]  # constants, tensor.empty, the generic
        clones = {t.results[0]: c.results[0] for t, c in zip(tops, cloned)}
        new = cloned[-1]
        new.operands[0] = plan.op.operands[plan.acc_index]
        for k in range(1, len(new.operands)):
            new.operands[k] = clones[tops[-1].operands[k]]
        old = plan.op.results[0]
        old.replace_all_uses_with(new.results[0])
        if plan.tail is not None:
            ftype = ir.FunctionType(ir.TypeAttr(func.attributes["function_type"]).value)
            results = list(ftype.results)
            results[plan.result_index] = new.results[0].type
            func.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(list(ftype.inputs), results))
            done.host_tails[plan.result_index] = plan.tail
        plan.op.erase()
        done.rescaled.append(plan.summary)
    if plans:  # what only the float op read (f32 scalars, its f32 init) would look like f32 compute
        for op in [o.operation for o in block.operations]:
            if op.name in ("arith.constant", "tensor.empty") and not list(op.results[0].uses):
                op.erase()
    return done


def unused_arguments(func: ir.Operation) -> list[int]:
    """Indices of `func`'s arguments nothing reads."""
    return [a.arg_number for a in func.regions[0].blocks[0].arguments if not list(a.uses)]
