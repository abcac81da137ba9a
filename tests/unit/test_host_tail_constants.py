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


def test_constants_tensors_and_scalars_keep_their_order():
    """A tail reading a per-channel constant (%p0), a run-time tensor along the rows (%x0) and
    a scalar operand (%x1): the dispatch takes them in that order after the value, each block
    argument bound to its own operand through its own map."""
    tail_text = ('%t0 = "arith.sitofp"(%q) : (i32) -> f32\n%t1 = "arith.mulf"(%t0, %p0) : (f32, f32) -> f32\n'
                 '%t2 = "arith.mulf"(%t1, %x0) : (f32, f32) -> f32\n%t3 = "arith.sitofp"(%x1) : (i64) -> f32\n'
                 '%t4 = "arith.addf"(%t2, %t3) : (f32, f32) -> f32')
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse("""
util.func @f(%a: tensor<4x3xi32>, %s: tensor<4xf32>, %z: i64) {
  util.return
}""")
        func = next(o for o in walk_ops(module.operation) if o.name == "util.func")
        a, s, z = func.regions[0].blocks[0].arguments
        with ir.InsertionPoint.at_block_terminator(func.regions[0].blocks[0]):
            tail = HostTail(tail_text, "%t4", "i32", "f32", channel_values=[((1,), "f32", [0.5, 0.25, 2.0])],
                            tensors=[(1, "f32", (0,)), (2, "i64", ())])
            dispatch = host_tail_dispatch(a, tail, ir.F32Type.get(), tensors=[s, z]).owner
        assert module.operation.verify()
        operands = list(dispatch.operands)
        assert operands[0] == a and operands[1].owner.name == "arith.constant" and operands[2:] == [s, z]
        (generic,) = [o for o in walk_ops(dispatch) if o.name == "linalg.generic"]
        maps = [str(m) for m in ir.ArrayAttr(generic.attributes["indexing_maps"])]
        # value, %p0 along the channels (d1), %x0 along the rows (d0), %x1 a scalar, the result.
        assert maps == ["affine_map<(d0, d1) -> (d0, d1)>", "affine_map<(d0, d1) -> (d1)>",
                        "affine_map<(d0, d1) -> (d0)>", "affine_map<(d0, d1) -> ()>",
                        "affine_map<(d0, d1) -> (d0, d1)>"]
        types = [str(v.type) for v in generic.operands[:4]]
        assert types == ["tensor<4x3xi32>", "tensor<3xf32>", "tensor<4xf32>", "i64"]
