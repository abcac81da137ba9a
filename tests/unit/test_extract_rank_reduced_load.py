"""Dispatch extraction of a full load whose result drops the input's unit dims (CoaT-Lite's
residual: IREE loads all of a 1x56x56x64 binding as 56x56x64). The users must read a box of
the argument in the load's type, not the argument itself: replacing the load by the 4-D
argument left a 3-D indexing map on it, and the function failed to verify (an internal error
that stopped timm coat_lite_tiny's whole int8 compile)."""

from __future__ import annotations

from iree.compiler import ir

from torq.compiler.dispatch_extraction import extract_dispatch_function
from torq.compiler.ir_utils import walk_ops

FLOW = """
#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @main(%x: tensor<1x4x8xi8>) -> tensor<4x8xi8> {
  %0 = flow.dispatch.workgroups(%x) : (tensor<1x4x8xi8>) -> tensor<4x8xi8> =
      (%in: !iree_tensor_ext.dispatch.tensor<readonly:tensor<1x4x8xi8>>,
       %out: !iree_tensor_ext.dispatch.tensor<writeonly:tensor<4x8xi8>>) {
    %t = iree_tensor_ext.dispatch.tensor.load %in, offsets = [0, 0, 0], sizes = [1, 4, 8], strides = [1, 1, 1]
        : !iree_tensor_ext.dispatch.tensor<readonly:tensor<1x4x8xi8>> -> tensor<4x8xi8>
    %e = tensor.empty() : tensor<4x8xi8>
    %r = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
        ins(%t : tensor<4x8xi8>) outs(%e : tensor<4x8xi8>) {
    ^bb0(%a: i8, %o: i8):
      %s = arith.addi %a, %a : i8
      linalg.yield %s : i8
    } -> tensor<4x8xi8>
    iree_tensor_ext.dispatch.tensor.store %r, %out, offsets = [0, 0], sizes = [4, 8], strides = [1, 1]
        : tensor<4x8xi8> -> !iree_tensor_ext.dispatch.tensor<writeonly:tensor<4x8xi8>>
    flow.return
  }
  return %0 : tensor<4x8xi8>
}
"""


def test_full_load_of_fewer_dims_reads_a_box_of_the_argument():
    with ir.Context(), ir.Location.unknown():
        flow = ir.Module.parse(FLOW)
        (dispatch,) = [o for o in walk_ops(flow.operation) if o.name == "flow.dispatch.workgroups"]
        out = ir.Module.create()
        ex = extract_dispatch_function(dispatch, "d", out)
        assert out.operation.verify()
        func = ex.func
        assert str(func.regions[0].blocks[0].arguments[0].type) == "tensor<1x4x8xi8>"
        generics = [o for o in walk_ops(func) if o.name == "linalg.generic"]
        # The add reads the argument through a box read in its own 2-D type.
        add = [g for g in generics if any(o.name == "arith.addi" for o in walk_ops(g))][0]
        assert str(add.operands[0].type) == "tensor<4x8xi8>"
