"""Elementwise bodies decoded into epilogue steps (`decode_elementwise`): the
arith / math ops each step models, selects, integer widths, tables."""

from __future__ import annotations

from iree.compiler import ir

from torq.contract.program import EPILOGUE_INT_TYPES, LUT, MAX_LUT_ENTRIES, Epilogue, EpilogueStep, Ref

from ..ir_utils import constant_of, mlir_dtype, region_ops
from ..pass_managers import reused
from .contraction import dim_of
from .model import Unsupported

_BINARY = {"arith.addf": "add", "arith.addi": "add", "arith.subf": "sub", "arith.subi": "sub",
           "arith.mulf": "mul", "arith.muli": "mul", "arith.divf": "div",
           "arith.maximumf": "max", "arith.maxnumf": "max", "arith.maxsi": "max",
           "arith.minimumf": "min", "arith.minnumf": "min", "arith.minsi": "min"}
_CMP = {"ogt": "gt", "ugt": "gt", "sgt": "gt", "olt": "lt", "ult": "lt", "slt": "lt",
        "oge": "ge", "uge": "ge", "sge": "ge", "ole": "le", "ule": "le", "sle": "le"}
_SHIFTS = {"arith.shli": "shl", "arith.shrsi": "shr_s", "arith.shrui": "shr_u"}
_FLOAT_CASTS = {"arith.truncf", "arith.extf"}
# Float ops whose result is an integer when their operands are (the quantize of a float
# value: round, add the zero point, clamp), so a later arith.fptosi is a plain cast.
_INTEGRAL_PRESERVING = {"arith.addf", "arith.subf", "arith.mulf", "arith.maximumf", "arith.maxnumf",
                        "arith.minimumf", "arith.minnumf", "arith.negf"}
# Transcendental functions: table lookup steps (program.TABLE_OPS), float only.
_TABLE_FNS = {"math.exp": "exp", "math.log": "log", "math.tanh": "tanh", "math.erf": "erf",
              "math.rsqrt": "rsqrt", "math.sqrt": "sqrt"}
# x ** n with a constant integer n (math.fpowi, torch's x ** 3 in the tanh
# form of GELU) is n - 1 multiplications; larger |n| stays on host.
_MAX_POWI = 8
# Integer constants travel as f64 in the executable: exact up to 2**53.
_MAX_EXACT_INT = 1 << 53


def int_width(t: ir.Type) -> str:
    """The integer type name ("i32", "i64", ...) a step wraps to, or "" for floats."""
    s = str(t)
    return s if s in EPILOGUE_INT_TYPES else ""


def cmp_predicate(op: ir.Operation) -> str:
    # Predicates print as integers in the generic attribute; map through the enum order.
    names_f = ["false", "oeq", "ogt", "oge", "olt", "ole", "one", "ord", "ueq", "ugt", "uge",
               "ult", "ule", "une", "uno", "true"]
    names_i = ["eq", "ne", "slt", "sle", "sgt", "sge", "ult", "ule", "ugt", "uge"]
    v = ir.IntegerAttr(op.attributes["predicate"]).value
    return (names_f if op.name == "arith.cmpf" else names_i)[v]


def is_identity_like(m: ir.AffineMap) -> bool:
    dims = [dim_of(e) for e in m.results]
    return None not in dims and len(set(dims)) == len(dims) and len(dims) == m.n_dims


def _lut_step(op: ir.Operation, extract: ir.Operation, ref) -> EpilogueStep:
    """`tensor.extract %table[%i]` from a constant 1-D integer table: a "lut" step whose
    entries are the table (an int8 activation, compiler/requant.py)."""
    table = constant_of(extract.operands[0])
    width = int_width(extract.results[0].type)
    if table is None or table.ndim != 1 or len(extract.operands) != 2 or not width \
            or not 1 <= table.size <= MAX_LUT_ENTRIES:
        raise Unsupported(f"tensor.extract in {op.name} body is no lookup in a constant integer table of at "
                          f"most {MAX_LUT_ENTRIES} entries")
    # The entries' Refs are shared by the candidates super tiling lowers (never mutated).
    entries = reused(("lut entries", table.dtype.str, table.tobytes()),
                     lambda: [Ref("const", const=float(t)) for t in table])
    return EpilogueStep(LUT, [ref(extract.operands[1]), *entries], to=width)


def decode_elementwise(op: ir.Operation, arg_refs: dict[int, Ref], value_base: int = 0,
                       stop: ir.Operation | None = None, stop_value: ir.Value | None = None) -> Epilogue:
    """Translate an elementwise generic body into epilogue steps.

    `arg_refs` gives the Ref of each `ins` block argument; the `outs` argument
    must be unused (no accumulation). Step results are values
    `value_base`, `value_base + 1`, ... (value 0 is the principal result of a
    contraction, so its epilogue uses base 1). With `stop`, decoding ends at
    that body op and the result is `stop_value` (the prologue of a reduction
    body: what its combiner accumulates).
    """
    decoder = _BodyDecoder(op, arg_refs, value_base)
    for body_op in region_ops(op):
        at_stop = stop is not None and body_op == stop
        if body_op.name == "linalg.yield" or at_stop:
            return decoder.finish(stop_value if at_stop else body_op.operands[0])
        decoder.decode(body_op)
    raise Unsupported("elementwise body without linalg.yield")


