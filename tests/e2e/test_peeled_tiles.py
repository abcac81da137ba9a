"""Tile sizes that do not divide the extent (peeled tile loops), and the reduction
tiling chosen when a parallel tiling would re-read an operand, against torch.

A ViT encoder layer at 224x224 has 197 tokens, a prime: with divisor tile sizes
only, every dispatch tiled along the tokens ran 197 one-token tiles. Peeled, the
token dim tiles by any size (a loop of full tiles and a smaller last one). The
tiling dump's predictions (tiles, DMA bytes) must still equal what the simulator
measures, and the results torch's (IREE llvm-cpu's for a dispatch compiled on its own).
"""

import json
import os
import sys

import numpy as np
import pytest
import torch
from torch_reference import within_bf16_limits

import torq

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "samples"))
from models import ViTEncoderLayer  # noqa: E402

TOKENS = 197


def compile_and_run(model, x, tmp_path, hw="SL2610", flags=()):
    dump = tmp_path / "tiling.json"
    cm = torq.compile(model, x, hw=hw, flags=[f"--torq-dump-tiling={dump}", "--torq-no-cache", *flags])
    y = np.asarray(cm(x.numpy()))
    with torch.no_grad():
        ref = model(x).numpy()
    return cm, y, ref, json.loads(dump.read_text())["dispatches"]


def check_dump_matches_simulator(cm, dispatches):
    measured = {s["name"]: s for s in cm.last_stats}
    for d in dispatches:
        s = measured[d["dispatch"]]
        assert d["tiles"] == s["tiles"]
        assert d["predicted_dma_bytes_in"] == s["dma_bytes_in"]
        assert d["predicted_dma_bytes_out"] == s["dma_bytes_out"]
        assert d["lram_peak_bytes"] == s["lram_peak_bytes"] <= cm.hw.available_lram_bytes


@pytest.fixture(scope="module")
def vit_layer():
    torch.manual_seed(0)
    model = ViTEncoderLayer(192, 3, 768).eval()
    return model, torch.randn(1, TOKENS, 192, generator=torch.Generator().manual_seed(1))


def test_prime_token_count_tiles_in_peeled_loops(vit_layer, tmp_path):
    """With the `traffic` strategy (least DDR bytes, then fewest tiles): the default's
    cycle refinement may still choose one-token tiles where more tiles overlap DMA with
    compute."""
    model, x = vit_layer
    cm, y, ref, dispatches = compile_and_run(model, x, tmp_path, hw="SL2610:lram_kb=128",
                                             flags=["--torq-super-tiling-strategy=traffic"])
    assert within_bf16_limits(y, ref)
    check_dump_matches_simulator(cm, dispatches)
    token_tiles = [r["tile_sizes"][1] for d in dispatches for r in d["roots"]
                   if len(r["shape"]) == 3 and r["shape"][1] == TOKENS and r["tile_sizes"][1]]
    assert token_tiles, "no dispatch tiled along the tokens: the test lost its point"
    assert min(token_tiles) > 1, token_tiles  # divisors of 197 alone would give 1
    assert any(TOKENS % t for t in token_tiles), token_tiles  # a peeled loop
    assert max(d["tiles"] for d in dispatches) < TOKENS


class FeedForward(torch.nn.Module):
    def __init__(self, d, f):
        super().__init__()
        self.up, self.down = torch.nn.Linear(d, f), torch.nn.Linear(f, d)

    def forward(self, x):
        return x + self.down(torch.nn.functional.gelu(self.up(x)))


def test_reduction_tiled_where_parallel_tiles_reread(tmp_path):
    """The down projection (37 x 1024 by 1024 x 256) at 64 KiB: its rows and weights do
    not fit together, so any parallel tiling re-reads one of them per tile of the other
    (more than REREAD_LIMIT x the compulsory bytes); with K tiled too the accumulator
    stays in LRAM and both are read about once. Its steps are double-buffered (a step
    half the largest that fits leaves room for a second placement of the slices), so
    the next step's DMA-in overlaps this step's compute: at least 80% of the dispatch's
    roofline (57% with one placement)."""
    from torq.compiler.tiling.search import REREAD_LIMIT

    torch.manual_seed(0)
    model = FeedForward(256, 1024).eval()
    x = torch.randn(1, 37, 256, generator=torch.Generator().manual_seed(2))
    cm, y, ref, dispatches = compile_and_run(model, x, tmp_path, hw="SL2610:lram_kb=64")
    assert within_bf16_limits(y, ref)
    check_dump_matches_simulator(cm, dispatches)
    down = [d for d in dispatches if any(r["shape"][-1] == 256 and r["reduction_tile_sizes"] for r in d["roots"])]
    assert len(down) == 1, [(d["dispatch"], d["roots"]) for d in dispatches]
    moved = down[0]["predicted_dma_bytes_in"] + down[0]["predicted_dma_bytes_out"]
    assert moved <= REREAD_LIMIT * down[0]["compulsory_bytes"]
    stats = next(s for s in cm.last_stats if s["name"] == down[0]["dispatch"])
    assert stats["roofline_cycles"] >= 0.8 * stats["cycles"], stats


