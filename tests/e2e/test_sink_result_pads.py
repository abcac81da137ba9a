"""host_dispatches.sink_result_pads: a host dispatch that stores a pad of a value it computes
(IREE forms one under --iree-dispatch-creation-enable-fuse-padding-into-linalg-consumer-ops:
PT2E GoogLeNet's dequantize padded with -inf for a ceil-mode max pool) stores the value
unpadded, and a splat and a host copy dispatch pad it after. IREE's llvm-cpu fails on
GoogLeNet's such dispatches ("large vector sizes"), and on this small one it computed wrong
values (2,693 of 4,096 elements, at IREE 3.13.0). After the rewrite llvm-cpu computes the
dequantize exactly (the reference: numpy's f32 arithmetic, the same IEEE operations)."""

from __future__ import annotations

import numpy as np
from iree.compiler import ir
from llvm_cpu import llvm_cpu

from torq.compiler.host_dispatches import sink_result_pads
from torq.compiler.ir_utils import walk_ops

C, N = 16, 13
X = f"tensor<1x{C}x{N}x{N}xi8>"
F = f"tensor<1x{C}x{N}x{N}xf32>"
P = f"tensor<1x{C}x{N + 3}x{N + 3}xf32>"
RO = f"!iree_tensor_ext.dispatch.tensor<readonly:{X}>"
WO = f"!iree_tensor_ext.dispatch.tensor<writeonly:{P}>"
ID = "affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>"
MODULE = f"""
util.func public @main(%x: {X}) -> {P} {{
  %r = flow.dispatch.workgroups(%x) : ({X}) -> {P} = (%a: {RO}, %b: {WO}) {{
    %ninf = arith.constant 0xFF800000 : f32
    %s = arith.constant 8.67785187E-4 : f32
    %z = arith.constant -128 : i16
    %v = iree_tensor_ext.dispatch.tensor.load %a, offsets = [0, 0, 0, 0], sizes = [1, {C}, {N}, {N}], strides = [1, 1, 1, 1] : {RO} -> {X}
    %e = tensor.empty() : {F}
    %d = linalg.generic {{indexing_maps = [{ID}, {ID}], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}}
        ins(%v : {X}) outs(%e : {F}) {{
    ^bb0(%in: i8, %out: f32):
      %1 = arith.extsi %in : i8 to i16
      %2 = arith.subi %1, %z : i16
      %3 = arith.sitofp %2 : i16 to f32
      %4 = arith.mulf %3, %s : f32
      linalg.yield %4 : f32
    }} -> {F}
    %p = tensor.pad %d low[0, 0, 1, 1] high[0, 0, 2, 2] {{
    ^bb0(%i0: index, %i1: index, %i2: index, %i3: index):
      tensor.yield %ninf : f32
    }} : {F} to {P}
    iree_tensor_ext.dispatch.tensor.store %p, %b, offsets = [0, 0, 0, 0], sizes = [1, {C}, {N + 3}, {N + 3}], strides = [1, 1, 1, 1] : {P} -> {WO}
    flow.return
  }} count() -> (index, index, index) {{
    %x0, %y0, %z0 = iree_tensor_ext.dispatch.workgroup_count_from_slice()
    flow.return %x0, %y0, %z0 : index, index, index
  }}
  util.return %r : {P}
}}
"""


def test_a_result_pad_is_built_after_the_dispatch_and_computes_the_same():
    x = np.random.default_rng(0).integers(-128, 128, (1, C, N, N)).astype(np.int8)
    with ir.Context() as ctx, ir.Location.unknown():
        ctx.allow_unregistered_dialects = True
        module = ir.Module.parse(MODULE)
        dispatch = next(o for o in walk_ops(module.operation) if o.name == "flow.dispatch.workgroups")
        assert sink_result_pads(dispatch) == 1
        names = [o.name for o in walk_ops(dispatch)]
        assert "tensor.pad" not in names
        assert str(dispatch.results[0].type) == F  # the dispatch writes the value unpadded
        after = str(module)
    assert "flow.tensor.splat" in after and after.count("flow.dispatch.workgroups") == 2
    ref = np.full((1, C, N + 3, N + 3), -np.inf, np.float32)
    ref[:, :, 1:N + 1, 1:N + 1] = (x.astype(np.int16) + 128).astype(np.float32) * np.float32(8.67785187e-4)
    np.testing.assert_array_equal(llvm_cpu(after, x), ref)
