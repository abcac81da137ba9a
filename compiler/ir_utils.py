"""Small helpers over the MLIR Python bindings shared by the Torq passes."""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import importlib.util
import io
import re
import struct
import sys
import types
from typing import Callable, Container, Iterable, Iterator

import numpy as np
from iree.compiler import ir

from torq.contract.program import DTYPE_BYTES

# Dialects that have no Python module in iree.compiler.dialects. Whenever the
# bindings wrap one of their ops (walking, iterating a block) they try to import
# `iree.compiler.dialects.<namespace>`, and a failed import is not remembered, so
# every op searched the file system again (issue 15's profile: most of a compile).
# An empty module per namespace is found once and remembered; ops of these
# dialects stay generic `OpView`s, as before.
_DIALECTS_WITHOUT_MODULE = ("torq", "torq_hl", "torq_nss", "torch", "torch_c", "iree_linalg_ext",
                            "ml_program", "bufferization")


def _register_empty_dialect_modules() -> None:
    for ns in _DIALECTS_WITHOUT_MODULE:
        name = f"iree.compiler.dialects.{ns}"
        if name not in sys.modules and importlib.util.find_spec(name) is None:
            sys.modules[name] = types.ModuleType(name, f"no Python op classes for the '{ns}' dialect")


_register_empty_dialect_modules()


class CompileError(Exception):
    """A user-facing compile error: one line, naming the op and location."""


def mlir_dtype(t: ir.Type) -> str:
    """Element type as the Torq dtype string ("f32", "bf16", "i8", ...)."""
    s = str(t)
    if s in ("f32", "bf16", "f16", "f64"):
        return s
    if s.startswith("i"):
        return s
    raise CompileError(f"unsupported element type {s}")


def element_type(v_or_t) -> ir.Type:
    t = v_or_t.type if hasattr(v_or_t, "type") else v_or_t
    return ir.RankedTensorType(t).element_type


def static_shape(t: ir.Type) -> tuple[int, ...] | None:
    if not isinstance(t, ir.RankedTensorType):
        return None
    rt = ir.RankedTensorType(t)
    if not rt.has_static_shape:
        return None
    return tuple(rt.shape)


def tensor_nbytes(t: ir.Type) -> int:
    shape = static_shape(t)
    assert shape is not None
    n = DTYPE_BYTES[mlir_dtype(element_type(t))]
    for d in shape:
        n *= d
    return n


def walk_ops(op: ir.Operation) -> Iterator[ir.Operation]:
    """Pre-order walk over `op` and all nested ops (materialised first).

    The callback keeps the `ir.Operation` it is given: asking for its `opview`
    builds a Python view class for every op (and, for a dialect without a
    module, used to search the file system; see `_DIALECTS_WITHOUT_MODULE`).
    """
    out: list[ir.Operation] = []

    def cb(o):
        out.append(o)
        return ir.WalkResult.ADVANCE

    op.walk(cb, ir.WalkOrder.PRE_ORDER)
    return iter(out)


def block_ops(block: ir.Block) -> list[ir.Operation]:
    return [o.operation for o in block.operations]


def region_ops(op: ir.Operation) -> list[ir.Operation]:
    """The ops of the first block of `op`'s first region (a linalg body, a function, a loop body)."""
    return block_ops(op.regions[0].blocks[0])


def box_term(e: ir.AffineExpr) -> tuple[int | None, int, int] | None:
    """(loop dim or None, stride, offset) of an indexing map result `d`, `d * s`, `d + c`,
    `d * s + c` or `c` (s >= 1, c >= 0: an element of a box read every s-th), else None."""
    offset = 0
    if isinstance(e, ir.AffineAddExpr) and isinstance(ir.AffineAddExpr(e).rhs, ir.AffineConstantExpr):
        offset, e = ir.AffineConstantExpr(ir.AffineAddExpr(e).rhs).value, ir.AffineAddExpr(e).lhs
    elif isinstance(e, ir.AffineConstantExpr):
        c = ir.AffineConstantExpr(e).value
        return (None, 1, c) if c >= 0 else None
    stride = 1
    if isinstance(e, ir.AffineMulExpr) and isinstance(ir.AffineMulExpr(e).rhs, ir.AffineConstantExpr):
        stride, e = ir.AffineConstantExpr(ir.AffineMulExpr(e).rhs).value, ir.AffineMulExpr(e).lhs
    if not isinstance(e, ir.AffineDimExpr) or stride < 1 or offset < 0:
        return None
    return ir.AffineDimExpr(e).position, stride, offset


