// A dispatch with float tensors only can still quantize and dequantize inside (a model's final
// LayerNorm followed by its output's quantize-dequantize pair): the int8 level it rounds to is
// float compute between int8 values, kept on host by default like one with int8 tensors.
// A float model's own conversions of wide integers (an average pooling's count, i64) are not:
// the same chain on i32 / i64 passes the check.
// RUN: not torq-opt %s --pass-pipeline='builtin.module(torq-check-npu-support)' 2>&1 | FileCheck %s
// RUN: sed -e 's/f32 to i8/f32 to i32/' -e 's/i8 to i16/i32 to i64/' -e 's/: i16/: i64/g' -e 's/i16 to f32/i64 to f32/' %s \
// RUN:   | torq-opt - --pass-pipeline='builtin.module(torq-check-npu-support)' | FileCheck %s --check-prefix=WIDE
// RUN: torq-opt %s --torq-int8-float-ops=bf16 --pass-pipeline='builtin.module(torq-check-npu-support)' | FileCheck %s --check-prefix=BF16
//
// CHECK: no NPU form: 'arith.fptosi' in a linalg.generic body: a quantize (float to integer) in float compute that no integer rescale reproduces stays on host in f32 (--torq-int8-float-ops=bf16 runs it on the NPU in bf16)
// WIDE: arith.fptosi {{.*}} : f32 to i32
// BF16: func.func @output_qdq

#id2 = affine_map<(d0, d1) -> (d0, d1)>
func.func @output_qdq(%x: tensor<4x16xf32>) -> tensor<4x16xf32> attributes {torq.dispatch} {
  %scale = arith.constant 0.0392363854 : f32
  %zp = arith.constant -5.000000e+00 : f32
  %lo = arith.constant -1.280000e+02 : f32
  %hi = arith.constant 1.270000e+02 : f32
  %zp16 = arith.constant -5 : i16
  %e = tensor.empty() : tensor<4x16xf32>
  %r = linalg.generic {indexing_maps = [#id2, #id2], iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<4x16xf32>) outs(%e : tensor<4x16xf32>) {
  ^bb0(%a: f32, %o: f32):
    %0 = arith.divf %a, %scale : f32
    %1 = math.roundeven %0 : f32
    %2 = arith.addf %1, %zp : f32
    %3 = arith.maxnumf %2, %lo : f32
    %4 = arith.minnumf %3, %hi : f32
    %5 = arith.fptosi %4 : f32 to i8
    %6 = arith.extsi %5 : i8 to i16
    %7 = arith.subi %6, %zp16 : i16
    %8 = arith.sitofp %7 : i16 to f32
    %9 = arith.mulf %8, %scale : f32
    linalg.yield %9 : f32
  } -> tensor<4x16xf32>
  return %r : tensor<4x16xf32>
}
