// Double-buffered reduction steps (tile_schedule.plan_body): the operand
// slices a reduction loop loads each step get a second placement when LRAM
// has room, and odd steps load there, so the next step's DMA-in need not wait
// for this step's compute.
//
// A 16x64 . 64x16 bf16 matmul with K in 4 steps of 16, in the function body.
// Events: 0 compute the zeroed f32 accumulator (16 x 16 x 4 = 1024 B),
// 1 dma_in the x slice, 2 dma_in the w slice (16 x 16 x 2 = 512 B each),
// 3 the accumulating matmul, 4 the bf16 result (512 B), 5 its dma_out.
// One placement: accumulator at 0, x slice 1024, w slice 1536, the result
// (x and w dead by then) at 1024: 2048 bytes, the footprint.
// Two placements (first fit in order of first use): x 1024, x' 1536,
// w 2048, w' 2560: 3072 bytes, which a 3 KiB LRAM holds and a 2 KiB one does
// not. The peak counts live bytes in program order, where x and x' are never
// live at once: 2048 either way.
// RUN: torq-opt %s --torq-hw=SL2610:lram_kb=3,reserved_kb=0 --pass-pipeline='builtin.module(torq-assign-lram-addresses)' | FileCheck %s --check-prefix=TWO
// RUN: torq-opt %s --torq-hw=SL2610:lram_kb=2,reserved_kb=0 --pass-pipeline='builtin.module(torq-assign-lram-addresses)' | FileCheck %s --check-prefix=ONE
// RUN: torq-opt %s --torq-hw=SL2610:lram_kb=3,reserved_kb=0 --pass-pipeline='builtin.module(torq-assign-lram-addresses,torq-build-nss-program)' | FileCheck %s --check-prefix=NSS

// TWO-LABEL: func.func @steps(
// TWO-SAME: attributes {torq.lram_end = 3072 : i64, torq.lram_peak = 2048 : i64}
// TWO: "torq_hl.matmul"{{.*}}torq.lram_operands = [1024, 2048, 0], torq.lram_result = 0 : i64, torq.lram_step_operands = [1536, 2560, -1]}
// TWO: "torq_hl.elementwise"(%{{.*}}) {{.*}}torq.lram_operands = [0], torq.lram_result = 1024 : i64}
// ONE-LABEL: func.func @steps(
// ONE-SAME: attributes {torq.lram_end = 2048 : i64, torq.lram_peak = 2048 : i64}
// ONE: "torq_hl.matmul"{{.*}}torq.lram_operands = [1024, 1536, 0], torq.lram_result = 0 : i64}

// Steps 0 and 2 load x and w at 1024 and 2048, steps 1 and 3 at 1536 and 2560.
// NSS-LABEL: func.func @steps(
// NSS: "torq_nss.buffer"() {spec = {id = 1 : i64, {{.*}}offset = 1024 : i64,
// NSS-NEXT: "torq_nss.buffer"() {spec = {id = 2 : i64, {{.*}}offset = 2048 : i64,
// NSS-NEXT: "torq_nss.buffer"() {spec = {id = 3 : i64, {{.*}}offset = 1536 : i64,
// NSS-NEXT: "torq_nss.buffer"() {spec = {id = 4 : i64, {{.*}}offset = 2560 : i64,
// NSS-NEXT: "torq_nss.buffer"() {spec = {id = 5 : i64, {{.*}}offset = 1024 : i64,
// NSS-NEXT: "torq_nss.buffer"() {spec = {id = 6 : i64, {{.*}}offset = 2048 : i64,
// NSS-NEXT: "torq_nss.buffer"() {spec = {id = 7 : i64, {{.*}}offset = 1536 : i64,
// NSS-NEXT: "torq_nss.buffer"() {spec = {id = 8 : i64, {{.*}}offset = 2560 : i64,
// NSS: "torq_nss.dma_in"() {spec = {buffer = 1 : i64, offsets = [0, 0], sizes = [16, 16], tensor = 0 : i64}}
// NSS: "torq_nss.dma_in"() {spec = {buffer = 3 : i64, offsets = [0, 16], sizes = [16, 16], tensor = 0 : i64}}
func.func @steps(%x: tensor<16x64xbf16>, %w: tensor<64x16xbf16>) -> tensor<16x16xbf16> {
  %c0 = arith.constant 0 : index
  %c16 = arith.constant 16 : index
  %c64 = arith.constant 64 : index
  %z = "torq_hl.elementwise"() {epilogue = {result = -1, steps = [{args = [0.0, 0.0], op = "add"}]}, macs = 0 : i64} : () -> tensor<16x16xf32>
  %s = scf.for %k = %c0 to %c64 step %c16 iter_args(%acc = %z) -> (tensor<16x16xf32>) {
    %xs = tensor.extract_slice %x[0, %k] [16, 16] [1, 1] : tensor<16x64xbf16> to tensor<16x16xbf16>
    %ws = tensor.extract_slice %w[%k, 0] [16, 16] [1, 1] : tensor<64x16xbf16> to tensor<16x16xbf16>
    %m = "torq_hl.matmul"(%xs, %ws, %acc) {accumulate = 1 : i64, epilogue = {result = -1, steps = []}, lhs_dims = "MK", macs = 4096 : i64, output_dims = "MN", rhs_dims = "KN"} : (tensor<16x16xbf16>, tensor<16x16xbf16>, tensor<16x16xf32>) -> tensor<16x16xf32>
    scf.yield %m : tensor<16x16xf32>
  }
  %o = "torq_hl.elementwise"(%s) {epilogue = {result = 0, steps = [{args = [{operand = 0}, 0.0], op = "add"}]}, macs = 0 : i64} : (tensor<16x16xf32>) -> tensor<16x16xbf16>
  return %o : tensor<16x16xbf16>
}
