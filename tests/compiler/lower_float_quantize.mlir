// The dequantize into and the quantize out of float compute that stays float
// (--torq-int8-float-ops=bf16: a quantized softmax or layer norm in bf16).
// arith.sitofp is a cast of the integer to bf16; math.roundeven a round step;
// arith.fptosi a cast to i8, which rounds, so only a value known to be an
// integer (rounded, then offset and clamped by integers) may be cast: an
// fptosi of any other value truncates and stays unsupported.
// RUN: sed '/^\/\/ --- unsupported/,$d' %s | torq-opt - --pass-pipeline='builtin.module(torq-convert-dtypes,torq-lower-to-torq-hl)' | FileCheck %s
// RUN: sed -n '/^\/\/ --- unsupported/,$p' %s | not torq-opt - --pass-pipeline='builtin.module(torq-convert-dtypes,torq-lower-to-torq-hl)' 2>&1 | FileCheck %s --check-prefix=ERR

// CHECK-LABEL: func.func @dequantize(
// CHECK: "torq_hl.elementwise"(%arg0) {epilogue = {result = 2 : i64, steps = [{args = [{{.*}}], op = "sub"{{.*}}}, {args = [{{.*}}], op = "cast", to = "bf16"}, {args = [{{.*}}], op = "mul"}]}{{.*}} : (tensor<64xi8>) -> tensor<64xbf16>
func.func @dequantize(%x: tensor<64xi8>) -> tensor<64xf32> {
  %s = arith.constant 0.0141236605 : f32
  %zp = arith.constant 6 : i16
  %e = tensor.empty() : tensor<64xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]} ins(%x : tensor<64xi8>) outs(%e : tensor<64xf32>) {
  ^bb0(%in: i8, %out: f32):
    %w = arith.extsi %in : i8 to i16
    %c = arith.subi %w, %zp : i16
    %f = arith.sitofp %c : i16 to f32
    %v = arith.mulf %f, %s : f32
    linalg.yield %v : f32
  } -> tensor<64xf32>
  return %r : tensor<64xf32>
}

// CHECK-LABEL: func.func @quantize(
// CHECK: "torq_hl.elementwise"(%arg0) {epilogue = {result = 5 : i64, steps = [{args = [{{.*}}], op = "div"}, {args = [{{.*}}], op = "round"}, {args = [{{.*}}], op = "add"}, {args = [{{.*}}], op = "max"}, {args = [{{.*}}], op = "min"}, {args = [{{.*}}], op = "cast", to = "i8"}]}{{.*}} : (tensor<64xbf16>) -> tensor<64xi8>
func.func @quantize(%x: tensor<64xf32>) -> tensor<64xi8> {
  %s = arith.constant 0.00392156886 : f32
  %zp = arith.constant -1.280000e+02 : f32
  %hi = arith.constant 1.270000e+02 : f32
  %e = tensor.empty() : tensor<64xi8>
  %r = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]} ins(%x : tensor<64xf32>) outs(%e : tensor<64xi8>) {
  ^bb0(%in: f32, %out: i8):
    %d = arith.divf %in, %s : f32
    %q = math.roundeven %d : f32
    %o = arith.addf %q, %zp : f32
    %lo = arith.maxnumf %o, %zp : f32
    %c = arith.minnumf %lo, %hi : f32
    %i = arith.fptosi %c : f32 to i8
    linalg.yield %i : i8
  } -> tensor<64xi8>
  return %r : tensor<64xi8>
}

// --- unsupported
// ERR: error: {{.*}}arith.fptosi in linalg.generic body converts a value not known to be an integer
func.func @truncate(%x: tensor<64xf32>) -> tensor<64xi8> {
  %e = tensor.empty() : tensor<64xi8>
  %r = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]} ins(%x : tensor<64xf32>) outs(%e : tensor<64xi8>) {
  ^bb0(%in: f32, %out: i8):
    %i = arith.fptosi %in : f32 to i8
    linalg.yield %i : i8
  } -> tensor<64xi8>
  return %r : tensor<64xi8>
}
