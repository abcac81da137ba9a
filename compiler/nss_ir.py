"""The NSS program as IR: one `torq_nss.*` op per tensor, buffer and command.

`torq-build-nss-program` writes a `Program` into a function with
`program_to_function`; `torq-serialize-executable` reads it back with
`function_to_program`. Each op carries its record as a JSON `spec` string
(readable in lit tests); constant tensors also carry their bytes as a
`value` i8 elements attribute. The function's `torq.program` dictionary
holds the program's name, tiles, LRAM peak and hardware model.
"""

from __future__ import annotations

import dataclasses
import functools
import json

import numpy as np
from iree.compiler import ir

from torq.contract.program import (
    Compute,
    DmaIn,
    DmaOut,
    Epilogue,
    EpilogueStep,
    LramBuffer,
    Operand,
    Program,
    Ref,
    TensorDesc,
)

from .ir_utils import record_attr, record_value

# Function attribute: the program's name, tiles, LRAM peak and hardware model, a dictionary.
PROGRAM_ATTR = "torq.program"
_KINDS = {"dma_in": DmaIn, "dma_out": DmaOut, "compute": Compute}
_NAMES = {v: k for k, v in _KINDS.items()}


def _plain(x):
    """`x` as JSON-ready values: `dataclasses.asdict` without its deep copy of every leaf
    (a program's records are read, not changed: 8% of a compile's profile was the copy)."""
    if dataclasses.is_dataclass(x):
        return {name: _plain(getattr(x, name)) for name in _field_names(type(x))}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    return x


@functools.cache
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


def _spec(obj, drop=()) -> str:
    d = {name: _plain(getattr(obj, name)) for name in _field_names(type(obj)) if name not in drop}
    # The padding fields (vector_layout) only when set: a dense program reads as before.
    for k in ("shape", "padded_shape", "padded_work"):
        if isinstance(obj, (LramBuffer, Compute)) and k in d and not d[k]:
            del d[k]
    if isinstance(obj, TensorDesc) and d.get("aliases") == -1:  # only in-place outputs show it
        del d["aliases"]
    if isinstance(obj, Compute) and d.get("split") == 1:  # only split computes show it
        del d["split"]
    if isinstance(obj, DmaIn) and not obj.gathers:  # only gathers show their indices
        for k in ("index_buffer", "index_dtype", "index_bound"):
            del d[k]
    if isinstance(obj, DmaOut) and not obj.scatters:  # only scatters show their indices
        for k in ("index_buffer", "index_dtype", "index_bound", "index_dim"):
            del d[k]
    return json.dumps(d, separators=(",", ":"))


def program_to_function(p: Program, func: ir.Operation) -> None:
    block = func.regions[0].blocks[0]
    for op in reversed([o.operation for o in block.operations]):
        op.erase()
    with ir.InsertionPoint(block), func.location:
        for t in p.tensors:
            attrs = {"spec": ir.StringAttr.get(_spec(t, drop=("data",)))}
            if t.kind == "constant":
                attrs["value"] = ir.DenseElementsAttr.get(
                    np.frombuffer(t.data, np.int8), type=ir.IntegerType.get_signless(8))
            ir.Operation.create("torq_nss.tensor", attributes=attrs)
        for b in p.buffers:
            ir.Operation.create("torq_nss.buffer", attributes={"spec": ir.StringAttr.get(_spec(b))})
        for c in p.commands:
            ir.Operation.create(f"torq_nss.{_NAMES[type(c)]}", attributes={"spec": ir.StringAttr.get(_spec(c))})
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


def _operand(d) -> Operand:
    return Operand(d["buffer"], tuple(d["shape"]), d["dtype"])


def _command(kind: str, d: dict):
    if kind == "dma_in":
        return DmaIn(d["tensor"], tuple(d["offsets"]), tuple(d["sizes"]), d["buffer"], d.get("index_buffer", -1),
                     d.get("index_dtype", ""), d.get("index_bound", 0))
    if kind == "dma_out":
        return DmaOut(d["buffer"], d["tensor"], tuple(d["offsets"]), tuple(d["sizes"]), d.get("index_buffer", -1),
                      d.get("index_dtype", ""), d.get("index_bound", 0), d.get("index_dim", 0))
    e = d["epilogue"]
    epi = Epilogue([EpilogueStep(s["op"], [Ref(a["kind"], a["index"], tuple(a["axes"]), a["const"])
                                           for a in s["args"]], s["to"]) for s in e["steps"]], e["result"])
    return Compute(d["op"], [_operand(o) for o in d["operands"]], _operand(d["result"]), d["attrs"], epi,
                   d["slice"], d["macs"], d["tile"], d.get("padded_work", 0), d.get("split", 1))


def function_to_program(func: ir.Operation) -> Program:
    meta = program_meta(func)
    tensors, buffers, commands = [], [], []
    for o in func.regions[0].blocks[0].operations:
        op = o.operation
        if not op.name.startswith("torq_nss."):
            continue
        kind = op.name.split(".", 1)[1]
        d = json.loads(ir.StringAttr(op.attributes["spec"]).value)
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
            commands.append(_command(kind, d))
    return Program(meta["name"], meta["hw"], tensors, buffers, commands, meta["tiles"], meta["lram_peak"])