def box_term_expr(dim: int | None, stride: int, offset: int) -> ir.AffineExpr:
    """The map result `box_term` reads as (dim, stride, offset)."""
    if dim is None:
        return ir.AffineExpr.get_constant(offset)
    e = ir.AffineExpr.get_dim(dim)
    if stride != 1:
        e = ir.AffineExpr.get_mul(e, ir.AffineExpr.get_constant(stride))
    return ir.AffineExpr.get_add(e, ir.AffineExpr.get_constant(offset)) if offset else e


def _static_box_attributes(offsets: list[int], sizes: list[int], segments: list[int],
                           strides: list[int] | None = None) -> dict:
    """The attributes of a static slice op (no dynamic offsets, sizes or strides; unit
    strides unless given)."""
    i64 = ir.DenseI64ArrayAttr.get
    return {"static_offsets": i64(list(offsets)), "static_sizes": i64(list(sizes)),
            "static_strides": i64(list(strides or [1] * len(sizes))),
            "operandSegmentSizes": ir.DenseI32ArrayAttr.get(segments)}


def static_slice(source: ir.Value, offsets: list[int], sizes: list[int], result: ir.Type,
                 strides: list[int] | None = None) -> ir.Value:
    """A static `tensor.extract_slice` of `source` (a DMA box, unit-stride unless `strides`),
    at the insertion point."""
    return ir.Operation.create("tensor.extract_slice", results=[result], operands=[source],
                               attributes=_static_box_attributes(offsets, sizes, [1, 0, 0, 0], strides)).results[0]


def static_insert(source: ir.Value, dest: ir.Value, offsets: list[int], sizes: list[int]) -> ir.Value:
    """A static unit-stride `tensor.insert_slice` of `source` into `dest`, at the insertion point."""
    return ir.Operation.create("tensor.insert_slice", results=[dest.type], operands=[source, dest],
                               attributes=_static_box_attributes(offsets, sizes, [1, 1, 0, 0, 0])).results[0]


def through_reshapes(value: ir.Value) -> ir.Value:
    """The value a chain of static `flow.tensor.reshape`s (IREE's, or the target's) reshapes."""
    while not isinstance(value.owner, ir.Block) and value.owner.name == "flow.tensor.reshape" \
            and len(value.owner.operands) == 1:
        value = value.owner.operands[0]
    return value


def reshaped(value: ir.Value, shape: tuple[int, ...]) -> ir.Value:
    """`value` with static `shape` (a `flow.tensor.reshape`, which moves no data) at the
    insertion point; `value` itself when it has that shape or is no ranked tensor."""
    from iree.compiler.dialects import flow

    if not isinstance(value.type, ir.RankedTensorType) or \
            static_shape(value.type) == (None if shape is None else tuple(shape)):
        return value
    return flow.TensorReshapeOp(ir.RankedTensorType.get(list(shape), element_type(value.type)), value, [], []).result


def erase_unused(ops: Callable[[], Iterable], names: Container[str] | None = None) -> None:
    """Erases the ops `ops()` lists whose results nothing reads, those named in `names` (or,
    with None, any op with results), again until none is left: erasing one may leave its
    operands' producers unread. The one sweep the passes share after a rewrite."""
    while True:
        dead = [o for o in (getattr(x, "operation", x) for x in ops())
                if o.results and (names is None or o.name in names) and not any(list(r.uses) for r in o.results)]
        for o in reversed(dead):
            o.erase()
        if not dead:
            return


