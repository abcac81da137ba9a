// int8 residual add as TFLite writes it in TOSA: rescale both inputs (zero
// points -4 and 9) to i32, add, rescale to the output scale (zero point 3).
// Used by tests/e2e/test_int8_tosa.py.
func.func @main(%a: tensor<1x8x8x16xi8>, %b: tensor<1x8x8x16xi8>) -> tensor<1x8x8x16xi8> {
  %m1 = "tosa.const"() <{values = dense<1073741824> : tensor<1xi32>}> : () -> tensor<1xi32>
  %s1 = "tosa.const"() <{values = dense<20> : tensor<1xi8>}> : () -> tensor<1xi8>
  %m2 = "tosa.const"() <{values = dense<1518500250> : tensor<1xi32>}> : () -> tensor<1xi32>
  %s2 = "tosa.const"() <{values = dense<20> : tensor<1xi8>}> : () -> tensor<1xi8>
  %m3 = "tosa.const"() <{values = dense<1288490189> : tensor<1xi32>}> : () -> tensor<1xi32>
  %s3 = "tosa.const"() <{values = dense<40> : tensor<1xi8>}> : () -> tensor<1xi8>
  %zpa = "tosa.const"() <{values = dense<-4> : tensor<1xi8>}> : () -> tensor<1xi8>
  %zpb = "tosa.const"() <{values = dense<9> : tensor<1xi8>}> : () -> tensor<1xi8>
  %zp32 = "tosa.const"() <{values = dense<0> : tensor<1xi32>}> : () -> tensor<1xi32>
  %zpo = "tosa.const"() <{values = dense<3> : tensor<1xi8>}> : () -> tensor<1xi8>
  %ra = "tosa.rescale"(%a, %m1, %s1, %zpa, %zp32) <{input_unsigned = false, output_unsigned = false, per_channel = false, rounding_mode = #tosa.rounding_mode<SINGLE_ROUND>, scale32 = true}> : (tensor<1x8x8x16xi8>, tensor<1xi32>, tensor<1xi8>, tensor<1xi8>, tensor<1xi32>) -> tensor<1x8x8x16xi32>
  %rb = "tosa.rescale"(%b, %m2, %s2, %zpb, %zp32) <{input_unsigned = false, output_unsigned = false, per_channel = false, rounding_mode = #tosa.rounding_mode<SINGLE_ROUND>, scale32 = true}> : (tensor<1x8x8x16xi8>, tensor<1xi32>, tensor<1xi8>, tensor<1xi8>, tensor<1xi32>) -> tensor<1x8x8x16xi32>
  %s = "tosa.add"(%ra, %rb) : (tensor<1x8x8x16xi32>, tensor<1x8x8x16xi32>) -> tensor<1x8x8x16xi32>
  %r = "tosa.rescale"(%s, %m3, %s3, %zp32, %zpo) <{input_unsigned = false, output_unsigned = false, per_channel = false, rounding_mode = #tosa.rounding_mode<SINGLE_ROUND>, scale32 = true}> : (tensor<1x8x8x16xi32>, tensor<1xi32>, tensor<1xi8>, tensor<1xi32>, tensor<1xi8>) -> tensor<1x8x8x16xi8>
  return %r : tensor<1x8x8x16xi8>
}
