"""Elementwise bodies decoded into epilogue steps (`decode_elementwise`): the
arith / math ops each step models, selects, integer widths, tables."""

from __future__ import annotations

from iree.compiler import ir

from torq.contract.program import EPILOGUE_INT_TYPES, LUT, MAX_LUT_ENTRIES, Epilogue, EpilogueStep, Ref

from ..ir_utils import constant_of, mlir_dtype, region_ops
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
    return EpilogueStep(LUT, [ref(extract.operands[1])] + [Ref("const", const=float(t)) for t in table],
                        to=width)


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
    block = op.regions[0].blocks[0]
    # Keyed by the values themselves: Value.get_name() numbers the whole enclosing module
    # each time (it made decoding quadratic in the module's size).
    values: dict[ir.Value, Ref] = {}
    for i, arg in enumerate(block.arguments):
        if i in arg_refs:
            values[arg] = arg_refs[i]
    steps: list[EpilogueStep] = []
    cmps: dict[ir.Value, tuple[str, Ref, Ref]] = {}
    integral: set[ir.Value] = set()  # float values known to hold integers

    def is_integral(v: ir.Value) -> bool:
        if v in integral or int_width(v.type):
            return True
        c = constant_of(v)
        return c is not None and c.ndim == 0 and float(c).is_integer()

    def ref(v: ir.Value) -> Ref:
        if v in values:
            return values[v]
        c = constant_of(v)
        if c is not None and c.ndim == 0:
            if c.dtype.kind in "iu" and abs(int(c)) > _MAX_EXACT_INT:
                raise Unsupported(f"integer constant {int(c)} in {op.name} body is wider than 53 bits")
            return Ref("const", const=float(c))
        raise Unsupported(f"value {v.get_name()} used in the body of {op.name} comes from outside the op")

    def push(step: EpilogueStep, result: ir.Value):
        steps.append(step)
        values[result] = Ref("value", index=len(steps) - 1 + value_base)

    def push_powi(body_op: ir.Operation):
        """x ** n as repeated f32 multiplication (a division for n < 0)."""
        c = constant_of(body_op.operands[1])
        if c is None or c.ndim != 0 or not 0 < abs(int(c)) <= _MAX_POWI:
            raise Unsupported(f"math.fpowi in {op.name} body needs a constant nonzero exponent of "
                              f"magnitude at most {_MAX_POWI}")
        n, x = int(c), ref(body_op.operands[0])
        acc = x
        for _ in range(abs(n) - 1):
            steps.append(EpilogueStep("mul", [acc, x]))
            acc = Ref("value", index=len(steps) - 1 + value_base)
        if n < 0:
            steps.append(EpilogueStep("div", [Ref("const", const=1.0), acc]))
            acc = Ref("value", index=len(steps) - 1 + value_base)
        values[body_op.results[0]] = acc

    for body_op in region_ops(op):
        name = body_op.name
        at_stop = stop is not None and body_op == stop
        if name == "linalg.yield" or at_stop:
            out = ref(stop_value if at_stop else body_op.operands[0])
            result = out.index if out.kind == "value" else None
            if result is None:
                steps.append(EpilogueStep("add", [out, Ref("const", const=0.0)]))
                result = len(steps) - 1 + value_base
            return Epilogue(steps, result)
        if name == "arith.constant":
            continue
        if name in _INTEGRAL_PRESERVING and all(is_integral(v) for v in body_op.operands):
            integral.add(body_op.results[0])
        if name in _BINARY:
            push(EpilogueStep(_BINARY[name], [ref(body_op.operands[0]), ref(body_op.operands[1])],
                              to=int_width(body_op.results[0].type)), body_op.results[0])
        elif name in _SHIFTS:
            push(EpilogueStep(_SHIFTS[name], [ref(body_op.operands[0]), ref(body_op.operands[1])],
                              to=int_width(body_op.results[0].type)), body_op.results[0])
        elif name in ("arith.extsi", "arith.index_cast"):
            # Values are held sign-extended already: the wider value (or the index) is the same number.
            values[body_op.results[0]] = ref(body_op.operands[0])
        elif name == "tensor.extract":
            push(_lut_step(op, body_op, ref), body_op.results[0])
        elif name == "arith.extui":
            if int_width(body_op.operands[0].type) in ("", "i64"):
                raise Unsupported(f"arith.extui from {body_op.operands[0].type} in {op.name} body")
            push(EpilogueStep("zext", [ref(body_op.operands[0])], to=int_width(body_op.operands[0].type)),
                 body_op.results[0])
        elif name == "arith.trunci":
            push(EpilogueStep("trunc", [ref(body_op.operands[0])], to=int_width(body_op.results[0].type)),
                 body_op.results[0])
        elif name in ("arith.negf",):
            push(EpilogueStep("neg", [ref(body_op.operands[0])]), body_op.results[0])
        elif name in _TABLE_FNS:
            if mlir_dtype(body_op.results[0].type) not in ("bf16", "f32", "f16"):
                raise Unsupported(f"'{name}' on {body_op.results[0].type} has no Torq lowering")
            push(EpilogueStep(_TABLE_FNS[name], [ref(body_op.operands[0])]), body_op.results[0])
        elif name == "math.fpowi":
            push_powi(body_op)
        elif name in ("arith.cmpf", "arith.cmpi"):
            pred = cmp_predicate(body_op)
            if pred not in _CMP or (name == "arith.cmpi" and pred.startswith("u")):
                raise Unsupported(f"comparison '{pred}' in {op.name} body")
            cmps[body_op.results[0]] = (_CMP[pred], ref(body_op.operands[0]),
                                                   ref(body_op.operands[1]))
        elif name == "arith.select":
            cond = body_op.operands[0]
            if cond in cmps:
                pred, a, b = cmps[cond]
            elif str(body_op.operands[0].type) == "i1" and cond in values:
                # An i1 operand (a boolean mask, one byte of 0 / 1 per element): true is > 0.
                pred, a, b = "gt", values[cond], Ref("const", const=0.0)
            else:
                raise Unsupported("arith.select whose condition is neither a comparison nor an i1 operand")
            push(EpilogueStep("select_" + pred, [a, b, ref(body_op.operands[1]), ref(body_op.operands[2])]),
                 body_op.results[0])
            if is_integral(body_op.operands[1]) and is_integral(body_op.operands[2]):
                integral.add(body_op.results[0])
        elif name in _FLOAT_CASTS or name == "arith.sitofp":
            # sitofp: the integer (a dequantize's x - zero point) rounded to the float type.
            push(EpilogueStep("cast", [ref(body_op.operands[0])],
                              to=mlir_dtype(body_op.results[0].type)), body_op.results[0])
            if name == "arith.sitofp":
                integral.add(body_op.results[0])
        elif name == "math.roundeven":
            push(EpilogueStep("round", [ref(body_op.operands[0])]), body_op.results[0])
            integral.add(body_op.results[0])
        elif name == "arith.fptosi":
            # The slices' float -> integer cast rounds to nearest; fptosi truncates. They agree
            # on integers, which is what a quantize (round, zero point, clamp) converts.
            if not is_integral(body_op.operands[0]) or not int_width(body_op.results[0].type):
                raise Unsupported(f"arith.fptosi in {op.name} body converts a value not known to be an "
                                  f"integer (the slices' float to integer cast rounds, fptosi truncates)")
            push(EpilogueStep("cast", [ref(body_op.operands[0])], to=str(body_op.results[0].type)),
                 body_op.results[0])
        else:
            raise Unsupported(f"'{name}' in an elementwise body has no Torq lowering")
    raise Unsupported("elementwise body without linalg.yield")
