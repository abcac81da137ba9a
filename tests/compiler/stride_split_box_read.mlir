// A strided load that no reader folds becomes a unit-stride box of the input reshaped.
// GPT-J's rotate_every_two interleaves -x[..., 1::2] and x[..., 0::2] of the rotary
// columns: IREE gives the negation's dispatch a load of x with stride 2 on its last dim
// read by an elementwise generic (no convolution takes the stride into its map), and
// the interleave's dispatch a strided load that a store writes into a box of the
// result. Both stayed on the host ("dispatch loads a strided part of an input ...",
// "no Torq pattern (loops 8x4x4: p p p)"). Dispatch extraction now passes x as
// 1x8x4x8x2 (16 columns split into 8 pairs: `box_reads.StrideSplit`) and reads the odd
// and even columns as the boxes [.., 0:4, 1] and [.., 0:4, 0] of it: DMA boxes.
// RUN: torq-compile %s --compile-to=torq-hl 2>&1 | FileCheck %s
// RUN: torq-compile %s --compile-to=torq-hl 2>&1 | FileCheck %s --check-prefix=HOST

// HOST-NOT: stays on host
// CHECK-LABEL: func.func @main_dispatch_0(%arg0: tensor<1x8x4x8x2xbf16>)
// CHECK: %[[ODD:.*]] = tensor.extract_slice %arg0[0, 0, 0, 0, 1] [1, 8, 4, 4, 1] [1, 1, 1, 1, 1] : tensor<1x8x4x8x2xbf16> to tensor<8x4x4xbf16>
// CHECK: "torq_hl.elementwise"(%[[ODD]])
// CHECK-LABEL: func.func @main_dispatch_2(%arg0: tensor<1x8x4x8x2xbf16>)
// CHECK: %[[EVEN:.*]] = tensor.extract_slice %arg0[0, 0, 0, 0, 0] [1, 8, 4, 4, 1] [1, 1, 1, 1, 1] : tensor<1x8x4x8x2xbf16> to tensor<8x4x4xbf16>
// CHECK: return %[[EVEN]]
func.func @main(%x: tensor<1x8x4x16xf32>) -> tensor<1x8x4x4x2xf32> {
  %odd = tensor.extract_slice %x[0, 0, 0, 1] [1, 8, 4, 4] [1, 1, 1, 2] : tensor<1x8x4x16xf32> to tensor<8x4x4xf32>
  %even = tensor.extract_slice %x[0, 0, 0, 0] [1, 8, 4, 4] [1, 1, 1, 2] : tensor<1x8x4x16xf32> to tensor<8x4x4xf32>
  %e0 = tensor.empty() : tensor<8x4x4xf32>
  %neg = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%odd : tensor<8x4x4xf32>) outs(%e0 : tensor<8x4x4xf32>) {
  ^bb0(%in: f32, %out: f32):
    %n = arith.negf %in : f32
    linalg.yield %n : f32
  } -> tensor<8x4x4xf32>
  %e = tensor.empty() : tensor<1x8x4x4x2xf32>
  %a = tensor.insert_slice %neg into %e[0, 0, 0, 0, 0] [1, 8, 4, 4, 1] [1, 1, 1, 1, 1] : tensor<8x4x4xf32> into tensor<1x8x4x4x2xf32>
  %b = tensor.insert_slice %even into %a[0, 0, 0, 0, 1] [1, 8, 4, 4, 1] [1, 1, 1, 1, 1] : tensor<8x4x4xf32> into tensor<1x8x4x4x2xf32>
  return %b : tensor<1x8x4x4x2xf32>
}
