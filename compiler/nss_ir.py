"""The NSS program as IR: one `torq_nss.*` op per tensor, buffer and command.

`torq-build-nss-program` writes a `Program` into a function with
`program_to_function`; `torq-serialize-executable` reads it back with
`function_to_program`. Each op carries its record as a `spec` dictionary
(readable in lit tests; a compute's `attrs` are [name, value] pairs, in their order, and
its `epilogue` is a TorqHL op's `epilogue` attr); constant tensors also carry their bytes
as a `value` i8 elements attribute. The function's `torq.program` dictionary
holds the program's name, tiles, LRAM peak and hardware model.
"""

from __future__ import annotations

import numpy as np
from iree.compiler import ir

from torq.contract.program import (
    Compute,
    DmaIn,
    DmaOut,
    LramBuffer,
    Operand,
    Program,
    TensorDesc,
)

from .ir_utils import CompileError, field_names, record_attr, record_value
from .patterns.model import epilogue_attr, epilogue_value

# Function attribute: the program's name, tiles, LRAM peak and hardware model, a dictionary.
PROGRAM_ATTR = "torq.program"
_KINDS = {"dma_in": DmaIn, "dma_out": DmaOut, "compute": Compute}
_NAMES = {v: k for k, v in _KINDS.items()}
_RECORDS = {"tensor": TensorDesc, "buffer": LramBuffer, **_KINDS}  # the record each op's spec holds


def _spec(obj, epilogues: dict, drop=()) -> ir.Attribute:
    """The `spec` of `obj`'s op. `epilogues` holds the epilogue attrs made so far, by epilogue
    object: a compute's tiles share their op's, and an int8 one has hundreds of arguments."""
    d = {name: getattr(obj, name) for name in field_names(type(obj)) if name not in drop and name != "epilogue"}
    # The padding fields (vector_layout) only when set: a dense program reads as before.
    for k in ("shape", "padded_shape", "padded_work"):
        if isinstance(obj, (LramBuffer, Compute)) and k in d and not d[k]:
            del d[k]
    if isinstance(obj, TensorDesc) and d.get("aliases") == -1:  # only in-place outputs show it
        del d["aliases"]
    if isinstance(obj, Compute):
        if d.get("split") == 1:  # only split computes show it
            del d["split"]
        d["attrs"] = [[k, v] for k, v in d["attrs"].items()]  # pairs: the writer keeps their order
        if id(obj.epilogue) not in epilogues:
            epilogues[id(obj.epilogue)] = epilogue_attr(obj.epilogue)
        d["epilogue"] = epilogues[id(obj.epilogue)]
    if isinstance(obj, DmaIn) and not obj.gathers:  # only gathers show their indices
        for k in ("index_buffer", "index_dtype", "index_bound"):
            del d[k]
    if isinstance(obj, DmaIn) and not obj.strided:  # only strided boxes show their strides
        del d["strides"]
    if isinstance(obj, DmaOut) and not obj.scatters:  # only scatters show their indices
        for k in ("index_buffer", "index_dtype", "index_bound", "index_dim"):
            del d[k]
    return record_attr(d)


def program_to_function(p: Program, func: ir.Operation) -> None:
    block = func.regions[0].blocks[0]
    for op in reversed([o.operation for o in block.operations]):
        op.erase()
    epilogues = {}
    with ir.InsertionPoint(block), func.location:
        for t in p.tensors:
            attrs = {"spec": _spec(t, epilogues, drop=("data",))}
            if t.kind == "constant":
                attrs["value"] = ir.DenseElementsAttr.get(
                    np.frombuffer(t.data, np.int8), type=ir.IntegerType.get_signless(8))
            ir.Operation.create("torq_nss.tensor", attributes=attrs)
        for b in p.buffers:
            ir.Operation.create("torq_nss.buffer", attributes={"spec": _spec(b, epilogues)})
        for c in p.commands:
            ir.Operation.create(f"torq_nss.{_NAMES[type(c)]}", attributes={"spec": _spec(c, epilogues)})
        ir.Operation.create("func.return", operands=[])
    ftype = ir.FunctionType(ir.TypeAttr(func.attributes["function_type"]).value)
    func.attributes["torq.original_type"] = ir.TypeAttr.get(ftype)
    func.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get([], []))
    while len(block.arguments):
        block.erase_argument(0)
    func.attributes[PROGRAM_ATTR] = record_attr({"name": p.name, "tiles": p.tiles, "lram_peak": p.lram_peak,
                                                 "hw": p.hw})


