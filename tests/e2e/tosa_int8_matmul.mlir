// int8 batch matmul (TOSA, lhs zero point 3) + rescale (single round) + reshape.
// Both operands are runtime inputs. Used by tests/e2e/test_int8_tosa.py.
func.func @main(%x: tensor<2x16x24xi8>, %w: tensor<2x24x12xi8>) -> tensor<2x192xi8> {
  %azp = "tosa.const"() <{values = dense<3> : tensor<1xi8>}> : () -> tensor<1xi8>
  %bzp = "tosa.const"() <{values = dense<0> : tensor<1xi8>}> : () -> tensor<1xi8>
  %m = "tosa.matmul"(%x, %w, %azp, %bzp) : (tensor<2x16x24xi8>, tensor<2x24x12xi8>, tensor<1xi8>, tensor<1xi8>) -> tensor<2x16x12xi32>
  %s = "tosa.const_shape"() <{values = dense<[2, 192]> : tensor<2xindex>}> : () -> !tosa.shape<2>
  %mult = "tosa.const"() <{values = dense<1500000000> : tensor<1xi32>}> : () -> tensor<1xi32>
  %shift = "tosa.const"() <{values = dense<39> : tensor<1xi8>}> : () -> tensor<1xi8>
  %rizp = "tosa.const"() <{values = dense<0> : tensor<1xi32>}> : () -> tensor<1xi32>
  %rozp = "tosa.const"() <{values = dense<-2> : tensor<1xi8>}> : () -> tensor<1xi8>
  %r = "tosa.rescale"(%m, %mult, %shift, %rizp, %rozp) <{input_unsigned = false, output_unsigned = false, per_channel = false, rounding_mode = #tosa.rounding_mode<SINGLE_ROUND>, scale32 = true}> : (tensor<2x16x12xi32>, tensor<1xi32>, tensor<1xi8>, tensor<1xi32>, tensor<1xi8>) -> tensor<2x16x12xi8>
  %rs = "tosa.reshape"(%r, %s) : (tensor<2x16x12xi8>, !tosa.shape<2>) -> tensor<2x192xi8>
  return %rs : tensor<2x192xi8>
}
