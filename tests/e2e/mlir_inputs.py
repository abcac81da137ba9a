"""Small MLIR inputs the CLI and runtime tests share."""

# A 3x3 conv (4 -> 8 channels, constant weight) in linalg on tensors, f32.
CONV_F32 = """
func.func @main(%x: tensor<1x4x10x10xf32>) -> tensor<1x8x8x8xf32> {
  %w = arith.constant dense<0.125> : tensor<8x4x3x3xf32>
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<1x8x8x8xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%e : tensor<1x8x8x8xf32>) -> tensor<1x8x8x8xf32>
  %c = linalg.conv_2d_nchw_fchw ins(%x, %w : tensor<1x4x10x10xf32>, tensor<8x4x3x3xf32>)
       outs(%acc : tensor<1x8x8x8xf32>) -> tensor<1x8x8x8xf32>
  return %c : tensor<1x8x8x8xf32>
}
"""
