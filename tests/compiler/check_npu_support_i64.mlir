// A dispatch passing an i64 tensor on (IREE's initializer copying a scatter's int64
// indices) stays on the host with the reason: the program model has no 64-bit DDR
// tensor. Without the check such a copy reached torq-build-nss-program and failed there.
// RUN: not torq-opt %s --pass-pipeline='builtin.module(torq-check-npu-support)' 2>&1 | FileCheck %s
// CHECK: torq-opt: error: torq-check-npu-support: no NPU form: tensor argument 0 (tensor<384xi64>) is of i64, which the slices do not support
// CHECK-NOT: Traceback

func.func @copy(%x: tensor<384xi64>) -> tensor<384xi64> attributes {torq.dispatch} {
  return %x : tensor<384xi64>
}
