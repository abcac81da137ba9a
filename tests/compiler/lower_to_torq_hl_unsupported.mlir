// torq-lower-to-torq-hl on a linalg op no Torq pattern covers: a clean
// one-line compile error naming the op, its location and why, a non-zero
// exit, and no IR printed.
// RUN: not torq-opt %s --pass-pipeline='builtin.module(torq-lower-to-torq-hl)' 2>&1 | FileCheck %s

// CHECK: torq-opt: error: act.py:7:3: error: linalg.generic: 'math.sin' in an elementwise body has no Torq lowering
// CHECK-NOT: func.func
// CHECK-NOT: Traceback

#id2 = affine_map<(d0, d1) -> (d0, d1)>
func.func @sin(%x: tensor<4x16xbf16>) -> tensor<4x16xbf16> {
  %e = tensor.empty() : tensor<4x16xbf16>
  %r = linalg.generic {indexing_maps = [#id2, #id2], iterator_types = ["parallel", "parallel"]} ins(%x : tensor<4x16xbf16>) outs(%e : tensor<4x16xbf16>) {
  ^bb0(%p: bf16, %o: bf16):
    %s = math.sin %p : bf16
    linalg.yield %s : bf16
  } -> tensor<4x16xbf16> loc("act.py":7:3)
  return %r : tensor<4x16xbf16>
}