def test_peeled_inner_loop_of_a_2d_nest(tmp_path):
    """Whisper's stem (conv1d 80 -> 384 k3, GELU, conv1d 384 -> 384 k3 stride 2, GELU over
    3000 mel frames): the second conv tiles output channels (outer) by frames (inner), and
    the inner loop is peeled, so its last tile runs in the outer loop's body beside the
    inner loop. That body keeps nothing resident (tile_schedule.plan_body): its input
    slice, resident across the outer loop, overlapped the inner loop's weights in LRAM."""
    from models import make_audio_encoder

    model, x = make_audio_encoder(frames=3000, layers=0)
    cm, y, ref, dispatches = compile_and_run(model, x, tmp_path)
    assert within_bf16_limits(y, ref)
    check_dump_matches_simulator(cm, dispatches)
    nests = [r for d in dispatches for r in d["roots"] if sum(1 for t in r["tile_sizes"] if t) == 2]
    assert any(n % t for r in nests for n, t in zip(r["shape"], r["tile_sizes"]) if t), nests


# A LayerNorm's moments as deit_tiny's PT2E model hands them to the NPU (one dispatch):
# the row sums, the centred rows (x - sum / 192) and the sums of their squares.
LAYER_NORM_MOMENTS = f"""
#rows = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
func.func @main(%x: tensor<{TOKENS}x192xf32>) -> (tensor<{TOKENS}xf32>, tensor<{TOKENS}x192xf32>) {{
  %zero = arith.constant 0.0 : f32
  %n = arith.constant 192.0 : f32
  %e2 = tensor.empty() : tensor<{TOKENS}x192xf32>
  %e1 = tensor.empty() : tensor<{TOKENS}xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%e1 : tensor<{TOKENS}xf32>) -> tensor<{TOKENS}xf32>
  %sum = linalg.generic {{indexing_maps = [#rows, #row], iterator_types = ["parallel", "reduction"]}}
      ins(%x : tensor<{TOKENS}x192xf32>) outs(%acc : tensor<{TOKENS}xf32>) {{
  ^bb0(%in: f32, %out: f32):
    %s = arith.addf %in, %out : f32
    linalg.yield %s : f32
  }} -> tensor<{TOKENS}xf32>
  %c = linalg.generic {{indexing_maps = [#rows, #row, #rows], iterator_types = ["parallel", "parallel"]}}
      ins(%x, %sum : tensor<{TOKENS}x192xf32>, tensor<{TOKENS}xf32>) outs(%e2 : tensor<{TOKENS}x192xf32>) {{
  ^bb0(%in: f32, %s: f32, %out: f32):
    %m = arith.divf %s, %n : f32
    %d = arith.subf %in, %m : f32
    linalg.yield %d : f32
  }} -> tensor<{TOKENS}x192xf32>
  %sq = linalg.generic {{indexing_maps = [#rows, #row], iterator_types = ["parallel", "reduction"]}}
      ins(%c : tensor<{TOKENS}x192xf32>) outs(%acc : tensor<{TOKENS}xf32>) {{
  ^bb0(%in: f32, %out: f32):
    %p = arith.mulf %in, %in : f32
    %s = arith.addf %p, %out : f32
    linalg.yield %s : f32
  }} -> tensor<{TOKENS}xf32>
  return %sq, %c : tensor<{TOKENS}xf32>, tensor<{TOKENS}x192xf32>
}}
"""


def test_value_kept_in_lram_across_a_later_tile_loop():
    """deit_tiny's LayerNorm moments (main_dispatch_99), compiled as that dispatch: each
    fuse group tiles the 197 rows in a loop of 25 and a last tile of 22, the second
    group's last tile reading the row sums the first group's last tile computed before
    the second group's loop. Those sums stay in LRAM across that loop; its buffers were
    planned from offset 0 over them, and the program validator refused the dispatch
    (tile_schedule.kept_across: the loop's buffers now go above them). Reference: IREE
    llvm-cpu on the same function."""
    from iree.compiler import ir
    from llvm_cpu import llvm_cpu

    from torq.compiler.dispatch_compile import Compiled, compile_in_process
    from torq.compiler.passes import PassOptions
    from torq.compiler.pipeline import dispatch_pipeline
    from torq.contract.executable import parse_executable
    from torq.contract.hw import TorqHw
    from torq.runtime.simulator import Simulator

    hw = TorqHw()
    results = f"(tensor<{TOKENS}xf32>, tensor<{TOKENS}x192xf32>)"
    dispatch = LAYER_NORM_MOMENTS.replace(f"@main(%x: tensor<{TOKENS}x192xf32>) -> {results}",
                                          f"@main_dispatch_99(%x: tensor<{TOKENS}x192xf32>) -> {results} "
                                          "attributes {torq.dispatch}")
    assert dispatch != LAYER_NORM_MOMENTS
    with ir.Context() as ctx, ir.Location.unknown():
        ctx.allow_unregistered_dialects = True
        compiled = compile_in_process(ir.Module.parse(dispatch), dispatch_pipeline(), PassOptions(hw=hw))
    assert isinstance(compiled, Compiled), compiled
    assert compiled.tiles > 2  # tiled along the rows, or the test lost its point
    x = np.random.default_rng(3).normal(0.5, 1.0, (TOKENS, 192)).astype(np.float32)
    ys, _ = Simulator(hw).run(parse_executable(compiled.blob, hw), [x])
    for y, ref in zip(ys, llvm_cpu(LAYER_NORM_MOMENTS, x), strict=True):
        assert within_bf16_limits(y, ref)
