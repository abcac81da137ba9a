// torq-build-nss-program: a tile loop's body is planned on its own, from LRAM offset 0,
// so a DDR slice the function body loaded before the loop (the peeled remainder of one
// fuse group) and reads again after it (the remainder of the next group) is loaded
// again: the loop's buffers went over it. Before, the second read took the old buffer,
// live across the loop beside the loop's own at the same bytes, and the program
// validator refused the dispatch (TinyViT int8: a head split requantized and its row
// sums, main_graph_dispatch_57).
// RUN: torq-opt %s --pass-pipeline='builtin.module(torq-build-nss-program)' | FileCheck %s

// CHECK: "torq_nss.dma_in"() {spec = {buffer = [[FIRST:[0-9]+]] : i64, offsets = [0, 0, 4, 0], sizes = [1, 196, 1, 32], tensor = 0 : i64}}
// CHECK: "torq_nss.dma_out"() {spec = {buffer = {{[0-9]+}} : i64, offsets = [2, 0], sizes = [2, 196], tensor = 1 : i64}}
// CHECK: "torq_nss.dma_in"() {spec = {buffer = [[AGAIN:[0-9]+]] : i64, offsets = [0, 0, 4, 0], sizes = [1, 196, 1, 32], tensor = 0 : i64}}
// CHECK: "torq_nss.compute"() {spec = {{.*}}operands = [{buffer = [[AGAIN]] : i64
// CHECK: "torq_nss.dma_out"() {spec = {buffer = {{[0-9]+}} : i64, offsets = [4, 0], sizes = [1, 196], tensor = 1 : i64}}

