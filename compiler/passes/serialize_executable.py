"""torq-serialize-executable: write each NSS program as a FlatBuffers blob.

Contract: takes functions produced by torq-build-nss-program and attaches the
serialized executable (contract/schemas/torq_executable.fbs, identifier
"TORQ") as `torq.executable`, an i8 elements attribute; the `torq_nss` ops
are removed. The blob is what the `torq` VM module loads at run time.

An executable names no call site: the program's name is left empty (and
its source too), so identical dispatches (the layers of a model) serialize to one blob,
which the .vmfb embeds once (IREE shares one executable among identical
dispatches the same way). Hundreds of distinct constants, one per call,
made IREE's VM register allocation superlinear (a 30-layer LLM: 33 s of
.vmfb output, 0.1 s at 4 layers). The runtime names each call from the
function's dispatch records (contract/dispatch_records.py).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from iree.compiler import ir

from torq.contract.executable import ExecutableError, serialize_program, validate_program

from ..ir_utils import CompileError, location_str
from ..nss_ir import function_to_program
from . import PassOptions

NAME = "torq-serialize-executable"


def serialize_function(func: ir.Operation) -> bytes:
    try:
        program = function_to_program(func)
        validate_program(program)  # its errors name the program
        blob = serialize_program(replace(program, name=""), check=False)
    except ExecutableError as e:  # an inconsistent program: a compile error, not a traceback
        raise CompileError(f"{location_str(func)}: error: {e}") from None
    block = func.regions[0].blocks[0]
    for op in [o.operation for o in block.operations]:
        if op.name.startswith("torq_nss."):
            op.erase()
    func.attributes["torq.executable"] = ir.DenseElementsAttr.get(
        np.frombuffer(blob, np.int8), type=ir.IntegerType.get_signless(8))
    return blob


def run(module: ir.Module, options: PassOptions) -> None:
    for op in list(module.body.operations):
        if op.operation.name == "func.func" and "torq.program" in op.operation.attributes:
            serialize_function(op.operation)
