"""Reduction-dim tiling (torq-super-tiling, issue 3): when even one output
row / channel does not fit LRAM, the contraction's reduction dim is tiled too,
the accumulator stays in LRAM across the steps and the group's epilogue runs
once after the last step.

References are independent: torch fp32 for bf16 (DESIGN §7: rel L2 <= 1e-2,
cosine >= 0.9999), IREE llvm-cpu on the same TOSA module for int8 (bit-exact).
Every case checks that the tiling dump records a tiled reduction dim and that
the LRAM peak the simulator measures stays within the budget.
"""

import json
import os
import sys

import numpy as np
import torch

import torq

sys.path.insert(0, os.path.dirname(__file__))
from test_int8_tosa import TOSA, llvm_cpu_reference, random_int8  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "samples"))
from cnn import error_figures, within_limits  # noqa: E402


def compile_and_run(model, x, hw, tmp_path, flags=()):
    dump = tmp_path / "tiling.json"
    cm = torq.compile(model, *x, hw=hw, flags=[f"--torq-dump-tiling={dump}", *flags])
    y = cm(*[np.asarray(v) for v in x])
    return cm, y, json.loads(dump.read_text())


def reduction_root(dump: dict) -> dict:
    roots = [r for d in dump["dispatches"] for r in d["roots"] if r.get("reduction_dims")]
    assert len(roots) == 1, dump
    return roots[0]


def check_fit(cm, hw: str) -> None:
    budget = torq.parse_hw_spec(hw).available_lram_bytes
    stats = [s for s in cm.last_stats if s["executor"] == "torq"]
    assert stats and all(s["lram_peak_bytes"] <= budget for s in stats), (budget, stats)


def run_against_torch(model, x, hw: str, tmp_path):
    """Compiles and runs `model` on `x`, checks it against torch fp32 (bf16 bounds);
    returns the compiled module and the tiling dump."""
    with torch.no_grad():
        ref = model(x).numpy()
    cm, y, dump = compile_and_run(model, [x], hw, tmp_path)
    rel_l2, cosine = error_figures(y, ref)
    assert within_limits(rel_l2, cosine), (rel_l2, cosine)
    return cm, dump


def test_linear_4096_to_64_splits_k(tmp_path):
    # One output column reads 4096 x 2 B of weights and the 4 x 4096 input is
    # 32 KiB: nothing fits the 16 KiB budget without splitting K.
    hw = "SL2610:lram_kb=16,reserved_kb=0"
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4096, 64), torch.nn.ReLU()).eval()
    cm, dump = run_against_torch(model, torch.randn(4, 4096), hw, tmp_path)
    root = reduction_root(dump)
    assert root["reduction_extents"] == [4096] and 1 <= root["reduction_tile_sizes"][0] < 4096
    assert root["reduction_steps"] == 4096 // root["reduction_tile_sizes"][0]
    check_fit(cm, hw)
    # The steps' MACs add up to the untiled layer's.
    assert sum(s["macs"] for s in cm.last_stats) == 4 * 64 * 4096


def test_conv_splits_input_channels(tmp_path):
    # 64 input channels x 3 x 3 x 2 B = 1152 B of weights per output channel,
    # over the 1 KiB budget: the input channels are split.
    hw = "SL2610:lram_kb=1,reserved_kb=0"
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Conv2d(64, 8, 3, padding=1), torch.nn.ReLU()).eval()
    cm, dump = run_against_torch(model, torch.randn(1, 64, 6, 6), hw, tmp_path)
    root = reduction_root(dump)
    assert root["reduction_extents"][0] == 64 and root["reduction_tile_sizes"][0] < 64  # input channels first
    check_fit(cm, hw)
    assert sum(s["macs"] for s in cm.last_stats) == 8 * 6 * 6 * 64 * 9


def int8_matmul(m: int, k: int, n: int) -> str:
    """TOSA int8 matmul (zero points 0) + rescale to int8, both operands inputs."""
    return f'''func.func @main(%x: tensor<1x{m}x{k}xi8>, %w: tensor<1x{k}x{n}xi8>) -> tensor<1x{m}x{n}xi8> {{
  %zp = "tosa.const"() <{{values = dense<0> : tensor<1xi8>}}> : () -> tensor<1xi8>
  %mm = "tosa.matmul"(%x, %w, %zp, %zp) : (tensor<1x{m}x{k}xi8>, tensor<1x{k}x{n}xi8>, tensor<1xi8>, tensor<1xi8>) -> tensor<1x{m}x{n}xi32>
  %mult = "tosa.const"() <{{values = dense<1500000000> : tensor<1xi32>}}> : () -> tensor<1xi32>
  %shift = "tosa.const"() <{{values = dense<42> : tensor<1xi8>}}> : () -> tensor<1xi8>
  %izp = "tosa.const"() <{{values = dense<0> : tensor<1xi32>}}> : () -> tensor<1xi32>
  %ozp = "tosa.const"() <{{values = dense<-2> : tensor<1xi8>}}> : () -> tensor<1xi8>
  %r = "tosa.rescale"(%mm, %mult, %shift, %izp, %ozp) <{{input_unsigned = false, output_unsigned = false, per_channel = false, rounding_mode = #tosa.rounding_mode<SINGLE_ROUND>, scale32 = true}}> : (tensor<1x{m}x{n}xi32>, tensor<1xi32>, tensor<1xi8>, tensor<1xi32>, tensor<1xi8>) -> tensor<1x{m}x{n}xi8>
  return %r : tensor<1x{m}x{n}xi8>
}}'''