def sync_function_type(func: ir.Operation) -> None:
    """Sets `func`'s type from its entry block's arguments and its `func.return` operands, after
    a rewrite changed an argument's or a result's type (or erased an argument)."""
    block = func.regions[0].blocks[0]
    ret = block_ops(block)[-1]
    func.attributes["function_type"] = ir.TypeAttr.get(
        ir.FunctionType.get([a.type for a in block.arguments], [v.type for v in ret.operands]))


def functions(module: ir.Module) -> list[ir.Operation]:
    """The module's `func.func` ops, listed first (a pass may replace them as it goes)."""
    return [op.operation for op in module.body.operations if op.operation.name == "func.func"]


def replace_function(func: ir.Operation, new: ir.Operation) -> ir.Operation:
    """Puts function `new` (rewritten in a scratch module) in `func`'s place, erasing `func`; returns `new`."""
    new.move_before(func)
    func.erase()
    return new


def replace_with_op(op: ir.Operation, name: str, attributes: dict, operands: list | None = None) -> ir.Operation:
    """Replaces one-result `op` with a new `name` op of its result type, at its place and location."""
    with ir.InsertionPoint(op), op.location:
        new = ir.Operation.create(name, results=[op.results[0].type], operands=operands, attributes=attributes)
    op.results[0].replace_all_uses_with(new.results[0])
    op.erase()
    return new


def indexing_maps(op: ir.Operation) -> list[ir.AffineMap]:
    """The `indexing_maps` of a linalg structured op (ins then outs)."""
    return [ir.AffineMapAttr(a).value for a in ir.ArrayAttr(op.attributes["indexing_maps"])]


def map_dims(m: ir.AffineMap) -> list[int] | None:
    """The loop position of each result of `m`, or None if some result is not a plain dim."""
    out = []
    for e in m.results:
        if not isinstance(e, ir.AffineDimExpr):
            return None
        out.append(ir.AffineDimExpr(e).position)
    return out


def defined_outside(v: ir.Value, op: ir.Operation) -> bool:
    """Whether `v` is defined outside `op` (not in its regions, at any depth)."""
    owner = v.owner
    parent = owner.owner if isinstance(owner, ir.Block) else owner.parent
    while parent is not None:
        if parent == op:
            return False
        parent = parent.parent
    return True


def clone_remapped(ops: Iterable[ir.Operation], mapping: dict) -> None:
    """Clones `ops` in order at the insertion point, each operand found in `mapping` replaced
    by its value there; `mapping` gains each original result -> its clone's (a body moved
    into a new op: its block arguments mapped to the new block's first)."""
    for o in ops:
        c = o.clone()
        for i, v in enumerate(c.operands):
            if v in mapping:
                c.operands[i] = mapping[v]
        mapping.update(zip(o.results, c.results))


def iterator_types(op: ir.Operation) -> list[str]:
    """"parallel" / "reduction" per loop of a linalg structured op."""
    return [str(a).split("<")[-1].rstrip(">") for a in ir.ArrayAttr(op.attributes["iterator_types"])]


def loop_ranges(op: ir.Operation) -> list[int]:
    """Static trip count of each loop dim, from operand shapes (dims as plain results)."""
    maps = indexing_maps(op)
    ranges = [0] * maps[0].n_dims
    for v, m in zip(op.operands, maps):
        for size, e in zip(static_shape(v.type) or (), m.results):  # a scalar operand: ()
            if isinstance(e, ir.AffineDimExpr):
                ranges[ir.AffineDimExpr(e).position] = size
    return ranges


def inline_function_text(text: str, before: ir.Operation, args: list[ir.Value]) -> ir.Value:
    """Clones the body of the one function in module `text` before `before`, its arguments
    replaced by `args`; returns the value it returns."""
    template = ir.Module.parse(text)
    ops = [o.operation for o in template.body.operations[0].regions[0].blocks[0].operations]
    ip = ir.InsertionPoint(before)
    mapped: dict = {}
    for t in ops[:-1]:
        c = t.clone(ip=ip)
        for k, v in enumerate(t.operands):
            c.operands[k] = args[ir.BlockArgument(v).arg_number] if isinstance(v.owner, ir.Block) else mapped[v]
        mapped.update(zip(t.results, c.results))
    return mapped[ops[-1].operands[0]]


