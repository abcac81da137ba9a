"""Reading and building torch-dialect IR: what the rewrites of torch input before IREE share
(compiler/torch_qdq.py, torch_dynamic_quant.py, torchao_quant.py, torch_index_put.py,
torch_linear.py)."""

from __future__ import annotations

from iree.compiler import ir

# torch ScalarType codes: aten.to.dtype's operand.
SCALAR_TYPES = {"ui8": 0, "si8": 1, "si32": 3, "si64": 4, "f32": 6, "f64": 7}


def operator_name(op: ir.Operation) -> str:
    return ir.StringAttr(op.attributes["name"]).value if op.name == "torch.operator" else op.name


def torch_constant(v: ir.Value, kind: str):
    """The value of a `torch.constant.<kind>` (int or float), else None."""
    op = v.owner
    if isinstance(op, ir.Block) or op.name != f"torch.constant.{kind}":
        return None
    attr = op.attributes["value"]
    return ir.IntegerAttr(attr).value if kind == "int" else ir.FloatAttr(attr).value


def shape_and_dtype(t: ir.Type) -> tuple[list[int], str] | None:
    """([extents], dtype) of a static `!torch.vtensor<[...],dt>`, else None."""
    s = str(t)
    if not s.startswith("!torch.vtensor<[") or "?" in s:
        return None
    dims, _, dtype = s[len("!torch.vtensor<["):-1].partition("],")
    try:
        return [int(d) for d in dims.split(",") if d], dtype
    except ValueError:
        return None


class TorchBuilder:
    """Creates torch-dialect ops before one op (the rewrites of torch input before IREE)."""

    def __init__(self, before: ir.Operation):
        self.ip = ir.InsertionPoint(before)
        self.loc = before.location
        self.int_t = ir.Type.parse("!torch.int")
        self.bool_t = ir.Type.parse("!torch.bool")

    def op(self, name: str, operands: list, result: ir.Type, attributes: dict | None = None) -> ir.Value:
        return ir.Operation.create(name, results=[result], operands=operands, attributes=attributes or {},
                                   loc=self.loc, ip=self.ip).results[0]

    def int(self, value: int) -> ir.Value:
        return self.op("torch.constant.int", [], self.int_t,
                       {"value": ir.IntegerAttr.get(ir.IntegerType.get_signless(64), value)})

    def int_op(self, name: str, a: ir.Value, b: ir.Value) -> ir.Value:
        return self.op(name, [a, b], self.int_t)

    def bool_op(self, name: str, a: ir.Value, b: ir.Value) -> ir.Value:
        return self.op(name, [a, b], self.bool_t)

    def float(self, value: float) -> ir.Value:
        return self.op("torch.constant.float", [], ir.Type.parse("!torch.float"),
                       {"value": ir.FloatAttr.get(ir.F64Type.get(), value)})

    @staticmethod
    def tensor_type(shape: list[int], dtype: str) -> ir.Type:
        return ir.Type.parse(f"!torch.vtensor<[{','.join(map(str, shape))}],{dtype}>")

    def int_list(self, values: list[int]) -> ir.Value:
        return self.op("torch.prim.ListConstruct", [self.int(v) for v in values], ir.Type.parse("!torch.list<int>"))

    def to_dtype(self, value: ir.Value, shape: list[int], dtype: str) -> ir.Value:
        """`value` converted to `dtype` (one of SCALAR_TYPES), of `shape`."""
        false = self.op("torch.constant.bool", [], self.bool_t, {"value": ir.BoolAttr.get(False)})
        none = self.op("torch.constant.none", [], ir.Type.parse("!torch.none"))
        return self.op("torch.aten.to.dtype", [value, self.int(SCALAR_TYPES[dtype]), false, false, none],
                       self.tensor_type(shape, dtype))

    def f32(self, name: str, *operands) -> ir.Value:
        """A 0-d f32 result of aten op `name`."""
        return self.op(name, list(operands), self.tensor_type([], "f32"))

    def as_tensor_1(self, value: ir.Value, dtype: str) -> ir.Value:
        """The 0-d f32 `value` converted to `dtype`, of shape [1] (choose_qparams' results)."""
        return self.op("torch.aten.unsqueeze", [self.to_dtype(value, [], dtype), self.int(0)],
                       self.tensor_type([1], dtype))


def rewritten_text(text: str, rewrite) -> str:
    """MLIR text `text` after `rewrite` (a function of the module operation) alone: a
    torch-level rewrite's module as IREE's own back ends compile it (the llvm-cpu reference
    the tests and benchmarks run where IREE cannot compile the input as written)."""
    from iree.compiler.api import Session, Source

    session = Session()
    inv = session.invocation()
    if not inv.parse_source(Source.wrap_buffer(session, text.encode(), buffer_name="input.mlir")):
        raise ValueError("cannot parse the MLIR text")
    module = inv.export_module()
    with module.context, ir.Location.unknown():
        rewrite(module)
        return str(module)
