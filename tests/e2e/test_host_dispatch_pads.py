"""Pads of computed values in host dispatches (IREE forms them under
--iree-dispatch-creation-enable-fuse-padding-into-linalg-consumer-ops; its llvm-cpu fails on
them or computes them wrong).

- host_dispatches.pad_elementwise_inputs: a pad of an elementwise value becomes a pad of that
  value's inputs, the elementwise op yielding the pad value in the padding. PT2E GoogLeNet's
  ceil-mode pools (dequantize, pad with -inf, max pool, quantize) are int8 max pools on the
  NPU; their host copies (--torq-check-dispatches) failed in llvm-cpu ("large vector sizes").
- host_dispatches.sink_result_pads: a dispatch storing a pad of a value it computes stores
  the value, and a splat and a host copy dispatch pad it after.

After the rewrites (and `hoist_input_pads`) llvm-cpu computes the values exactly; the
reference is numpy's f32 arithmetic, the same IEEE operations."""

from __future__ import annotations

import numpy as np
import pytest
from iree.compiler import ir
from llvm_cpu import llvm_cpu

from torq.compiler.host_dispatches import hoist_input_pads, pad_elementwise_inputs, sink_result_pads
from torq.compiler.ir_utils import walk_ops

C, N = 16, 13
S = np.float32(8.87689122e-4)
X = f"tensor<{C}x{N}x{N}xi8>"
F = f"tensor<{C}x{N}x{N}xf32>"
P = f"tensor<{C}x{N + 3}x{N + 3}xf32>"
RO = f"!iree_tensor_ext.dispatch.tensor<readonly:{X}>"
WO = f"!iree_tensor_ext.dispatch.tensor<writeonly:{X}>"
ID = "affine_map<(d0, d1, d2) -> (d0, d1, d2)>"
DEQUANTIZE = f"""
    %d = linalg.generic {{indexing_maps = [{ID}, {ID}], iterator_types = ["parallel", "parallel", "parallel"]}}
        ins(%v : {X}) outs(%e : {F}) {{
    ^bb0(%in: i8, %out: f32):
      %1 = arith.extsi %in : i8 to i16
      %2 = arith.subi %1, %z : i16
      %3 = arith.sitofp %2 : i16 to f32
      %4 = arith.mulf %3, %s : f32
      linalg.yield %4 : f32
    }} -> {F}"""
POOL = f"""
util.func public @main(%x: {X}) -> {X} {{
  %r = flow.dispatch.workgroups(%x) : ({X}) -> {X} = (%a: {RO}, %b: {WO}) {{
    %ninf = arith.constant 0xFF800000 : f32
    %s = arith.constant {float(S)!r} : f32
    %lo = arith.constant -1.280000e+02 : f32
    %hi = arith.constant 1.270000e+02 : f32
    %z = arith.constant -128 : i16
    %v = iree_tensor_ext.dispatch.tensor.load %a, offsets = [0, 0, 0], sizes = [{C}, {N}, {N}], strides = [1, 1, 1] : {RO} -> {X}
    %e = tensor.empty() : {F}
    %q0 = tensor.empty() : {X}
    %w = tensor.empty() : tensor<3x3xf32>{DEQUANTIZE}
    %f = linalg.fill ins(%ninf : f32) outs(%e : {F}) -> {F}
    %p = tensor.pad %d low[0, 1, 1] high[0, 2, 2] {{
    ^bb0(%i0: index, %i1: index, %i2: index):
      tensor.yield %ninf : f32
    }} : {F} to {P}
    %m = linalg.generic {{indexing_maps = [affine_map<(d0, d1, d2, d3, d4) -> (d0, d1 + d3, d2 + d4)>,
        affine_map<(d0, d1, d2, d3, d4) -> (d3, d4)>, affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2)>],
        iterator_types = ["parallel", "parallel", "parallel", "reduction", "reduction"]}}
        ins(%p, %w : {P}, tensor<3x3xf32>) outs(%f : {F}) {{
    ^bb0(%in: f32, %in_w: f32, %out: f32):
      %1 = arith.maximumf %out, %in : f32
      linalg.yield %1 : f32
    }} -> {F}
    %q = linalg.generic {{indexing_maps = [{ID}, {ID}], iterator_types = ["parallel", "parallel", "parallel"]}}
        ins(%m : {F}) outs(%q0 : {X}) {{
    ^bb0(%in: f32, %out: i8):
      %1 = arith.divf %in, %s : f32
      %2 = math.roundeven %1 : f32
      %3 = arith.addf %2, %lo : f32
      %4 = arith.maxnumf %3, %lo : f32
      %5 = arith.minnumf %4, %hi : f32
      %6 = arith.fptosi %5 : f32 to i8
      linalg.yield %6 : i8
    }} -> {X}
    iree_tensor_ext.dispatch.tensor.store %q, %b, offsets = [0, 0, 0], sizes = [{C}, {N}, {N}], strides = [1, 1, 1] : {X} -> {WO}
    flow.return
  }} count() -> (index, index, index) {{
    %x0, %y0, %z0 = iree_tensor_ext.dispatch.workgroup_count_from_slice()
    flow.return %x0, %y0, %z0 : index, index, index
  }}
  util.return %r : {X}
}}
"""


# The dequantize as two elementwise ops (a cast, then the scale): both move after the pad.
TWO_STEP = POOL.replace(DEQUANTIZE, f"""
    %c = linalg.generic {{indexing_maps = [{ID}, {ID}], iterator_types = ["parallel", "parallel", "parallel"]}}
        ins(%v : {X}) outs(%e : {F}) {{
    ^bb0(%in: i8, %out: f32):
      %1 = arith.extsi %in : i8 to i16
      %2 = arith.subi %1, %z : i16
      %3 = arith.sitofp %2 : i16 to f32
      linalg.yield %3 : f32
    }} -> {F}
    %d = linalg.generic {{indexing_maps = [{ID}, {ID}], iterator_types = ["parallel", "parallel", "parallel"]}}
        ins(%c : {F}) outs(%e : {F}) {{
    ^bb0(%in: f32, %out: f32):
      %1 = arith.mulf %in, %s : f32
      linalg.yield %1 : f32
    }} -> {F}""")


