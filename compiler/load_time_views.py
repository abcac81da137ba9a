"""Constant operands of the NPU calls, exported once when the module loads.

A call of the `torq` module takes its operands as `!hal.buffer_view`s
(`hal.tensor.export`). Exported at the call, a constant (a weight: an
`arith.constant`, an external parameter's `flow.tensor.constant`, or a load
of an immutable global such as a transpose IREE hoisted into an initializer)
is copied by IREE out of the module's constant pool into a fresh buffer at
every call: every weight, on every inference, in copies no simulated figure
counts (an MLP's 7.4 MB per call, a 2-layer LLM decode step's 37.8 MB). Each
distinct constant is instead exported once: one `util.initializer` appended to
the module (after every initializer that may set a global it reads) stores
each constant's buffer view in a private global, which the calls load (one
initializer for all: IREE runs its initializer pipeline per op, 2.6 s of a
30-layer LLM's 8.8 s back end with one per constant, 1.7 s with one). A constant the
call reads reshaped (IREE's `flow.tensor.reshape`s, or the dims the dispatch
function expanded or dropped) is reshaped there too: the reshape moves no
data. The NPU reads it as before; the runtime never writes an input buffer it
did not receive as a read-write operand, and a constant is never one.
"""

from __future__ import annotations

from iree.compiler import ir

from .ir_utils import reshaped, through_reshapes

BUFFER_VIEW = "!hal.buffer_view"
GLOBAL_PREFIX = "__torq_load_time_view_"


def _constant_key(value: ir.Value):
    """A key naming `value`'s constant (its attribute, or its immutable global), else None."""
    op = value.owner
    if isinstance(op, ir.Block):
        return None
    if op.name in ("arith.constant", "flow.tensor.constant") and isinstance(value.type, ir.RankedTensorType):
        return ("value", op.attributes["value"])  # flow's: an external parameter (#flow.parameter.named)
    if op.name == "util.global.load" and "is_immutable" in op.attributes:
        return ("global", ir.FlatSymbolRefAttr(op.attributes["global"]).value)
    return None


class LoadTimeViews:
    """The load-time buffer views of one module's constant call operands (module docstring)."""

    def __init__(self, module_op: ir.Operation):
        self.body = module_op.regions[0].blocks[0]
        self.globals: dict = {}  # constant key -> name of its buffer view global
        self.init_return: ir.Operation | None = None  # the util.return of the one initializer, once made

    def view(self, value: ir.Value, shape: tuple[int, ...] | None = None) -> ir.Value | None:
        """`value`'s buffer view (of `shape` when given: a `flow.tensor.reshape` at load, no
        data moved) loaded at the insertion point when `value` is a constant (exported at load
        the first time it is asked for), else None."""
        if not isinstance(value.type, ir.RankedTensorType):
            return None
        shape = tuple(shape) if shape is not None else tuple(ir.RankedTensorType(value.type).shape)
        source = through_reshapes(value)
        key = _constant_key(source)
        if key is None:
            return None
        key = (*key, shape)
        if key not in self.globals:
            self.globals[key] = self._export_at_load(source, shape)
        return ir.Operation.create("util.global.load", results=[ir.Type.parse(BUFFER_VIEW)],
                                   attributes={"global": ir.FlatSymbolRefAttr.get(self.globals[key])}).result

    def _export_at_load(self, value: ir.Value, shape: tuple[int, ...]) -> str:
        name = f"{GLOBAL_PREFIX}{len(self.globals)}"
        bv = ir.Type.parse(BUFFER_VIEW)
        with ir.InsertionPoint.at_block_begin(self.body), value.owner.location:
            ir.Operation.create("util.global", attributes={
                "sym_name": ir.StringAttr.get(name), "sym_visibility": ir.StringAttr.get("private"),
                "type": ir.TypeAttr.get(bv)})
        with ir.InsertionPoint(self._initializer_return(value.owner.location)), value.owner.location:
            # The same attribute or global load (no data copied), with the call's shape.
            constant = reshaped(value.owner.clone().results[0], shape)
            view = ir.Operation.create("hal.tensor.export", results=[bv], operands=[constant],
                                       attributes={"source_encoding": ir.TypeAttr.get(constant.type)}).result
            ir.Operation.create("util.global.store", operands=[view],
                                attributes={"global": ir.FlatSymbolRefAttr.get(name)})
        return name

    def _initializer_return(self, location: ir.Location) -> ir.Operation:
        """The `util.return` of the initializer that exports every constant (module docstring),
        made after every initializer of the module the first time it is asked for."""
        if self.init_return is None:
            with ir.InsertionPoint(self.body), location:
                init = ir.Operation.create("util.initializer", regions=1, attributes={
                    "function_type": ir.TypeAttr.get(ir.FunctionType.get([], []))})
            with ir.InsertionPoint(init.regions[0].blocks.append()), location:
                self.init_return = ir.Operation.create("util.return")
        return self.init_return
