"""compiler/tiling/needed_bytes.py: the floor under a slice's DDR bytes that lets super
tiling's `_least_traffic_first` skip candidates. It must never exceed what a tiling's
program moves (else a skipped candidate could have won)."""

import pytest
from iree.compiler import ir

from torq.compiler.passes import PassOptions
from torq.compiler.tiling.cost import lowered_program, lowered_tiling
from torq.compiler.tiling.needed_bytes import needed_bytes
from torq.contract.measures import program_traffic

# A matmul with a bias (the audio encoder's FFN projection, smaller): A 48x32, W 64x32, b 64.
MATMUL = """
#map = affine_map<(d0, d1) -> ()>
#map1 = affine_map<(d0, d1) -> (d0, d1)>
#map2 = affine_map<(d0, d1, d2) -> (d0, d2)>
#map3 = affine_map<(d0, d1, d2) -> (d1, d2)>
#map4 = affine_map<(d0, d1, d2) -> (d0, d1)>
#map5 = affine_map<(d0, d1) -> (d1)>
module {
  func.func @main_dispatch_0(%arg0: tensor<48x32xbf16>, %arg1: tensor<64x32xbf16>, %arg2: tensor<64xbf16>)
      -> tensor<48x64xbf16> attributes {torq.dispatch} {
    %cst = arith.constant 0.000000e+00 : bf16
    %0 = tensor.empty() : tensor<48x64xbf16>
    %1 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "parallel"]}
        ins(%cst : bf16) outs(%0 : tensor<48x64xbf16>) attrs = {"torq-fuse-group" = [0], torq.tiling_order = 2 : i64} {
    ^bb0(%in: bf16, %out: bf16):
      linalg.yield %in : bf16
    } -> tensor<48x64xbf16>
    %2 = linalg.generic {indexing_maps = [#map2, #map3, #map4], iterator_types = ["parallel", "parallel", "reduction"]}
        ins(%arg0, %arg1 : tensor<48x32xbf16>, tensor<64x32xbf16>) outs(%1 : tensor<48x64xbf16>)
        attrs = {"torq-fuse-group" = [0], "torq-fuse-group-id" = 0 : i64, torq.tiling_order = 1 : i64} {
    ^bb0(%in: bf16, %in_0: bf16, %out: bf16):
      %4 = arith.mulf %in, %in_0 : bf16
      %5 = arith.addf %out, %4 : bf16
      linalg.yield %5 : bf16
    } -> tensor<48x64xbf16>
    %3 = linalg.generic {indexing_maps = [#map1, #map5, #map1], iterator_types = ["parallel", "parallel"]}
        ins(%2, %arg2 : tensor<48x64xbf16>, tensor<64xbf16>) outs(%0 : tensor<48x64xbf16>)
        attrs = {"torq-fuse-group" = [0], torq.tile_root, torq.tiling_order = 0 : i64} {
    ^bb0(%in: bf16, %in_0: bf16, %out: bf16):
      %4 = arith.addf %in, %in_0 : bf16
      linalg.yield %4 : bf16
    } -> tensor<48x64xbf16>
    return %3 : tensor<48x64xbf16>
  }
}
"""

# Two slabs of a 3-slab input read at constant indices (the attention scores' Q and K of a
# packed QKV tensor): the third slab is not needed.
SLABS = """
#in0 = affine_map<(d0, d1) -> (0, d0, d1)>
#in1 = affine_map<(d0, d1) -> (1, d0, d1)>
#id = affine_map<(d0, d1) -> (d0, d1)>
module {
  func.func @main_dispatch_0(%arg0: tensor<3x16x8xbf16>) -> tensor<16x8xbf16> attributes {torq.dispatch} {
    %0 = tensor.empty() : tensor<16x8xbf16>
    %1 = linalg.generic {indexing_maps = [#in0, #in1, #id], iterator_types = ["parallel", "parallel"]}
        ins(%arg0, %arg0 : tensor<3x16x8xbf16>, tensor<3x16x8xbf16>) outs(%0 : tensor<16x8xbf16>)
        attrs = {"torq-fuse-group" = [0], torq.tile_root, torq.tiling_order = 0 : i64} {
    ^bb0(%a: bf16, %b: bf16, %out: bf16):
      %2 = arith.addf %a, %b : bf16
      linalg.yield %2 : bf16
    } -> tensor<16x8xbf16>
    return %1 : tensor<16x8xbf16>
  }
}
"""

# A strided read (every other row): its map is no loop dim, so the input counts nothing.
STRIDED = """
#s = affine_map<(d0, d1) -> (d0 * 2, d1)>
#id = affine_map<(d0, d1) -> (d0, d1)>
module {
  func.func @main_dispatch_0(%arg0: tensor<32x8xbf16>) -> tensor<16x8xbf16> attributes {torq.dispatch} {
    %0 = tensor.empty() : tensor<16x8xbf16>
    %1 = linalg.generic {indexing_maps = [#s, #id], iterator_types = ["parallel", "parallel"]}
        ins(%arg0 : tensor<32x8xbf16>) outs(%0 : tensor<16x8xbf16>) attrs = {torq.tile_root} {
    ^bb0(%a: bf16, %out: bf16):
      linalg.yield %a : bf16
    } -> tensor<16x8xbf16>
    return %1 : tensor<16x8xbf16>
  }
}
"""


def test_matmul_floor_is_compulsory_and_below_every_tiling():
    with ir.Context() as ctx, ir.Location.unknown():
        module = ir.Module.parse(MATMUL, ctx)
        floor = needed_bytes(module)
        assert floor == 2 * (48 * 64 + 48 * 32 + 64 * 32 + 64)  # bf16: the result and each input once
        options = PassOptions()
        for sizes in ([0, 0], [16, 0], [0, 16], [8, 32], [24, 16], [1, 64], [48, 1]):
            scratch, clone = lowered_tiling(module, sizes)
            assert clone is not None, sizes
            traffic = program_traffic(lowered_program(clone, options))
            assert floor <= traffic.compulsory_bytes <= traffic.dma_bytes, sizes
            assert floor == traffic.compulsory_bytes, sizes  # every tiling reads each input whole


def test_constant_indices_count_the_slabs_read():
    with ir.Context() as ctx:
        assert needed_bytes(ir.Module.parse(SLABS, ctx)) == 2 * (16 * 8 + 2 * 16 * 8)


@pytest.mark.parametrize("text, floor", [(STRIDED, 2 * 16 * 8)])
def test_unread_maps_count_nothing(text, floor):
    with ir.Context() as ctx:
        assert needed_bytes(ir.Module.parse(text, ctx)) == floor  # the result alone