def _rewritten(text: str, elementwise: int = 1) -> tuple[str, list[str]]:
    with ir.Context() as ctx, ir.Location.unknown():
        ctx.allow_unregistered_dialects = True
        module = ir.Module.parse(text)
        dispatch = next(o for o in walk_ops(module.operation) if o.name == "flow.dispatch.workgroups")
        assert pad_elementwise_inputs(dispatch) == elementwise
        assert hoist_input_pads(dispatch, lambda pad: True) == 1
        names = [o.name for o in walk_ops(dispatch)]
        return str(module), names


def _dequantized(x: np.ndarray) -> np.ndarray:
    return (x.astype(np.int16) + 128).astype(np.float32) * S


@pytest.mark.parametrize("module, elementwise", [(POOL, 1), (TWO_STEP, 2)], ids=["dequantize", "cast_then_scale"])
def test_max_pool_of_a_padded_dequantize_compiles_on_llvm_cpu_and_is_exact(module, elementwise):
    x = np.random.default_rng(0).integers(-128, 128, (C, N, N)).astype(np.int8)
    after, names = _rewritten(module, elementwise)
    assert "tensor.pad" not in names and "linalg.index" not in names
    padded = np.full((C, N + 3, N + 3), -np.inf, np.float32)
    padded[:, 1:N + 1, 1:N + 1] = _dequantized(x)
    pooled = np.max([padded[:, i:i + N, j:j + N] for i in range(3) for j in range(3)], axis=0)
    ref = np.clip(np.round(pooled / S) - 128, -128, 127).astype(np.int8)  # np.round: half to even
    np.testing.assert_array_equal(llvm_cpu(after, x), ref)


def _stored_pad(low, high) -> tuple[str, list[int]]:
    """A dispatch storing the dequantize padded with -inf by `low` / `high` (PT2E GoogLeNet's
    form; IREE 3.13.0's llvm-cpu computed 2,693 of 4,096 elements of such a one wrong)."""
    shape = [n + lo + hi for n, lo, hi in zip((C, N, N), low, high)]
    padded_type = f"tensor<{'x'.join(map(str, shape))}xf32>"
    wo = f"!iree_tensor_ext.dispatch.tensor<writeonly:{padded_type}>"
    return f"""
util.func public @main(%x: {X}) -> {padded_type} {{
  %r = flow.dispatch.workgroups(%x) : ({X}) -> {padded_type} = (%a: {RO}, %b: {wo}) {{
    %ninf = arith.constant 0xFF800000 : f32
    %s = arith.constant {float(S)!r} : f32
    %z = arith.constant -128 : i16
    %v = iree_tensor_ext.dispatch.tensor.load %a, offsets = [0, 0, 0], sizes = [{C}, {N}, {N}], strides = [1, 1, 1] : {RO} -> {X}
    %e = tensor.empty() : {F}{DEQUANTIZE}
    %p = tensor.pad %d low[{", ".join(map(str, low))}] high[{", ".join(map(str, high))}] {{
    ^bb0(%i0: index, %i1: index, %i2: index):
      tensor.yield %ninf : f32
    }} : {F} to {padded_type}
    iree_tensor_ext.dispatch.tensor.store %p, %b, offsets = [0, 0, 0], sizes = [{", ".join(map(str, shape))}], strides = [1, 1, 1] : {padded_type} -> {wo}
    flow.return
  }} count() -> (index, index, index) {{
    %x0, %y0, %z0 = iree_tensor_ext.dispatch.workgroup_count_from_slice()
    flow.return %x0, %y0, %z0 : index, index, index
  }}
  util.return %r : {padded_type}
}}
""", shape


def _sunk(text: str) -> str:
    """`sink_result_pads` on `text`'s dispatch: it stores the value unpadded."""
    with ir.Context() as ctx, ir.Location.unknown():
        ctx.allow_unregistered_dialects = True
        module = ir.Module.parse(text)
        dispatch = next(o for o in walk_ops(module.operation) if o.name == "flow.dispatch.workgroups")
        assert sink_result_pads(dispatch) == 1
        assert "tensor.pad" not in [o.name for o in walk_ops(dispatch)]
        assert str(dispatch.results[0].type) == F
        after = str(module)
    assert "flow.tensor.splat" in after and after.count("flow.dispatch.workgroups") == 2
    return after


@pytest.mark.parametrize("rewrite", ["pad_elementwise_inputs", "sink_result_pads"])
@pytest.mark.parametrize("low, high", [((0, 1, 1), (0, 2, 2)), ((2, 0, 1), (0, 3, 0))])
def test_a_stored_pad_of_a_dequantize_is_the_same_values(low, high, rewrite):
    """Either rewrite (the target runs pad_elementwise_inputs first; sink_result_pads takes a
    pad of a value that is not elementwise) stores the same values as numpy's."""
    module, shape = _stored_pad(low, high)
    x = np.random.default_rng(1).integers(-128, 128, (C, N, N)).astype(np.int8)
    after = _rewritten(module)[0] if rewrite == "pad_elementwise_inputs" else _sunk(module)
    ref = np.full(shape, -np.inf, np.float32)
    ref[low[0]:low[0] + C, low[1]:low[1] + N, low[2]:low[2] + N] = _dequantized(x)
    np.testing.assert_array_equal(llvm_cpu(after, x), ref)