def program_meta(func: ir.Operation) -> dict:
    """{"name", "tiles", "lram_peak", "hw"} of a function torq-build-nss-program wrote."""
    return record_value(func.attributes[PROGRAM_ATTR])


def _operand(attr: ir.DictAttr) -> Operand:
    return Operand(attr["buffer"].value, tuple(x.value for x in attr["shape"]), attr["dtype"].value)


def _command(kind: str, d: dict, epilogues: dict):
    if kind == "dma_in":
        return DmaIn(d["tensor"], tuple(d["offsets"]), tuple(d["sizes"]), d["buffer"], d.get("index_buffer", -1),
                     d.get("index_dtype", ""), d.get("index_bound", 0), tuple(d.get("strides", ())))
    if kind == "dma_out":
        return DmaOut(d["buffer"], d["tensor"], tuple(d["offsets"]), tuple(d["sizes"]), d.get("index_buffer", -1),
                      d.get("index_dtype", ""), d.get("index_bound", 0), d.get("index_dim", 0))
    if (epi := epilogues.get(d["epilogue"])) is None:  # decoded once per distinct attr (uniqued by MLIR)
        epi = epilogues[d["epilogue"]] = epilogue_value(d["epilogue"])
    return Compute(d["op"], d["operands"], d["result"], dict(d["attrs"]), epi,
                   d["slice"], d["macs"], d["tile"], d.get("padded_work", 0), d.get("split", 1))


def _spec_value(op: ir.Operation, kind: str) -> dict:
    """The record `op`'s `spec` holds, its operands as `Operand`s; a compute's `epilogue` stays
    an attribute. Fields are looked up by name: iterating the dictionaries costs 2-4x as much
    through the bindings."""
    attr, record = op.attributes["spec"], _RECORDS.get(kind)
    if not isinstance(attr, ir.DictAttr) or record is None:
        raise CompileError(f"{op.name}: not an NSS op with a spec dictionary: {str(attr)[:80]}")
    return {k: _field_value(k, attr[k]) for k in field_names(record) if k in attr}


def _field_value(name: str, attr: ir.Attribute):
    if name == "epilogue":
        return attr
    if name == "operands":
        return [_operand(o) for o in attr]
    if name == "result":
        return _operand(attr)
    return record_value(attr)


def function_to_program(func: ir.Operation) -> Program:
    meta = program_meta(func)
    tensors, buffers, commands, epilogues = [], [], [], {}
    for o in func.regions[0].blocks[0].operations:
        op = o.operation
        if not op.name.startswith("torq_nss."):
            continue
        kind = op.name.split(".", 1)[1]
        d = _spec_value(op, kind)
        if kind == "tensor":
            data = b""
            if "value" in op.attributes:
                data = np.array(ir.DenseElementsAttr(op.attributes["value"]), dtype=np.int8).tobytes()
            tensors.append(TensorDesc(d["index"], d["kind"], tuple(d["shape"]), d["dtype"], d["host_dtype"],
                                      d["arg_index"], data, d.get("aliases", -1)))
        elif kind == "buffer":
            d["shape"], d["padded_shape"] = tuple(d.get("shape", ())), tuple(d.get("padded_shape", ()))
            buffers.append(LramBuffer(**d))
        else:
            commands.append(_command(kind, d, epilogues))
    return Program(meta["name"], meta["hw"], tensors, buffers, commands, meta["tiles"], meta["lram_peak"])