def n_inputs(op: ir.Operation) -> int:
    """Number of `ins` operands of a linalg structured op."""
    return int(list(ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"]))[0])


def generic_with_inputs(op: ir.Operation, inputs: list[ir.Value], maps: list[ir.AffineMap],
                        replaced: list[ir.Value], dropped: Container[int] = ()) -> ir.Operation:
    """linalg.generic `op` rebuilt (and erased) with `inputs` appended to its inputs, read
    through `maps`, and its inputs numbered in `dropped` removed (their block arguments must
    be unread): its body reads the new block arguments where it read `replaced` (values its
    body uses, defined in it or above it), and ops left unused are dropped. Returns the new
    generic, whose results replace `op`'s."""
    from iree.compiler.dialects import linalg

    n_in = n_inputs(op)
    kept = [i for i in range(n_in) if i not in dropped]
    old_maps = indexing_maps(op)
    ins, outs = [op.operands[i] for i in kept] + inputs, list(op.operands[n_in:])
    with ir.InsertionPoint(op), op.location:
        new = linalg.GenericOp([r.type for r in op.results], ins, outs,
                               ir.ArrayAttr.get([ir.AffineMapAttr.get(m) for m in [old_maps[i] for i in kept] + maps
                                                 + old_maps[n_in:]]),
                               op.attributes["iterator_types"])
    old_args = list(op.regions[0].blocks[0].arguments)
    types = [old_args[i].type for i in kept] + [ir.RankedTensorType(v.type).element_type for v in inputs] + \
        [a.type for a in old_args[n_in:]]
    block = new.regions[0].blocks.append(*types)
    args = list(block.arguments)
    mapping = dict(zip([old_args[i] for i in kept], args[:len(kept)])) | \
        dict(zip(old_args[n_in:], args[len(kept) + len(inputs):]))
    mapping |= dict(zip(replaced, args[len(kept):len(kept) + len(inputs)]))
    with ir.InsertionPoint(block):
        clone_remapped([o for o in region_ops(op) if not (o.results and o.results[0] in replaced)], mapping)
    erase_unused(lambda: block.operations)
    for old, result in zip(op.results, new.results):
        old.replace_all_uses_with(result)
    op.erase()
    return new


def int_array(attr: ir.Attribute) -> list[int]:
    if isinstance(attr, ir.DenseI64ArrayAttr):
        return list(ir.DenseI64ArrayAttr(attr))
    return [ir.IntegerAttr(a).value for a in ir.ArrayAttr(attr)]


def set_int_array(op: ir.Operation, name: str, values: Iterable[int]) -> None:
    i64 = ir.IntegerType.get_signless(64)
    op.attributes[name] = ir.ArrayAttr.get([ir.IntegerAttr.get(i64, v) for v in values])


def location_str(op: ir.Operation) -> str:
    s = str(op.location)
    # loc("file.mlir":3:5) -> file.mlir:3:5
    if s.startswith("loc(") and s.endswith(")"):
        s = s[4:-1].replace('"', "")
    return s


# --- constants ---------------------------------------------------------------

_NP = {"f32": np.float32, "f64": np.float64, "i8": np.int8, "i16": np.int16, "i32": np.int32,
       "i64": np.int64, "i1": np.bool_}
_RESOURCE_GETTERS = {"f32": ("mlirDenseFloatResourceElementsAttrGetValue", ctypes.c_float),
                     "f64": ("mlirDenseDoubleResourceElementsAttrGetValue", ctypes.c_double),
                     "i8": ("mlirDenseInt8ResourceElementsAttrGetValue", ctypes.c_int8),
                     "i16": ("mlirDenseInt16ResourceElementsAttrGetValue", ctypes.c_int16),
                     "i32": ("mlirDenseInt32ResourceElementsAttrGetValue", ctypes.c_int32),
                     "i64": ("mlirDenseInt64ResourceElementsAttrGetValue", ctypes.c_int64)}


def _capi_lib():
    from iree.compiler.api import ctypes_dl

    ctypes_dl._init_dylib()
    return ctypes_dl._dylib


class _MlirAttribute(ctypes.Structure):
    _fields_ = [("ptr", ctypes.c_void_p)]


def _attr_capi(attr: ir.Attribute) -> _MlirAttribute:
    cap = attr._CAPIPtr
    get_name = ctypes.pythonapi.PyCapsule_GetName
    get_name.restype = ctypes.c_char_p
    get_name.argtypes = [ctypes.py_object]
    get_ptr = ctypes.pythonapi.PyCapsule_GetPointer
    get_ptr.restype = ctypes.c_void_p
    get_ptr.argtypes = [ctypes.py_object, ctypes.c_char_p]
    return _MlirAttribute(get_ptr(cap, get_name(cap)))


def _resource_bytes(attr: ir.Attribute) -> bytes | None:
    """The bytes of dense_resource `attr`'s blob, or None. MLIR's C API reads a resource one
    element per call (a ctypes call each: 8 s of PT2E ResNet-50's weights) and has no raw
    read; printing a module of one constant holding `attr` writes its blob as hex in one go
    (the alignment first, four bytes), which bytes.fromhex reads at memory speed."""
    with attr.context, ir.Location.unknown():
        module = ir.Module.create()
        with ir.InsertionPoint(module.body):
            ir.Operation.create("arith.constant", results=[attr.type], attributes={"value": attr})
    buf = io.StringIO()
    module.operation.print(file=buf)
    text = buf.getvalue()
    m = re.search(r': "0x([0-9A-Fa-f]*)"', text[text.rfind("{-#"):]) if "dialect_resources" in text else None
    return bytes.fromhex(m[1][8:]) if m else None


def constant_value(attr: ir.Attribute) -> np.ndarray:
    """Numpy value of a dense or dense_resource elements attribute (or scalar)."""
    if isinstance(attr, ir.FloatAttr):
        return np.array(ir.FloatAttr(attr).value, np.float32)
    if isinstance(attr, ir.IntegerAttr):
        return np.array(ir.IntegerAttr(attr).value)
    if isinstance(attr, ir.BoolAttr):  # an i1 splat's value
        return np.array(ir.BoolAttr(attr).value)
    shaped = ir.ShapedType(attr.type)
    shape = tuple(shaped.shape)
    dtype = mlir_dtype(shaped.element_type)
    if isinstance(attr, ir.DenseElementsAttr):
        d = ir.DenseElementsAttr(attr)
        if d.is_splat:
            v = constant_value(d.get_splat_value())
            return np.full(shape, v, dtype=_NP.get(dtype, np.float32))
        if dtype == "bf16":
            return _raw_bf16(attr, shape)
        return np.array(d).reshape(shape)
    if dtype not in _RESOURCE_GETTERS:
        raise CompileError(f"cannot read constant of type {shaped}")
    n = int(np.prod(shape)) if shape else 1
    blob = _resource_bytes(attr)
    if blob is not None and len(blob) == n * np.dtype(_NP[dtype]).itemsize:  # else by element, as MLIR reads it
        return np.frombuffer(blob, _NP[dtype]).reshape(shape).copy()
    name, ctype = _RESOURCE_GETTERS[dtype]
    lib = _capi_lib()
    fn = getattr(lib, name)
    fn.restype = ctype
    fn.argtypes = [_MlirAttribute, ctypes.c_ssize_t]
    handle = _attr_capi(attr)
    vals = np.fromiter((fn(handle, i) for i in range(n)), dtype=_NP[dtype], count=n)
    return vals.reshape(shape)


def function_argument(v: ir.Value) -> int | None:
    """The function argument number of `v`, None for any other value (an op's result, a
    linalg body's block argument)."""
    if isinstance(v.owner, ir.Block):
        owner = v.owner.owner
        if owner is not None and owner.operation.name == "func.func":
            return ir.BlockArgument(v).arg_number
    return None


def constant_of(v: ir.Value) -> np.ndarray | None:
    """The value of `v` if it is defined by arith.constant, else None."""
    if isinstance(v.owner, ir.Block):
        return None
    op = v.owner
    if op.name != "arith.constant":
        return None
    return constant_value(op.attributes["value"])


def _raw_bf16(attr: ir.Attribute, shape: tuple[int, ...]) -> np.ndarray:
    import ml_dtypes

    lib = _capi_lib()
    fn = lib.mlirDenseElementsAttrGetRawData
    fn.restype = ctypes.c_void_p
    fn.argtypes = [_MlirAttribute]
    n = int(np.prod(shape)) if shape else 1
    ptr = fn(_attr_capi(attr))
    raw = np.ctypeslib.as_array((ctypes.c_uint16 * n).from_address(ptr)).copy()
    return raw.view(ml_dtypes.bfloat16).reshape(shape)


def bf16_dense_attr(values: np.ndarray, shape: tuple[int, ...]) -> ir.Attribute:
    """A bf16 dense elements attribute, rounded to nearest even from `values`."""
    import ml_dtypes

    bits = np.asarray(values, np.float32).astype(ml_dtypes.bfloat16).view(np.uint16).reshape(shape)
    return ir.DenseElementsAttr.get(np.ascontiguousarray(bits),
                                    type=ir.RankedTensorType.get(list(shape), ir.BF16Type.get()))


def record_attr(value) -> ir.Attribute:
    """A plain record (dict, list, tuple, str, bool, int, float; a dataclass as the dict of its
    fields) as a typed attribute: a dictionary, array, string, bool, i64 or f64 attribute
    (`record_value` reads it back). An attribute in it stays as it is (a record may hold one
    made by its own codec)."""
    i64, f64 = ir.IntegerType.get_signless(64), ir.F64Type.get()  # once: a third of an int's cost
    floats: dict[bytes, ir.Attribute] = {}  # by bits: a lookup table's entries repeat (-0.0 is not 0.0)

    def attr(v) -> ir.Attribute:
        t = type(v)  # the common exact types first: NSS programs write thousands of records
        if t is int:
            return ir.IntegerAttr.get(i64, v)
        if t is float:
            key = struct.pack("<d", v)
            a = floats.get(key)
            if a is None:
                a = floats[key] = ir.FloatAttr.get(f64, v)
            return a
        if t is str:
            return ir.StringAttr.get(v)
        if t is list or t is tuple:
            return ir.ArrayAttr.get([attr(x) for x in v])
        if t is dict:
            return ir.DictAttr.get({str(k): attr(x) for k, x in v.items()})
        if isinstance(v, bool):
            return ir.BoolAttr.get(v)
        if isinstance(v, (int, np.integer)):
            return ir.IntegerAttr.get(i64, int(v))
        if isinstance(v, (float, np.floating)):
            return ir.FloatAttr.get(f64, float(v))
        if isinstance(v, ir.Attribute):
            return v
        if dataclasses.is_dataclass(v):
            return ir.DictAttr.get({name: attr(getattr(v, name)) for name in field_names(t)})
        raise TypeError(f"no attribute form for a {t.__name__} in a record")
    return attr(value)


@functools.cache
def field_names(cls: type) -> tuple[str, ...]:
    """A dataclass's field names (`dataclasses.fields` is slow on a hot path)."""
    return tuple(f.name for f in dataclasses.fields(cls))


def record_value(attr: ir.Attribute):
    """The plain record a `record_attr` attribute holds."""
    if isinstance(attr, (ir.IntegerAttr, ir.StringAttr, ir.FloatAttr, ir.BoolAttr)):
        return attr.value
    if isinstance(attr, ir.ArrayAttr):
        return [record_value(a) for a in attr]
    if isinstance(attr, ir.DictAttr):
        return {named.name: record_value(named.attr) for named in attr}
    raise TypeError(f"not a record attribute: {attr}")
