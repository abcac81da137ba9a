// torq-check-npu-support changes nothing on a function the NPU can run, and
// refuses, naming the op and why, one it cannot (in a compile the dispatch
// then stays on the host with this reason as its remark).
// RUN: torq-opt %s --pass-pipeline='builtin.module(torq-check-npu-support)' | FileCheck %s
// RUN: sed 's/arith.addf %a/arith.remf %a/' %s | not torq-opt - --pass-pipeline='builtin.module(torq-check-npu-support)' 2>&1 | FileCheck %s --check-prefix=REM
// A float requantization left as it is (torq-lower-requantization did not run) computes in f32:
// RUN: not torq-opt %S/lower_requantization.mlir --pass-pipeline='builtin.module(torq-check-npu-support)' 2>&1 | FileCheck %s --check-prefix=F32
//
// CHECK-LABEL: func.func @add(
// CHECK: arith.addf
// REM: torq-opt: error: torq-check-npu-support: no NPU form: linalg.generic: 'arith.remf' in an elementwise body has no Torq lowering
// REM-NOT: Traceback
// F32: torq-opt: error: torq-check-npu-support: no NPU form: 'arith.sitofp' in a linalg.generic body: a dequantize (integer to float) in float compute that no integer rescale reproduces stays on host in f32 (--torq-int8-float-ops=bf16 runs it on the NPU in bf16)

#id2 = affine_map<(d0, d1) -> (d0, d1)>
func.func @add(%x: tensor<4x16xbf16>, %y: tensor<4x16xbf16>) -> tensor<4x16xbf16> attributes {torq.dispatch} {
  %e = tensor.empty() : tensor<4x16xbf16>
  %r = linalg.generic {indexing_maps = [#id2, #id2, #id2], iterator_types = ["parallel", "parallel"]}
      ins(%x, %y : tensor<4x16xbf16>, tensor<4x16xbf16>) outs(%e : tensor<4x16xbf16>) {
  ^bb0(%a: bf16, %b: bf16, %o: bf16):
    %s = arith.addf %a, %b : bf16
    linalg.yield %s : bf16
  } -> tensor<4x16xbf16>
  return %r : tensor<4x16xbf16>
}
