"""The weights an NPU call reads are exported once, when the module loads
(compiler/load_time_views.py), not copied out of the constant pool at every call.

Checked in IREE's stream IR (`--compile-to=executable-sources`): the copies of
the constant pool are in an initializer, the function copies nothing; each
distinct constant has one load-time buffer view, also when two calls read it;
and the module still computes the model (against numpy, the bf16 bounds).
"""

import io
import os
import re
import subprocess
import sys

import numpy as np
from torch_reference import within_bf16_limits

import torq

BIN = os.path.dirname(sys.executable)
MODEL = """
func.func @main(%x: tensor<8x64xf32>) -> tensor<8x64xf32> {
  %w = arith.constant dense<%W%> : tensor<64x64xf32>
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<8x64xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%e : tensor<8x64xf32>) -> tensor<8x64xf32>
  %y = linalg.matmul ins(%x, %w : tensor<8x64xf32>, tensor<64x64xf32>) outs(%acc : tensor<8x64xf32>) -> tensor<8x64xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>],
       iterator_types = ["parallel", "parallel"]} ins(%y : tensor<8x64xf32>) outs(%e : tensor<8x64xf32>) {
  ^bb0(%in: f32, %o: f32):
    %s = math.tanh %in : f32
    linalg.yield %s : f32
  } -> tensor<8x64xf32>
  %z = linalg.matmul ins(%r, %w : tensor<8x64xf32>, tensor<64x64xf32>) outs(%acc : tensor<8x64xf32>) -> tensor<8x64xf32>
  return %z : tensor<8x64xf32>
}
"""
WEIGHTS = np.random.default_rng(0).normal(0, 0.125, (64, 64)).astype(np.float32)


def _model() -> str:
    rows = ", ".join("[" + ", ".join(f"{v:.6e}" for v in row) + "]" for row in WEIGHTS)
    return MODEL.replace("%W%", f"[{rows}]")


def _function(ir_text: str, name: str) -> str:
    start = ir_text.index(f"util.func public @{name}")
    end = ir_text.find("util.func", start + 1)
    return ir_text[start:end if end > 0 else len(ir_text)]


def test_weights_exported_once_at_load(tmp_path):
    src = tmp_path / "m.mlir"
    src.write_text(_model())
    out = subprocess.run([os.path.join(BIN, "torq-compile"), str(src), "--compile-to=executable-sources",
                          "--torq-cache-dir=none", "-o", "-"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    main = _function(out.stdout, "main(")
    assert main.count("torq.run_") == 2  # both matmuls on the NPU
    assert "resource<constant>" not in main  # the weights come from their load-time views
    assert len(set(re.findall(r"@__torq_load_time_view_\d+", out.stdout))) == 1  # one constant, one view
    initializers = out.stdout.split("util.initializer")[1:]
    assert any("stream.cmd.copy" in init and "resource<constant>" in init for init in initializers)


def test_module_computes_with_load_time_views():
    cm = torq.compile(_model(), remarks=io.StringIO())
    x = np.random.default_rng(1).normal(0, 1, (8, 64)).astype(np.float32)
    for _ in range(2):  # the views serve every call
        assert within_bf16_limits(cm(x), np.tanh(x @ WEIGHTS) @ WEIGHTS)


def test_external_parameters_exported_once_at_load(tmp_path):
    """Weights in a parameter archive (an LLM as IREE deploys it: `flow.tensor.constant`s of
    named parameters, the embedding table and the norms read by the calls as they are, the
    projections through initializers IREE hoists): prefill and decode copy no constant at run
    time (before, each decode call copied the embedding table out of the constant pool)."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "samples"))
    from llm import LlamaConfig, export_llm, make_llama

    model = make_llama(LlamaConfig(layers=1, vocab=256, hidden=64, heads=4, kv_heads=2, ffn=128, max_len=16))
    src = tmp_path / "llm.mlir"
    src.write_text(str(export_llm(model, 8, str(tmp_path / "weights.irpa")).mlir_module))
    out = subprocess.run([os.path.join(BIN, "torq-compile"), str(src), "--compile-to=executable-sources",
                          "--torq-cache-dir=none", "-o", "-"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    for name in ("prefill$async(", "decode$async("):
        function = _function(out.stdout, name)
        assert function.count("torq.run_") > 5 and "resource<constant>" not in function, name