class _BodyDecoder:
    """The epilogue steps of one elementwise body, decoded op by op."""

    def __init__(self, op: ir.Operation, arg_refs: dict[int, Ref], value_base: int):
        self.op, self.value_base = op, value_base
        # Keyed by the values themselves: Value.get_name() numbers the whole enclosing module
        # each time (it made decoding quadratic in the module's size).
        self.values: dict[ir.Value, Ref] = {arg: arg_refs[i] for i, arg in enumerate(op.regions[0].blocks[0].arguments)
                                            if i in arg_refs}
        self.steps: list[EpilogueStep] = []
        self.cmps: dict[ir.Value, tuple[str, Ref, Ref]] = {}
        self.integral: set[ir.Value] = set()  # float values known to hold integers

    def finish(self, value: ir.Value) -> Epilogue:
        out = self.ref(value)
        result = out.index if out.kind == "value" else None
        if result is None:
            self.steps.append(EpilogueStep("add", [out, Ref("const", const=0.0)]))
            result = len(self.steps) - 1 + self.value_base
        return Epilogue(self.steps, result)

    def decode(self, body_op: ir.Operation) -> None:
        name = body_op.name
        if name == "arith.constant":
            return
        if name in _INTEGRAL_PRESERVING and all(self.is_integral(v) for v in body_op.operands):
            self.integral.add(body_op.results[0])
        handler = _DECODERS.get(name)
        if handler is None:
            raise Unsupported(f"'{name}' in an elementwise body has no Torq lowering")
        handler(self, body_op)

    def is_integral(self, v: ir.Value) -> bool:
        if v in self.integral or int_width(v.type):
            return True
        c = constant_of(v)
        return c is not None and c.ndim == 0 and float(c).is_integer()

    def ref(self, v: ir.Value) -> Ref:
        if v in self.values:
            return self.values[v]
        c = constant_of(v)
        if c is not None and c.ndim == 0:
            if c.dtype.kind in "iu" and abs(int(c)) > _MAX_EXACT_INT:
                raise Unsupported(f"integer constant {int(c)} in {self.op.name} body is wider than 53 bits")
            return Ref("const", const=float(c))
        raise Unsupported(f"value {v.get_name()} used in the body of {self.op.name} comes from outside the op")

    def push(self, step: EpilogueStep, result: ir.Value) -> None:
        self.steps.append(step)
        self.values[result] = Ref("value", index=len(self.steps) - 1 + self.value_base)

    def _unary(self, body_op: ir.Operation, kind: str, to: str = "") -> None:
        self.push(EpilogueStep(kind, [self.ref(body_op.operands[0])], to=to), body_op.results[0])

    def binary(self, body_op: ir.Operation) -> None:
        kind = _BINARY.get(body_op.name) or _SHIFTS[body_op.name]
        self.push(EpilogueStep(kind, [self.ref(body_op.operands[0]), self.ref(body_op.operands[1])],
                               to=int_width(body_op.results[0].type)), body_op.results[0])

    def same_number(self, body_op: ir.Operation) -> None:
        # Values are held sign-extended already: the wider value (or the index) is the same number.
        self.values[body_op.results[0]] = self.ref(body_op.operands[0])

    def lookup(self, body_op: ir.Operation) -> None:
        self.push(_lut_step(self.op, body_op, self.ref), body_op.results[0])

    def zero_extend(self, body_op: ir.Operation) -> None:
        if int_width(body_op.operands[0].type) in ("", "i64"):
            raise Unsupported(f"arith.extui from {body_op.operands[0].type} in {self.op.name} body")
        self._unary(body_op, "zext", int_width(body_op.operands[0].type))

    def truncate(self, body_op: ir.Operation) -> None:
        self._unary(body_op, "trunc", int_width(body_op.results[0].type))

    def negate(self, body_op: ir.Operation) -> None:
        self._unary(body_op, "neg")

    def absolute(self, body_op: ir.Operation) -> None:
        """|x| as max(x, -x): two steps, exact (math.absf: a norm's |x|, F.normalize)."""
        x = self.ref(body_op.operands[0])
        self.steps.append(EpilogueStep("neg", [x]))
        negated = Ref("value", index=len(self.steps) - 1 + self.value_base)
        self.push(EpilogueStep("max", [x, negated]), body_op.results[0])

    def table_function(self, body_op: ir.Operation) -> None:
        if mlir_dtype(body_op.results[0].type) not in ("bf16", "f32", "f16"):
            raise Unsupported(f"'{body_op.name}' on {body_op.results[0].type} has no Torq lowering")
        self._unary(body_op, _TABLE_FNS[body_op.name])

    def power(self, body_op: ir.Operation) -> None:
        """x ** n as repeated f32 multiplication (a division for n < 0): math.fpowi, and
        math.powf of a constant integral exponent (a norm's x ** 2.0); powf's x ** 0.5 and
        x ** -0.5 are the sqrt and rsqrt tables."""
        c = constant_of(body_op.operands[1])
        if body_op.name == "math.powf" and c is not None and c.ndim == 0 and float(c) in (0.5, -0.5):
            self._unary(body_op, "sqrt" if float(c) > 0 else "rsqrt")
            return
        if c is None or c.ndim != 0 or not float(c).is_integer() or not 0 < abs(int(c)) <= _MAX_POWI:
            raise Unsupported(f"{body_op.name} in {self.op.name} body needs a constant nonzero integral exponent "
                              f"of magnitude at most {_MAX_POWI} (or 0.5, -0.5 for math.powf)")
        n, x = int(c), self.ref(body_op.operands[0])
        acc = x
        for _ in range(abs(n) - 1):
            self.steps.append(EpilogueStep("mul", [acc, x]))
            acc = Ref("value", index=len(self.steps) - 1 + self.value_base)
        if n < 0:
            self.steps.append(EpilogueStep("div", [Ref("const", const=1.0), acc]))
            acc = Ref("value", index=len(self.steps) - 1 + self.value_base)
        self.values[body_op.results[0]] = acc

    def compare(self, body_op: ir.Operation) -> None:
        pred = cmp_predicate(body_op)
        if pred not in _CMP or (body_op.name == "arith.cmpi" and pred.startswith("u")):
            raise Unsupported(f"comparison '{pred}' in {self.op.name} body")
        self.cmps[body_op.results[0]] = (_CMP[pred], self.ref(body_op.operands[0]), self.ref(body_op.operands[1]))

    def select(self, body_op: ir.Operation) -> None:
        cond = body_op.operands[0]
        if cond in self.cmps:
            pred, a, b = self.cmps[cond]
        elif str(cond.type) == "i1" and cond in self.values:
            # An i1 operand (a boolean mask, one byte of 0 / 1 per element): true is > 0.
            pred, a, b = "gt", self.values[cond], Ref("const", const=0.0)
        else:
            raise Unsupported("arith.select whose condition is neither a comparison nor an i1 operand")
        self.push(EpilogueStep("select_" + pred, [a, b, self.ref(body_op.operands[1]), self.ref(body_op.operands[2])]),
                  body_op.results[0])
        if self.is_integral(body_op.operands[1]) and self.is_integral(body_op.operands[2]):
            self.integral.add(body_op.results[0])

    def cast(self, body_op: ir.Operation) -> None:
        # sitofp: the integer (a dequantize's x - zero point) rounded to the float type.
        self._unary(body_op, "cast", mlir_dtype(body_op.results[0].type))
        if body_op.name == "arith.sitofp":
            self.integral.add(body_op.results[0])

    def round_even(self, body_op: ir.Operation) -> None:
        self._unary(body_op, "round")
        self.integral.add(body_op.results[0])

    def to_integer(self, body_op: ir.Operation) -> None:
        # The slices' float -> integer cast rounds to nearest; fptosi truncates. They agree
        # on integers, which is what a quantize (round, zero point, clamp) converts.
        if not self.is_integral(body_op.operands[0]) or not int_width(body_op.results[0].type):
            raise Unsupported(f"arith.fptosi in {self.op.name} body converts a value not known to be an "
                              f"integer (the slices' float to integer cast rounds, fptosi truncates)")
        self._unary(body_op, "cast", str(body_op.results[0].type))


# How `_BodyDecoder.decode` translates each body op it knows.
_DECODERS = {**{n: _BodyDecoder.binary for n in (*_BINARY, *_SHIFTS)},
             "arith.extsi": _BodyDecoder.same_number, "arith.index_cast": _BodyDecoder.same_number,
             "tensor.extract": _BodyDecoder.lookup, "arith.extui": _BodyDecoder.zero_extend,
             "arith.trunci": _BodyDecoder.truncate, "arith.negf": _BodyDecoder.negate,
             "math.absf": _BodyDecoder.absolute,
             **{n: _BodyDecoder.table_function for n in _TABLE_FNS}, "math.fpowi": _BodyDecoder.power,
             "math.powf": _BodyDecoder.power,
             "arith.cmpf": _BodyDecoder.compare, "arith.cmpi": _BodyDecoder.compare,
             "arith.select": _BodyDecoder.select,
             **{n: _BodyDecoder.cast for n in (*_FLOAT_CASTS, "arith.sitofp")},
             "math.roundeven": _BodyDecoder.round_even, "arith.fptosi": _BodyDecoder.to_integer}