module {
  func.func @main_graph_dispatch_57(%arg0: tensor<1x196x5x96xi8>) -> (tensor<5x196xi32>, tensor<5x196x32xi8>) attributes {torq.dispatch, torq.lram_end = 150528 : i64, torq.lram_peak = 62720 : i64} {
    %c4 = arith.constant 4 : index
    %c2 = arith.constant 2 : index
    %c0 = arith.constant 0 : index
    %0 = tensor.empty() : tensor<5x196xi32>
    %extracted_slice = tensor.extract_slice %arg0[0, 0, 0, 0] [1, 196, 5, 32] [1, 1, 1, 1] : tensor<1x196x5x96xi8> to tensor<196x5x32xi8>
    %1 = tensor.empty() : tensor<5x196x32xi8>
    %2 = scf.for %arg1 = %c0 to %c4 step %c2 iter_args(%arg2 = %1) -> (tensor<5x196x32xi8>) {
      %extracted_slice_2 = tensor.extract_slice %extracted_slice[0, %arg1, 0] [196, 2, 32] [1, 1, 1] : tensor<196x5x32xi8> to tensor<196x2x32xi8>
      %8 = "torq_hl.elementwise"(%extracted_slice_2) {epilogue = {result = 0 : i64, steps = [{args = [{axes = [1, 0, 2], operand = 0 : i64}, 0.000000e+00], op = "add"}]}, macs = 0 : i64, torq.lram_operands = [0], torq.lram_resident = [0], torq.lram_result = 12544 : i64, torq.lram_set_stride = 25088 : i64, torq.lram_sets = 2 : i64} : (tensor<196x2x32xi8>) -> tensor<2x196x32xi8>
      %inserted_slice_3 = tensor.insert_slice %8 into %arg2[%arg1, 0, 0] [2, 196, 32] [1, 1, 1] : tensor<2x196x32xi8> into tensor<5x196x32xi8>
      scf.yield %inserted_slice_3 : tensor<5x196x32xi8>
    }
    %extracted_slice_0 = tensor.extract_slice %extracted_slice[0, 4, 0] [196, 1, 32] [1, 1, 1] : tensor<196x5x32xi8> to tensor<196x1x32xi8>
    %3 = "torq_hl.elementwise"(%extracted_slice_0) {epilogue = {result = 0 : i64, steps = [{args = [{axes = [1, 0, 2], operand = 0 : i64}, 0.000000e+00], op = "add"}]}, macs = 0 : i64, torq.lram_operands = [0], torq.lram_result = 6272 : i64} : (tensor<196x1x32xi8>) -> tensor<1x196x32xi8>
    %inserted_slice = tensor.insert_slice %3 into %2[4, 0, 0] [1, 196, 32] [1, 1, 1] : tensor<1x196x32xi8> into tensor<5x196x32xi8>
    %4 = scf.for %arg1 = %c0 to %c4 step %c2 iter_args(%arg2 = %0) -> (tensor<5x196xi32>) {
      %extracted_slice_2 = tensor.extract_slice %extracted_slice[0, %arg1, 0] [196, 2, 32] [1, 1, 1] : tensor<196x5x32xi8> to tensor<196x2x32xi8>
      %8 = "torq_hl.elementwise"(%extracted_slice_2) {epilogue = {result = 0 : i64, steps = [{args = [{axes = [1, 0, 2], operand = 0 : i64}, 0.000000e+00], op = "add"}]}, macs = 0 : i64, torq.lram_operands = [0], torq.lram_resident = [0], torq.lram_result = 12544 : i64, torq.lram_set_stride = 75264 : i64, torq.lram_sets = 2 : i64} : (tensor<196x2x32xi8>) -> tensor<2x196x32xi8>
      %9 = "torq_hl.elementwise"(%8) {epilogue = {result = 0 : i64, steps = [{args = [{axes = [0, 1, 2], operand = 0 : i64}, 0.000000e+00], op = "add"}]}, macs = 0 : i64, torq.lram_operands = [12544], torq.lram_resident = [0], torq.lram_result = 25088 : i64, torq.lram_set_stride = 75264 : i64, torq.lram_sets = 2 : i64} : (tensor<2x196x32xi8>) -> tensor<2x196x32xi32>
      %10 = "torq_hl.reduce"(%9) {axes = [2], epilogue = {result = 0 : i64, steps = []}, macs = 12544 : i64, mode = "sum", torq.lram_operands = [25088], torq.lram_resident = [0], torq.lram_result = 0 : i64, torq.lram_set_stride = 75264 : i64, torq.lram_sets = 2 : i64} : (tensor<2x196x32xi32>) -> tensor<2x196xi32>
      %inserted_slice_3 = tensor.insert_slice %10 into %arg2[%arg1, 0] [2, 196] [1, 1] : tensor<2x196xi32> into tensor<5x196xi32>
      scf.yield %inserted_slice_3 : tensor<5x196xi32>
    }
    %5 = "torq_hl.elementwise"(%extracted_slice_0) {epilogue = {result = 0 : i64, steps = [{args = [{axes = [1, 0, 2], operand = 0 : i64}, 0.000000e+00], op = "add"}]}, macs = 0 : i64, torq.lram_operands = [0], torq.lram_result = 6272 : i64} : (tensor<196x1x32xi8>) -> tensor<1x196x32xi8>
    %6 = "torq_hl.elementwise"(%5) {epilogue = {result = 0 : i64, steps = [{args = [{axes = [0, 1, 2], operand = 0 : i64}, 0.000000e+00], op = "add"}]}, macs = 0 : i64, torq.lram_operands = [6272], torq.lram_result = 12544 : i64} : (tensor<1x196x32xi8>) -> tensor<1x196x32xi32>
    %7 = "torq_hl.reduce"(%6) {axes = [2], epilogue = {result = 0 : i64, steps = []}, macs = 6272 : i64, mode = "sum", torq.lram_operands = [12544], torq.lram_result = 0 : i64} : (tensor<1x196x32xi32>) -> tensor<1x196xi32>
    %inserted_slice_1 = tensor.insert_slice %7 into %4[4, 0] [1, 196] [1, 1] : tensor<1x196xi32> into tensor<5x196xi32>
    return %inserted_slice_1, %inserted_slice : tensor<5x196xi32>, tensor<5x196x32xi8>
  }
}

