"""Torq lowering patterns: one matcher per pattern, used in two modes.

`torq-mark-patterns-for-super-tiling` runs the matchers in *mark* mode (tag
the ops of each group with `torq-fuse-group` / `torq-fuse-group-id`);
`torq-lower-to-torq-hl` runs the same matchers in *rewrite* mode (replace the
group with one TorqHL op). Because both modes share `match_group`, marking and
lowering cannot disagree.

Groups (principal op first):
- conv2d: a convolution-shaped `linalg.generic` (+ the `linalg.fill` of its
  accumulator, + an optional elementwise epilogue generic that is its only user:
  bias, batch-norm scale/shift, ReLU/ReLU6/clamp, residual add, ...);
- matmul: a matmul-shaped generic (B?, M, N, K), same fill and epilogue;
- elementwise: a standalone elementwise generic (add/sub/mul/max/min/clamp...).
Anything else is `Unsupported` with a reason, and the dispatch stays on host.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from iree.compiler import ir

from torq.runtime.program import EPILOGUE_INT_TYPES, Epilogue, EpilogueStep, Ref
from .ir_utils import constant_of, mlir_dtype, static_shape

FUSE_GROUP = "torq-fuse-group"
FUSE_GROUP_ID = "torq-fuse-group-id"


class Unsupported(Exception):
    """The op cannot run on the NPU; the message says why."""


@dataclass
class Contraction:
    kind: str  # "conv2d" | "matmul"
    attrs: dict
    macs: int


@dataclass
class Match:
    kind: str  # "conv2d" | "matmul" | "elementwise"
    principal: ir.Operation
    ops: list[ir.Operation]  # all ops of the group, principal first
    bottom: ir.Operation  # the op whose result leaves the group
    inputs: list[ir.Value]  # TorqHL operands, in order
    attrs: dict
    epilogue: Epilogue
    macs: int = 0


# --- affine map analysis -------------------------------------------------------

def _dim(e: ir.AffineExpr) -> int | None:
    return ir.AffineDimExpr(e).position if isinstance(e, ir.AffineDimExpr) else None


def _linear_terms(e: ir.AffineExpr) -> list[tuple[int, int]] | None:
    """`e` as a list of (dim, coefficient) if it is a positive linear sum of dims."""
    if isinstance(e, ir.AffineDimExpr):
        return [(ir.AffineDimExpr(e).position, 1)]
    if isinstance(e, ir.AffineAddExpr):
        a = ir.AffineAddExpr(e)
        lhs, rhs = _linear_terms(a.lhs), _linear_terms(a.rhs)
        return None if lhs is None or rhs is None else lhs + rhs
    if isinstance(e, ir.AffineMulExpr):
        m = ir.AffineMulExpr(e)
        for x, c in ((m.lhs, m.rhs), (m.rhs, m.lhs)):
            if isinstance(c, ir.AffineConstantExpr) and isinstance(x, ir.AffineDimExpr):
                return [(ir.AffineDimExpr(x).position, ir.AffineConstantExpr(c).value)]
    return None


def _maps(op: ir.Operation) -> list[ir.AffineMap]:
    return [ir.AffineMapAttr(a).value for a in ir.ArrayAttr(op.attributes["indexing_maps"])]


def _iterators(op: ir.Operation) -> list[str]:
    return [str(a).split("<")[-1].rstrip(">") for a in ir.ArrayAttr(op.attributes["iterator_types"])]


def _body_ops(op: ir.Operation) -> list[ir.Operation]:
    return [o.operation for o in op.regions[0].blocks[0].operations]


def _n_ins(op: ir.Operation) -> int:
    return int(list(ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"]))[0])


def _is_mul_add_body(op: ir.Operation) -> bool:
    """Body is `out + a*b`, optionally with casts of a and b first."""
    names = [o.name for o in _body_ops(op)]
    core = [n for n in names if n not in ("arith.extsi", "arith.extf", "arith.sitofp", "arith.extui")]
    return core in (["arith.mulf", "arith.addf", "linalg.yield"], ["arith.muli", "arith.addi", "linalg.yield"])


def classify_contraction(op: ir.Operation) -> Contraction | None:
    """Conv2d / matmul structure of a linalg.generic, or None if not one."""
    if op.name != "linalg.generic" or _n_ins(op) != 2 or "reduction" not in _iterators(op):
        return None
    if not _is_mul_add_body(op):
        return None
    maps = _maps(op)
    its = _iterators(op)
    in_map, w_map, out_map = maps
    out_dims = [_dim(e) for e in out_map.results]
    w_dims = [_dim(e) for e in w_map.results]
    if None in out_dims or None in w_dims:
        return None
    in_terms = [_linear_terms(e) for e in in_map.results]
    if any(t is None for t in in_terms):
        return None
    shapes = [static_shape(v.type) for v in op.operands]
    if any(s is None for s in shapes):
        return None
    ranges = _loop_ranges(op)
    spatial = [t for t in in_terms if len(t) > 1]
    if spatial:
        return _classify_conv(its, in_terms, w_dims, out_dims, ranges)
    return _classify_matmul(its, [t[0][0] for t in in_terms], w_dims, out_dims, ranges)


def _loop_ranges(op: ir.Operation) -> list[int]:
    """Static trip count of each loop dim, from operand shapes (dims as plain results)."""
    maps = _maps(op)
    n = maps[0].n_dims
    ranges = [0] * n
    for v, m in zip(op.operands, maps):
        shape = static_shape(v.type)
        for size, e in zip(shape, m.results):
            d = _dim(e)
            if d is not None:
                ranges[d] = size
    return ranges


def _classify_conv(its, in_terms, w_dims, out_dims, ranges) -> Contraction | None:
    letters_in, spatial_pairs = [], []
    for t in in_terms:
        if len(t) == 1:
            d, c = t[0]
            if c != 1:
                return None
            if d in w_dims and its[d] == "reduction":
                letters_in.append("C")
            elif d in out_dims and d not in w_dims:
                letters_in.append("N")
            else:
                return None  # depthwise / grouped: not in this pattern
        elif len(t) == 2:
            (a, ca), (b, cb) = t
            if its[a] == "reduction" and its[b] == "parallel":
                (a, ca), (b, cb) = (b, cb), (a, ca)
            if not (its[a] == "parallel" and its[b] == "reduction"):
                return None
            spatial_pairs.append((a, ca, b, cb))
            letters_in.append("HW"[len(spatial_pairs) - 1] if len(spatial_pairs) <= 2 else "?")
        else:
            return None
    if len(spatial_pairs) != 2 or "?" in letters_in or letters_in.count("C") != 1:
        return None
    (oh, sh, kh, dh), (ow, sw, kw, dw) = spatial_pairs
    c_dim = next(t[0][0] for t, l in zip(in_terms, letters_in) if l == "C")
    w_letters = []
    for d in w_dims:
        w_letters.append({c_dim: "C", kh: "H", kw: "W"}.get(d, "O" if d in out_dims else "?"))
    o_dim = next((d for d, l in zip(w_dims, w_letters) if l == "O"), None)
    if "?" in w_letters or o_dim is None:
        return None
    n_dim = next((t[0][0] for t, l in zip(in_terms, letters_in) if l == "N"), None)
    out_letters = [{o_dim: "O", oh: "H", ow: "W", n_dim: "N"}.get(d, "?") for d in out_dims]
    if "?" in out_letters:
        return None
    out_elems = 1
    for d in out_dims:
        out_elems *= ranges[d]
    macs = out_elems * ranges[c_dim] * ranges[kh] * ranges[kw]
    attrs = {"input_dims": "".join(letters_in), "weight_dims": "".join(w_letters),
             "output_dims": "".join(out_letters), "stride": [sh, sw], "dilation": [dh, dw]}
    return Contraction("conv2d", attrs, macs)


def _classify_matmul(its, in_dims, w_dims, out_dims, ranges) -> Contraction | None:
    red = [d for d, it in enumerate(its) if it == "reduction"]
    if len(red) != 1:
        return None
    k = red[0]

    def letter(d):
        if d == k:
            return "K"
        in_a, in_b = d in in_dims, d in w_dims
        if in_a and in_b:
            return "B"
        return "M" if in_a else "N" if in_b else "?"

    la, lb, lo = ("".join(letter(d) for d in ds) for ds in (in_dims, w_dims, out_dims))
    for s in (la, lb, lo):
        if "?" in s or len(set(s)) != len(s):
            return None
    if "K" not in la or "K" not in lb or "K" in lo:
        return None
    out_elems = 1
    for d in out_dims:
        out_elems *= ranges[d]
    return Contraction("matmul", {"lhs_dims": la, "rhs_dims": lb, "output_dims": lo},
                       out_elems * ranges[k])


# --- elementwise bodies -----------------------------------------------------------

_BINARY = {"arith.addf": "add", "arith.addi": "add", "arith.subf": "sub", "arith.subi": "sub",
           "arith.mulf": "mul", "arith.muli": "mul", "arith.divf": "div",
           "arith.maximumf": "max", "arith.maxnumf": "max", "arith.maxsi": "max",
           "arith.minimumf": "min", "arith.minnumf": "min", "arith.minsi": "min"}
_CMP = {"ogt": "gt", "ugt": "gt", "sgt": "gt", "olt": "lt", "ult": "lt", "slt": "lt",
        "oge": "ge", "uge": "ge", "sge": "ge", "ole": "le", "ule": "le", "sle": "le"}
_SHIFTS = {"arith.shli": "shl", "arith.shrsi": "shr_s", "arith.shrui": "shr_u"}
_FLOAT_CASTS = {"arith.truncf", "arith.extf"}
# Integer constants travel as f64 in the executable: exact up to 2**53.
_MAX_EXACT_INT = 1 << 53


def _int_width(t: ir.Type) -> str:
    """The integer type name ("i32", "i64", ...) a step wraps to, or "" for floats."""
    s = str(t)
    return s if s in EPILOGUE_INT_TYPES else ""


def _cmp_predicate(op: ir.Operation) -> str:
    # Predicates print as integers in the generic attribute; map through the enum order.
    names_f = ["false", "oeq", "ogt", "oge", "olt", "ole", "one", "ord", "ueq", "ugt", "uge",
               "ult", "ule", "une", "uno", "true"]
    names_i = ["eq", "ne", "slt", "sle", "sgt", "sge", "ult", "ule", "ugt", "uge"]
    v = ir.IntegerAttr(op.attributes["predicate"]).value
    return (names_f if op.name == "arith.cmpf" else names_i)[v]


def _is_identity_like(m: ir.AffineMap) -> bool:
    dims = [_dim(e) for e in m.results]
    return None not in dims and len(set(dims)) == len(dims) and len(dims) == m.n_dims


def decode_elementwise(op: ir.Operation, arg_refs: dict[int, Ref], value_base: int = 0) -> Epilogue:
    """Translate an elementwise generic body into epilogue steps.

    `arg_refs` gives the Ref of each `ins` block argument; the `outs` argument
    must be unused (no accumulation). Step results are values
    `value_base`, `value_base + 1`, ... (value 0 is the principal result of a
    contraction, so its epilogue uses base 1).
    """
    block = op.regions[0].blocks[0]
    values: dict[str, Ref] = {}
    for i, arg in enumerate(block.arguments):
        if i in arg_refs:
            values[arg.get_name()] = arg_refs[i]
    steps: list[EpilogueStep] = []
    cmps: dict[str, tuple[str, Ref, Ref]] = {}

    def ref(v: ir.Value) -> Ref:
        name = v.get_name()
        if name in values:
            return values[name]
        c = constant_of(v)
        if c is not None and c.ndim == 0:
            if c.dtype.kind in "iu" and abs(int(c)) > _MAX_EXACT_INT:
                raise Unsupported(f"integer constant {int(c)} in {op.name} body is wider than 53 bits")
            return Ref("const", const=float(c))
        raise Unsupported(f"value {name} used in the body of {op.name} comes from outside the op")

    def push(step: EpilogueStep, result: ir.Value):
        steps.append(step)
        values[result.get_name()] = Ref("value", index=len(steps) - 1 + value_base)

    for body_op in _body_ops(op):
        name = body_op.name
        if name == "linalg.yield":
            out = ref(body_op.operands[0])
            result = out.index if out.kind == "value" else None
            if result is None:
                steps.append(EpilogueStep("add", [out, Ref("const", const=0.0)]))
                result = len(steps) - 1 + value_base
            return Epilogue(steps, result)
        if name == "arith.constant":
            continue
        if name in _BINARY:
            push(EpilogueStep(_BINARY[name], [ref(body_op.operands[0]), ref(body_op.operands[1])],
                              to=_int_width(body_op.results[0].type)), body_op.results[0])
        elif name in _SHIFTS:
            push(EpilogueStep(_SHIFTS[name], [ref(body_op.operands[0]), ref(body_op.operands[1])],
                              to=_int_width(body_op.results[0].type)), body_op.results[0])
        elif name == "arith.extsi":
            # Values are held sign-extended already: the wider value is the same number.
            values[body_op.results[0].get_name()] = ref(body_op.operands[0])
        elif name == "arith.extui":
            if _int_width(body_op.operands[0].type) in ("", "i64"):
                raise Unsupported(f"arith.extui from {body_op.operands[0].type} in {op.name} body")
            push(EpilogueStep("zext", [ref(body_op.operands[0])], to=_int_width(body_op.operands[0].type)),
                 body_op.results[0])
        elif name == "arith.trunci":
            push(EpilogueStep("trunc", [ref(body_op.operands[0])], to=_int_width(body_op.results[0].type)),
                 body_op.results[0])
        elif name in ("arith.negf",):
            push(EpilogueStep("neg", [ref(body_op.operands[0])]), body_op.results[0])
        elif name in ("arith.cmpf", "arith.cmpi"):
            pred = _cmp_predicate(body_op)
            if pred not in _CMP or (name == "arith.cmpi" and pred.startswith("u")):
                raise Unsupported(f"comparison '{pred}' in {op.name} body")
            cmps[body_op.results[0].get_name()] = (_CMP[pred], ref(body_op.operands[0]),
                                                   ref(body_op.operands[1]))
        elif name == "arith.select":
            cond = body_op.operands[0].get_name()
            if cond not in cmps:
                raise Unsupported("arith.select whose condition is not a comparison")
            pred, a, b = cmps[cond]
            push(EpilogueStep("select_" + pred, [a, b, ref(body_op.operands[1]), ref(body_op.operands[2])]),
                 body_op.results[0])
        elif name in _FLOAT_CASTS:
            push(EpilogueStep("cast", [ref(body_op.operands[0])],
                              to=mlir_dtype(body_op.results[0].type)), body_op.results[0])
        else:
            raise Unsupported(f"'{name}' in an elementwise body has no Torq lowering")
    raise Unsupported("elementwise body without linalg.yield")


# --- groups -------------------------------------------------------------------------

def _single_user(v: ir.Value) -> ir.Operation | None:
    users = [u.owner for u in v.uses]
    return users[0] if len(users) == 1 else None


def is_zero_fill(op: ir.Operation) -> bool:
    """`linalg.fill` of 0, or its generalized form (no ins, body yields 0)."""
    if op.name == "linalg.fill":
        c = constant_of(op.operands[0])
    elif op.name == "linalg.generic" and _n_ins(op) <= 1:
        body = _body_ops(op)
        if len(body) != 1 or body[0].name != "linalg.yield":
            return False
        v = body[0].operands[0]
        if isinstance(v.owner, ir.Block):  # yields its scalar input
            if _n_ins(op) != 1 or v.arg_number != 0 or static_shape(op.operands[0].type):
                return False
            v = op.operands[0]
        c = constant_of(v)
    else:
        return False
    return c is not None and c.ndim == 0 and float(c) == 0.0


def _is_elementwise(op: ir.Operation) -> bool:
    return (op.name == "linalg.generic" and all(it == "parallel" for it in _iterators(op))
            and all(_dim(e) is not None for m in _maps(op) for e in m.results))


def _axes(in_map: ir.AffineMap, out_map: ir.AffineMap) -> tuple[int, ...]:
    out_dims = [_dim(e) for e in out_map.results]
    axes = []
    for e in in_map.results:
        d = _dim(e)
        if d not in out_dims:
            raise Unsupported("operand indexed by a dim the result does not have")
        axes.append(out_dims.index(d))
    return tuple(axes)


def _epilogue_of(ep: ir.Operation, principal_result: ir.Value | None, inputs: list[ir.Value]) -> Epilogue:
    """Decode `ep` with its ins as refs; appends non-principal ins to `inputs`."""
    maps = _maps(ep)
    out_map = maps[-1]
    if not _is_identity_like(out_map):
        raise Unsupported("elementwise op whose result map is not a permutation")
    refs: dict[int, Ref] = {}
    n = _n_ins(ep)
    for i in range(n):
        v = ep.operands[i]
        if principal_result is not None and v == principal_result:
            if _axes(maps[i], out_map) != tuple(range(len(out_map.results))):
                raise Unsupported("epilogue reads the contraction result transposed")
            refs[i] = Ref("value", index=0)
            continue
        c = constant_of(v)
        shape = static_shape(v.type)
        if c is not None and c.size == 1 and shape is not None and c.ndim > 0:
            refs[i] = Ref("const", const=float(c.reshape(-1)[0]))
            continue
        refs[i] = Ref("operand", index=len(inputs), axes=_axes(maps[i], out_map))
        inputs.append(v)
    return decode_elementwise(ep, refs, value_base=0 if principal_result is None else 1)


def _is_epilogue_of_producer(op: ir.Operation) -> bool:
    """Whether `op` was fused as the epilogue of the contraction producing one of its inputs.

    A consumer the contraction could not take (several users, an op with no
    epilogue step) is a group of its own, so it is matched or refused itself.
    """
    for v in op.operands[: _n_ins(op)]:
        producer = v.owner
        if isinstance(producer, ir.Block) or producer.name != "linalg.generic":
            continue
        if _single_user(v) is None or classify_contraction(producer) is None:
            continue
        try:
            group = match_group(producer)
        except Unsupported:
            continue
        if group is not None and group.bottom == op:
            return True
    return False


def match_group(op: ir.Operation) -> Match | None:
    """The Torq group whose principal op is `op`, or None if `op` is no principal.

    Raises Unsupported when `op` is a linalg op no pattern covers.
    """
    if op.name != "linalg.generic":
        return None
    con = classify_contraction(op)
    if con is not None:
        init = op.operands[2]
        fill = init.owner if not isinstance(init.owner, ir.Block) else None
        if fill is None or not is_zero_fill(fill):
            raise Unsupported(f"{con.kind} whose accumulator is not a zero fill")
        ops = [op, fill]
        inputs = [op.operands[0], op.operands[1]]
        bottom = op
        epi = Epilogue([], 0)
        user = _single_user(op.results[0])
        if user is not None and _is_elementwise(user) and _is_identity_like(_maps(user)[-1]):
            try:
                epi = _epilogue_of(user, op.results[0], inputs_probe := list(inputs))
                inputs = inputs_probe
                ops.append(user)
                bottom = user
            except Unsupported:
                pass
        return Match(con.kind, op, ops, bottom, inputs, con.attrs, epi, con.macs)
    if is_zero_fill(op):
        return None  # part of the contraction group that accumulates into it
    if _is_elementwise(op):
        if _is_epilogue_of_producer(op):
            return None  # matched as part of that contraction's group
        inputs: list[ir.Value] = []
        epi = _epilogue_of(op, None, inputs)
        return Match("elementwise", op, [op], op, inputs, {}, epi, 0)
    raise Unsupported(f"'{op.name}' with this structure has no Torq pattern")


def epilogue_to_json(e: Epilogue) -> str:
    return json.dumps({"steps": [{"op": s.op, "to": s.to, "args": [
        {"kind": a.kind, "index": a.index, "axes": list(a.axes), "const": a.const} for a in s.args]}
        for s in e.steps], "result": e.result})


def epilogue_from_json(s: str) -> Epilogue:
    d = json.loads(s)
    return Epilogue([EpilogueStep(st["op"], [Ref(a["kind"], a["index"], tuple(a["axes"]), a["const"])
                                             for a in st["args"]], st["to"]) for st in d["steps"]],
                    d["result"])
