"""Dispatch extraction of a generic that reads the one value of a 0-d input as a broadcast
scalar (`tensor.extract %t[]`: the run-time scale of torch's dynamic quantization, which
IREE fuses into the epilogue of the integer matmul this way). The generic reads the 0-d
argument itself through the same map, the form torq-lower-requantization hands to a host
tail; left as an extract, the epilogue stayed on the host with its matmul ("operand 3 of
the dequantize of the accumulator is computed in the dispatch")."""

from __future__ import annotations

from iree.compiler import ir

from torq.compiler.dispatch_extraction import extract_dispatch_function
from torq.compiler.ir_utils import walk_ops

FLOW = """
#id = affine_map<(d0) -> (d0)>
#bcast = affine_map<(d0) -> ()>
func.func @main(%s: tensor<f32>, %x: tensor<8xi32>) -> tensor<8xf32> {
  %0 = flow.dispatch.workgroups(%s, %x) : (tensor<f32>, tensor<8xi32>) -> tensor<8xf32> =
      (%sb: !iree_tensor_ext.dispatch.tensor<readonly:tensor<f32>>,
       %xb: !iree_tensor_ext.dispatch.tensor<readonly:tensor<8xi32>>,
       %out: !iree_tensor_ext.dispatch.tensor<writeonly:tensor<8xf32>>) {
    %st = iree_tensor_ext.dispatch.tensor.load %sb, offsets = [], sizes = [], strides = []
        : !iree_tensor_ext.dispatch.tensor<readonly:tensor<f32>> -> tensor<f32>
    %xt = iree_tensor_ext.dispatch.tensor.load %xb, offsets = [0], sizes = [8], strides = [1]
        : !iree_tensor_ext.dispatch.tensor<readonly:tensor<8xi32>> -> tensor<8xi32>
    %scale = tensor.extract %st[] : tensor<f32>
    %e = tensor.empty() : tensor<8xf32>
    %r = linalg.generic {indexing_maps = [#id, #bcast, #id], iterator_types = ["parallel"]}
        ins(%xt, %scale : tensor<8xi32>, f32) outs(%e : tensor<8xf32>) {
    ^bb0(%a: i32, %b: f32, %o: f32):
      %f = arith.sitofp %a : i32 to f32
      %m = arith.mulf %f, %b : f32
      linalg.yield %m : f32
    } -> tensor<8xf32>
    iree_tensor_ext.dispatch.tensor.store %r, %out, offsets = [0], sizes = [8], strides = [1]
        : tensor<8xf32> -> !iree_tensor_ext.dispatch.tensor<writeonly:tensor<8xf32>>
    flow.return
  }
  return %0 : tensor<8xf32>
}
"""


def test_broadcast_scalar_extracted_from_a_0d_input_reads_the_argument():
    with ir.Context(), ir.Location.unknown():
        flow = ir.Module.parse(FLOW)
        (dispatch,) = [o for o in walk_ops(flow.operation) if o.name == "flow.dispatch.workgroups"]
        out = ir.Module.create()
        func = extract_dispatch_function(dispatch, "d", out).func
        assert out.operation.verify()
        assert not [o for o in walk_ops(func) if o.name == "tensor.extract"]
        (generic,) = [o for o in walk_ops(func) if o.name == "linalg.generic"]
        scale_arg = func.regions[0].blocks[0].arguments[0]
        assert generic.operands[1] == scale_arg and str(scale_arg.type) == "tensor<f32>"
