// torq-fold-padding: a `tensor.pad` that only conv / pooling inputs read (as
// IREE leaves it in the consumer's dispatch with
// --iree-dispatch-creation-enable-fuse-padding-into-linalg-consumer-ops)
// becomes a `torq.pad` view; the consumer keeps reading the padded shape, and
// the NSS program reads only the real part of each box, handing the rest to
// the op as its `pad` attr [top, bottom, left, right].
// RUN: sed '/^\/\/ --- unsupported/,$d' %s | torq-opt - --pass-pipeline='builtin.module(torq-fold-padding)' | FileCheck %s --check-prefix=FOLD
// RUN: sed '/^\/\/ --- unsupported/,$d' %s | torq-opt - --torq-hw=SL2610:lram_kb=4,reserved_kb=0 --pass-pipeline='builtin.module(torq-fold-padding,torq-mark-patterns-for-super-tiling,torq-super-tiling,torq-lower-to-torq-hl,torq-assign-lram-addresses,torq-build-nss-program)' | FileCheck %s --check-prefix=NSS
// RUN: sed -n '/^\/\/ --- unsupported/,$p' %s | not torq-opt - --pass-pipeline='builtin.module(torq-fold-padding)' 2>&1 | FileCheck %s --check-prefix=ERR

#in = affine_map<(o, y, x, c, i, j) -> (c, y + i, x + j)>
#w = affine_map<(o, y, x, c, i, j) -> (o, c, i, j)>
#out = affine_map<(o, y, x, c, i, j) -> (o, y, x)>

