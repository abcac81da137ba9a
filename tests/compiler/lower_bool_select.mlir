// An elementwise select on a boolean (i1) operand: torch's
// `where(padding_mask, -inf, 0)`, which nn.MultiheadAttention and
// nn.TransformerEncoderLayer apply to a boolean key padding / attention mask
// before the attention. The i1 operand (one byte of 0 / 1 per element in
// DDR and LRAM) is read by a select step whose condition is i1 > 0; a
// select on any other condition that is no comparison stays unsupported.
// (The epilogue prints -inf as 0xFFF0000000000000.)
// RUN: sed '/^\/\/ --- unsupported/,$d' %s | torq-opt - --pass-pipeline='builtin.module(torq-convert-dtypes,torq-lower-to-torq-hl)' | FileCheck %s
// RUN: sed '/^\/\/ --- unsupported/,$d' %s | torq-opt - --pass-pipeline='builtin.module(torq-convert-dtypes,torq-mark-patterns-for-super-tiling,torq-super-tiling,torq-lower-to-torq-hl,torq-assign-lram-addresses,torq-build-nss-program)' | FileCheck %s --check-prefix=NSS
// RUN: sed -n '/^\/\/ --- unsupported/,$p' %s | not torq-opt - --pass-pipeline='builtin.module(torq-lower-to-torq-hl)' 2>&1 | FileCheck %s --check-prefix=ERR

// CHECK-LABEL: func.func @padding_mask(
// CHECK: %[[R:.*]] = "torq_hl.elementwise"(%arg0) {epilogue = {result = 0 : i64, steps = [{args = [{axes = [1], operand = 0 : i64}, 0.000000e+00, 0xFFF0000000000000 : f64, 0.000000e+00], op = "select_gt"}]}{{.*}} : (tensor<16xi1>) -> tensor<64x16xbf16>
// CHECK: return %[[R]]
// The mask is an i1 tensor of 16 bytes in DDR and LRAM.
// NSS: "torq_nss.tensor"() {spec = {arg_index = 0 : i64, dtype = "i1", host_dtype = "i1", index = 0 : i64, kind = "input", shape = [16]}}
// NSS: "torq_nss.buffer"() {spec = {id = 0 : i64, {{.*}}offset = {{[0-9]+}} : i64, size = 16 : i64}}
// NSS: "torq_nss.dma_in"() {spec = {buffer = 0 : i64, offsets = [0], sizes = [16], tensor = 0 : i64}}
// NSS: "torq_nss.compute"() {spec = {{.*}}operands = [{buffer = 0 : i64, dtype = "i1", shape = [16]}]
func.func @padding_mask(%m: tensor<16xi1>) -> tensor<64x16xf32> {
  %ninf = arith.constant 0xFF800000 : f32
  %zero = arith.constant 0.000000e+00 : f32
  %e = tensor.empty() : tensor<64x16xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%m : tensor<16xi1>) outs(%e : tensor<64x16xf32>) {
  ^bb0(%in: i1, %out: f32):
    %s = arith.select %in, %ninf, %zero : f32
    linalg.yield %s : f32
  } -> tensor<64x16xf32>
  return %r : tensor<64x16xf32>
}

// --- unsupported
// ERR: error: linalg.generic: arith.select whose condition is neither a comparison nor an i1 operand
func.func @constant_condition(%x: tensor<16xf32>) -> tensor<16xf32> {
  %true = arith.constant true
  %zero = arith.constant 0.000000e+00 : f32
  %e = tensor.empty() : tensor<16xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]} ins(%x : tensor<16xf32>) outs(%e : tensor<16xf32>) {
  ^bb0(%in: f32, %out: f32):
    %s = arith.select %true, %in, %zero : f32
    linalg.yield %s : f32
  } -> tensor<16xf32>
  return %r : tensor<16xf32>
}