def test_int8_matmul_bit_exact(tmp_path):
    # One output column reads 2048 B of weights: the 2 KiB budget forces K tiling;
    # the i32 accumulator stays in LRAM and the requantization runs once at the end.
    hw, (m, k, n) = "SL2610:lram_kb=2,reserved_kb=0", (16, 2048, 16)
    mlir = int8_matmul(m, k, n)
    a, b = random_int8((1, m, k), seed=21), random_int8((1, k, n), seed=22)
    ref = llvm_cpu_reference(mlir, a, b)
    dump_path = tmp_path / "tiling.json"
    cm = torq.compile(mlir, hw=hw, flags=TOSA + [f"--torq-dump-tiling={dump_path}"])
    assert [d.executor for d in cm.report.dispatches] == ["torq"]
    y = cm(a, b)
    assert y.dtype == np.int8 and y.shape == ref.shape
    assert int((y != ref).sum()) == 0, f"{int((y != ref).sum())} of {y.size} int8 outputs differ from llvm-cpu"
    assert len(np.unique(ref)) > 64  # the requantization is not trivial
    root = reduction_root(json.loads(dump_path.read_text()))
    assert root["reduction_extents"] == [k] and root["reduction_tile_sizes"][0] < k
    check_fit(cm, hw)
    assert sum(s["macs"] for s in cm.last_stats) == m * k * n


WIDE_CONV = """
#in = affine_map<(o, y, x, c, i, j) -> (c, y + i, x + j)>
#w = affine_map<(o, y, x, c, i, j) -> (o, c, i, j)>
#out = affine_map<(o, y, x, c, i, j) -> (o, y, x)>
func.func @wide_conv(%in: tensor<64x5x5xbf16>, %w: tensor<2x64x3x3xbf16>) -> tensor<2x3x3xbf16> {
  %zero = arith.constant 0.0 : bf16
  %e = tensor.empty() : tensor<2x3x3xbf16>
  %acc = linalg.fill {"torq-fuse-group" = [0]} ins(%zero : bf16) outs(%e : tensor<2x3x3xbf16>) -> tensor<2x3x3xbf16>
  %c = linalg.generic {indexing_maps = [#in, #w, #out], iterator_types = ["parallel", "parallel", "parallel", "reduction", "reduction", "reduction"]} ins(%in, %w : tensor<64x5x5xbf16>, tensor<2x64x3x3xbf16>) outs(%acc : tensor<2x3x3xbf16>) attrs = {"torq-fuse-group" = [0], "torq-fuse-group-id" = 0 : i64, torq.tile_root, torq.tile_reduction} {
  ^bb0(%x: bf16, %y: bf16, %o: bf16):
    %m = arith.mulf %x, %y : bf16
    %s = arith.addf %o, %m : bf16
    linalg.yield %s : bf16
  } -> tensor<2x3x3xbf16>
  return %c : tensor<2x3x3xbf16>
}"""


def test_nested_reduction_loops_channels_and_kernel_rows():
    """Input channels and kernel rows both tiled (two nested reduction loops sharing
    one accumulator), with and without a parallel tile loop around them, run by the
    simulator against a float64 convolution of the same bf16 inputs."""
    import ml_dtypes
    from iree.compiler import ir

    from torq.compiler.ir_utils import walk_ops
    from torq.compiler.passes import PassOptions
    from torq.compiler.passes.assign_lram_addresses import assign_function
    from torq.compiler.passes.build_nss_program import build_program
    from torq.compiler.tiling import cost as tiling_cost
    from torq.runtime.simulator import Simulator

    options = PassOptions(hw=torq.parse_hw_spec("SL2610:lram_kb=1,reserved_kb=0"))
    rng = np.random.default_rng(5)
    x = rng.standard_normal((64, 5, 5)).astype(ml_dtypes.bfloat16)
    w = rng.standard_normal((2, 64, 3, 3)).astype(ml_dtypes.bfloat16)
    xf, wf = x.astype(np.float64), w.astype(np.float64)
    ref = np.array([[[(xf[:, r:r + 3, c:c + 3] * wf[o]).sum() for c in range(3)] for r in range(3)]
                    for o in range(2)])
    ctx = ir.Context()
    ctx.allow_unregistered_dialects = True
    with ctx, ir.Location.unknown():
        module = ir.Module.parse(WIDE_CONV)
        # (parallel loop sizes, reduction loop sizes) over the loops (o, y, x, c, i, j)
        for parallel, reduction in (([0] * 6, [0, 0, 0, 1, 1, 0]), ([1, 1, 0, 0, 0, 0], [0, 0, 0, 2, 1, 0])):
            scratch, func = tiling_cost.lowered_tiling(module, parallel if any(parallel) else None, None,
                                                        reduction)
            loops = sum(1 for op in walk_ops(func) if op.name == "scf.for")
            assert loops == 2 + sum(1 for t in parallel if t)
            assign_function(func, options)
            program, _ = build_program(func, options)
            (y,), stats = Simulator(options.hw).run(program, [x, w])
            rel_l2, cosine = error_figures(np.asarray(y, np.float64), ref)
            assert within_limits(rel_l2, cosine), (parallel, reduction, rel_l2, cosine)
            assert stats.macs == 2 * 3 * 3 * 64 * 9
            assert stats.lram_peak_bytes <= options.hw.available_lram_bytes
            del func, scratch