// torch Conv2d(8, 8, 3, padding=1) on 16x16: the pad becomes a view with the
// same amounts. With a 4 KiB LRAM the conv is tiled into 4 tiles of 4 output
// rows; each tile's input box is 6 rows of the 18x18 padded tensor (the
// halo), of which the DMA moves only the rows inside the 16x16 input: rows
// 0..4 (5 rows, 1 row of top padding) for tile 0, 3..8 and 7..12 (6 rows, no
// vertical padding) for tiles 1 and 2, 11..15 (5 rows, 1 row of bottom
// padding) for tile 3. Every tile pads one column left and right.
// FOLD-LABEL: func.func @conv_same
// FOLD-NOT: tensor.pad
// FOLD: %[[V:.*]] = "torq.pad"(%arg0) {high = array<i64: 0, 1, 1>, low = array<i64: 0, 1, 1>, value = 0.000000e+00 : bf16} : (tensor<8x16x16xbf16>) -> tensor<8x18x18xbf16>
// FOLD: linalg.generic {{.*}} ins(%[[V]], %arg1 : tensor<8x18x18xbf16>, tensor<8x8x3x3xbf16>)
// NSS-LABEL: func.func @conv_same()
// NSS: "torq_nss.dma_in"() {spec = {buffer = {{.*}}, offsets = [0, 0, 0], sizes = [8, 5, 16], tensor = 0 : i64}}
// NSS: "torq_nss.compute"() {spec = {attrs = [{{.*}}["pad", [1, 0, 1, 1]], ["pad_value", 0.000000e+00]], {{.*}}op = "conv2d", operands = [{{.*}}shape = [8, 5, 16]}{{.*}}result = {{.*}}shape = [8, 4, 16]}
// NSS: "torq_nss.dma_in"() {spec = {buffer = {{.*}}, offsets = [0, 3, 0], sizes = [8, 6, 16], tensor = 0 : i64}}
// NSS: "torq_nss.compute"() {spec = {attrs = [{{.*}}["pad", [0, 0, 1, 1]], ["pad_value", 0.000000e+00]], {{.*}}op = "conv2d"
// NSS: "torq_nss.dma_in"() {spec = {buffer = {{.*}}, offsets = [0, 7, 0], sizes = [8, 6, 16], tensor = 0 : i64}}
// NSS: "torq_nss.compute"() {spec = {attrs = [{{.*}}["pad", [0, 0, 1, 1]], ["pad_value", 0.000000e+00]], {{.*}}op = "conv2d"
// NSS: "torq_nss.dma_in"() {spec = {buffer = {{.*}}, offsets = [0, 11, 0], sizes = [8, 5, 16], tensor = 0 : i64}}
// NSS: "torq_nss.compute"() {spec = {attrs = [{{.*}}["pad", [0, 1, 1, 1]], ["pad_value", 0.000000e+00]], {{.*}}op = "conv2d"
// NSS-NOT: torq_nss.dma_in
// NSS: return
func.func @conv_same(%x: tensor<8x16x16xbf16>, %w: tensor<8x8x3x3xbf16>) -> tensor<8x16x16xbf16> {
  %z = arith.constant 0.0 : bf16
  %p = tensor.pad %x low[0, 1, 1] high[0, 1, 1] {
  ^bb0(%a: index, %b: index, %c: index):
    tensor.yield %z : bf16
  } : tensor<8x16x16xbf16> to tensor<8x18x18xbf16>
  %e = tensor.empty() : tensor<8x16x16xbf16>
  %f = linalg.fill ins(%z : bf16) outs(%e : tensor<8x16x16xbf16>) -> tensor<8x16x16xbf16>
  %r = linalg.generic {indexing_maps = [#in, #w, #out], iterator_types = ["parallel", "parallel", "parallel", "reduction", "reduction", "reduction"]}
      ins(%p, %w : tensor<8x18x18xbf16>, tensor<8x8x3x3xbf16>) outs(%f : tensor<8x16x16xbf16>) {
  ^bb0(%a: bf16, %b: bf16, %acc: bf16):
    %m = arith.mulf %a, %b : bf16
    %s = arith.addf %acc, %m : bf16
    linalg.yield %s : bf16
  } -> tensor<8x16x16xbf16>
  return %r : tensor<8x16x16xbf16>
}

// torch MaxPool2d(3, 2, padding=1) on 8x8: padded with -inf (pad_value, printed as
// 0xFFF0000000000000).
// Untiled: one DMA of the whole 4x8x8 input, the op pads all four sides.
// FOLD-LABEL: func.func @maxpool_pad
// FOLD: "torq.pad"(%arg0) {high = array<i64: 0, 1, 1>, low = array<i64: 0, 1, 1>, value = 0xFF80 : bf16}
// NSS-LABEL: func.func @maxpool_pad()
// NSS: "torq_nss.dma_in"() {spec = {buffer = {{.*}}, offsets = [0, 0, 0], sizes = [4, 8, 8], tensor = 0 : i64}}
// NSS-NEXT: "torq_nss.compute"() {spec = {attrs = [{{.*}}["pad", [1, 1, 1, 1]], ["pad_value", 0xFFF0000000000000 : f64]], {{.*}}op = "maxpool2d", operands = [{{.*}}shape = [4, 8, 8]}], result = {{.*}}shape = [4, 4, 4]}
func.func @maxpool_pad(%x: tensor<4x8x8xbf16>) -> tensor<4x4x4xbf16> {
  %lo = arith.constant 0xFF80 : bf16
  %p = tensor.pad %x low[0, 1, 1] high[0, 1, 1] {
  ^bb0(%a: index, %b: index, %c: index):
    tensor.yield %lo : bf16
  } : tensor<4x8x8xbf16> to tensor<4x10x10xbf16>
  %e = tensor.empty() : tensor<4x4x4xbf16>
  %win = tensor.empty() : tensor<3x3xbf16>
  %f = linalg.fill ins(%lo : bf16) outs(%e : tensor<4x4x4xbf16>) -> tensor<4x4x4xbf16>
  %r = linalg.generic {indexing_maps = [affine_map<(c, y, x, i, j) -> (c, y * 2 + i, x * 2 + j)>, affine_map<(c, y, x, i, j) -> (i, j)>, affine_map<(c, y, x, i, j) -> (c, y, x)>], iterator_types = ["parallel", "parallel", "parallel", "reduction", "reduction"]}
      ins(%p, %win : tensor<4x10x10xbf16>, tensor<3x3xbf16>) outs(%f : tensor<4x4x4xbf16>) {
  ^bb0(%a: bf16, %b: bf16, %acc: bf16):
    %m = arith.maximumf %acc, %a : bf16
    linalg.yield %m : bf16
  } -> tensor<4x4x4xbf16>
  return %r : tensor<4x4x4xbf16>
}

// --- unsupported: padding on the channel dim, which no window slides over,
// is no padding the conv applies; as a pass on its own that is an error
// naming the op (the Torq target leaves such a dispatch on the host).
// ERR: error: tensor.pad: padding of input dim 0 of conv2d, which is no window dim
func.func @channel_pad(%x: tensor<6x16x16xbf16>, %w: tensor<8x8x3x3xbf16>) -> tensor<8x14x14xbf16> {
  %z = arith.constant 0.0 : bf16
  %p = tensor.pad %x low[1, 0, 0] high[1, 0, 0] {
  ^bb0(%a: index, %b: index, %c: index):
    tensor.yield %z : bf16
  } : tensor<6x16x16xbf16> to tensor<8x16x16xbf16>
  %e = tensor.empty() : tensor<8x14x14xbf16>
  %f = linalg.fill ins(%z : bf16) outs(%e : tensor<8x14x14xbf16>) -> tensor<8x14x14xbf16>
  %r = linalg.generic {indexing_maps = [affine_map<(o, y, x, c, i, j) -> (c, y + i, x + j)>, affine_map<(o, y, x, c, i, j) -> (o, c, i, j)>, affine_map<(o, y, x, c, i, j) -> (o, y, x)>], iterator_types = ["parallel", "parallel", "parallel", "reduction", "reduction", "reduction"]}
      ins(%p, %w : tensor<8x16x16xbf16>, tensor<8x8x3x3xbf16>) outs(%f : tensor<8x14x14xbf16>) {
  ^bb0(%a: bf16, %b: bf16, %acc: bf16):
    %m = arith.mulf %a, %b : bf16
    %s = arith.addf %acc, %m : bf16
    linalg.yield %s : bf16
  } -> tensor<8x14x14xbf16>
  return %r : tensor<8x14x14xbf16>
}
