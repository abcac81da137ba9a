"""compiler/host_dispatches.host_tail_dispatch: a requantization tail's per-channel constants
are operands made outside the dispatch, so that the tails of two layers that differ only in
those constants are the same dispatch body, which IREE compiles once (DeiT-Tiny under PT2E
dynamic quantization: 63 host executables for llvm-cpu -> 18)."""

from __future__ import annotations

import numpy as np
from iree.compiler import ir

from torq.compiler.host_dispatches import host_tail_dispatch
from torq.compiler.ir_utils import walk_ops
from torq.compiler.requant_tail import HostTail

# The dequantize of an i32 accumulator by a per-channel scale: f32(q) * s[c].
TAIL = '%t0 = "arith.sitofp"(%q) : (i32) -> f32\n%t1 = "arith.mulf"(%t0, %p0) : (f32, f32) -> f32'


def test_tails_differing_in_constants_have_one_body():
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse("""
util.func @f(%a: tensor<4x3xi32>, %b: tensor<4x3xi32>) {
  util.return
}""")
        func = next(o for o in walk_ops(module.operation) if o.name == "util.func")
        block = func.regions[0].blocks[0]
        dispatches = []
        with ir.InsertionPoint.at_block_terminator(block):
            for arg, scales in zip(block.arguments, ([0.5, 0.25, 2.0], [1.5, 3.0, 0.125])):
                tail = HostTail(TAIL, "%t1", "i32", "f32", channel_values=[((1,), "f32", scales)])
                r = host_tail_dispatch(arg, tail, ir.F32Type.get())
                dispatches.append(r.owner)
        assert module.operation.verify()
        bodies = {str(d.regions[0]) for d in dispatches}
        assert len(bodies) == 1  # the same executable: no constant inside the dispatch
        consts = [d.operands[1].owner for d in dispatches]
        assert [c.name for c in consts] == ["arith.constant", "arith.constant"]
        values = [np.array(ir.DenseElementsAttr(c.attributes["value"])) for c in consts]
        assert values[0].tolist() == [0.5, 0.25, 2.0] and values[1].tolist() == [1.5, 3.0, 0.125]
        assert not [o for d in dispatches for o in walk_ops(d) if o.name == "arith.constant"
                    and isinstance(o.results[0].type, ir.ShapedType)]
