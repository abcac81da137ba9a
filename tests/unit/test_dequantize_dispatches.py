"""compiler/dequantize_dispatches.py on flow IR: a dispatch that only dequantizes an int8
tensor (transposed), read by an int8 matmul's dispatch through a reshape, moves into that
dispatch (an int8 permute dispatch before it); the forms it must leave alone stay."""

from __future__ import annotations

import pytest
from iree.compiler import ir

from torq.compiler.dequantize_dispatches import move_dequantizes_into_consumers
from torq.compiler.ir_utils import walk_ops

RO, WO = "!iree_tensor_ext.dispatch.tensor<readonly:", "!iree_tensor_ext.dispatch.tensor<writeonly:"


def flow(init: str = "tensor.empty() : tensor<4x8xf32>",
         body: str = "%f = arith.mulf %s, %c : f32", reader_access: str = "readonly") -> str:
    """A dequantize dispatch (x: 8x4 int8 -> 4x8 f32, transposed), reshaped to 2x16 and read
    by a dispatch with an int8 matmul whose epilogue adds it."""
    return f"""
#t = affine_map<(d0, d1) -> (d1, d0)>
#id = affine_map<(d0, d1) -> (d0, d1)>
#lhs = affine_map<(d0, d1, d2) -> (d0, d2)>
#rhs = affine_map<(d0, d1, d2) -> (d2, d1)>
#acc = affine_map<(d0, d1, d2) -> (d0, d1)>
func.func @main(%x: tensor<8x4xi8>, %a: tensor<2x3xi8>, %w: tensor<3x16xi8>) -> tensor<2x16xf32> {{
  %dq = flow.dispatch.workgroups(%x) : (tensor<8x4xi8>) -> tensor<4x8xf32> =
      (%in: {RO}tensor<8x4xi8>>, %out: {WO}tensor<4x8xf32>>) {{
    %c = arith.constant 0.5 : f32
    %v = iree_tensor_ext.dispatch.tensor.load %in, offsets = [0, 0], sizes = [8, 4], strides = [1, 1]
        : {RO}tensor<8x4xi8>> -> tensor<8x4xi8>
    %e = {init}
    %r = linalg.generic {{indexing_maps = [#t, #id], iterator_types = ["parallel", "parallel"]}}
        ins(%v : tensor<8x4xi8>) outs(%e : tensor<4x8xf32>) {{
    ^bb0(%q: i8, %o: f32):
      %s = arith.sitofp %q : i8 to f32
      {body}
      linalg.yield %f : f32
    }} -> tensor<4x8xf32>
    iree_tensor_ext.dispatch.tensor.store %r, %out, offsets = [0, 0], sizes = [4, 8], strides = [1, 1]
        : tensor<4x8xf32> -> {WO}tensor<4x8xf32>>
    flow.return
  }}
  %res = flow.tensor.reshape %dq : tensor<4x8xf32> -> tensor<2x16xf32>
  %y = flow.dispatch.workgroups(%a, %w, %res) : (tensor<2x3xi8>, tensor<3x16xi8>, tensor<2x16xf32>) -> tensor<2x16xf32> =
      (%ba: {RO}tensor<2x3xi8>>, %bw: {RO}tensor<3x16xi8>>,
       %br: !iree_tensor_ext.dispatch.tensor<{reader_access}:tensor<2x16xf32>>, %bo: {WO}tensor<2x16xf32>>) {{
    %z = arith.constant 0 : i32
    %la = iree_tensor_ext.dispatch.tensor.load %ba, offsets = [0, 0], sizes = [2, 3], strides = [1, 1]
        : {RO}tensor<2x3xi8>> -> tensor<2x3xi8>
    %lw = iree_tensor_ext.dispatch.tensor.load %bw, offsets = [0, 0], sizes = [3, 16], strides = [1, 1]
        : {RO}tensor<3x16xi8>> -> tensor<3x16xi8>
    %lr = iree_tensor_ext.dispatch.tensor.load %br, offsets = [0, 0], sizes = [2, 16], strides = [1, 1]
        : !iree_tensor_ext.dispatch.tensor<{reader_access}:tensor<2x16xf32>> -> tensor<2x16xf32>
    %e = tensor.empty() : tensor<2x16xi32>
    %f = linalg.fill ins(%z : i32) outs(%e : tensor<2x16xi32>) -> tensor<2x16xi32>
    %mm = linalg.generic {{indexing_maps = [#lhs, #rhs, #acc], iterator_types = ["parallel", "parallel", "reduction"]}}
        ins(%la, %lw : tensor<2x3xi8>, tensor<3x16xi8>) outs(%f : tensor<2x16xi32>) {{
    ^bb0(%p: i8, %q: i8, %o: i32):
      %p32 = arith.extsi %p : i8 to i32
      %q32 = arith.extsi %q : i8 to i32
      %m = arith.muli %p32, %q32 : i32
      %s = arith.addi %o, %m : i32
      linalg.yield %s : i32
    }} -> tensor<2x16xi32>
    %ef = tensor.empty() : tensor<2x16xf32>
    %sum = linalg.generic {{indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]}}
        ins(%mm, %lr : tensor<2x16xi32>, tensor<2x16xf32>) outs(%ef : tensor<2x16xf32>) {{
    ^bb0(%m: i32, %r: f32, %o: f32):
      %mf = arith.sitofp %m : i32 to f32
      %t = arith.addf %mf, %r : f32
      linalg.yield %t : f32
    }} -> tensor<2x16xf32>
    iree_tensor_ext.dispatch.tensor.store %sum, %bo, offsets = [0, 0], sizes = [2, 16], strides = [1, 1]
        : tensor<2x16xf32> -> {WO}tensor<2x16xf32>>
    flow.return
  }}
  return %y : tensor<2x16xf32>
}}
"""


def _dispatches(module) -> list:
    return [o for o in walk_ops(module.operation) if o.name == "flow.dispatch.workgroups"]


def test_dequantize_moves_into_the_matmul_reading_it():
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(flow())
        assert move_dequantizes_into_consumers(module.operation) == 1
        assert module.operation.verify()
        permute, reader = _dispatches(module)
        # The f32 dispatch is gone: an int8 permute (the dequantize's map, an int8 copy) ...
        assert [str(r.type) for r in permute.results] == ["tensor<4x8xi8>"]
        (copy,) = [o for o in walk_ops(permute) if o.name == "linalg.generic"]
        assert "(d0, d1) -> (d1, d0)" in str(copy.attributes["indexing_maps"])
        assert not [o for o in walk_ops(copy) if o.name.startswith("arith.")]
        # ... reshaped as the reader read the f32 tensor, which it now dequantizes itself.
        assert str(reader.operands[2].type) == "tensor<2x16xi8>"
        assert reader.operands[2].owner.name == "flow.tensor.reshape"
        bodies = [[o.name for o in walk_ops(g)] for g in walk_ops(reader) if g.name == "linalg.generic"]
        assert any("arith.sitofp" in b and "arith.mulf" in b for b in bodies), bodies


@pytest.mark.parametrize("variant", [
    # the dequantize accumulates into its init: not a dequantize
    dict(init="arith.constant dense<1.0> : tensor<4x8xf32>", body="%m = arith.mulf %s, %c : f32\n"
         "      %f = arith.addf %m, %o : f32"),
    # the reader's binding is read-write (tied to a result): its type is not ours to change
    dict(reader_access="readwrite"),
], ids=["reads-its-init", "read-write-reader"])
def test_forms_it_must_leave_alone(variant):
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(flow(**variant))
        before = str(module)
        assert move_dequantizes_into_consumers(module.operation) == 0
        assert str(module) == before
