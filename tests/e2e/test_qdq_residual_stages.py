"""Requantizations whose integer form needs stages after the contraction's first int8 level,
quantized by onnxruntime:
- a residual read in more than one step, where `split_residual_add` takes one add: RepVGG's
  depthwise block, conv3x3(x) + conv1x1(x) + x (timm RepViT: the residual is scaled per
  channel, added, and added again), and TinyViT's MBConv end, GELU(conv(x) + x). These become
  integer stages of the conv's int8 value and the residual (requant._LaterStages.with_residual,
  requant_stages.StageSplitter). Before, the conv stayed f32 on the host ("value ... of the
  chain is neither a constant nor per channel").
- CoaT's scale * (q @ kv) + x: the matmul's int8 value requantized again (a table) before the
  one residual add (requant._LaterStages.of).
Every MAC must be on the NPU, within one output step of IREE llvm-cpu."""

import io
import os
import sys

import numpy as np
import pytest
from torch import nn

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime.quantization")
sys.path.insert(0, os.path.dirname(__file__))
from llvm_cpu import llvm_cpu  # noqa: E402
from test_ort_quantized import assert_within_one_step, ort_quantized_model, random_batchnorm  # noqa: E402

import torq  # noqa: E402
from torq.compiler.onnx_import import import_onnx  # noqa: E402


class RepVggDepthwise(nn.Module):
    """A 1x1 conv, then RepVGG's depthwise block as timm's RepViT has it: conv3x3(x) +
    conv1x1(x) + x, both depthwise (IREE makes the 1x1 one a per-channel scale and shift)."""

    def __init__(self, c=16):
        super().__init__()
        self.stem = nn.Conv2d(c, c, 1)
        self.conv = nn.Sequential(nn.Conv2d(c, c, 3, padding=1, groups=c, bias=False), random_batchnorm(c))
        self.conv1 = nn.Conv2d(c, c, 1, groups=c)

    def forward(self, x):
        x = self.stem(x)
        return self.conv(x) + self.conv1(x) + x


class MBConvEnd(nn.Module):
    """A 1x1 conv, then TinyViT's MBConv end: GELU(conv1x1(x) + x)."""

    def __init__(self, c=16):
        super().__init__()
        self.stem = nn.Conv2d(c, c, 1)
        self.conv = nn.Sequential(nn.Conv2d(c, c, 1, bias=False), random_batchnorm(c))

    def forward(self, x):
        x = self.stem(x)
        return nn.functional.gelu(self.conv(x) + x)


@pytest.mark.parametrize("model_class", [RepVggDepthwise, MBConvEnd], ids=["repvgg-dw", "mbconv-gelu"])
def test_residual_read_in_several_steps_runs_on_the_npu(tmp_path, model_class):
    path, x = ort_quantized_model(tmp_path, model_class, shape=(1, 16, 10, 10))
    cm = torq.compile(str(path), remarks=io.StringIO(), flags=("--torq-no-cache",))
    with_macs = [d for d in cm.report.dispatches if d.macs]
    assert all(d.executor == "torq" for d in with_macs), [(d.name, d.reason) for d in with_macs]
    # The stages after the conv's rescale read the residual: a pair stage among them.
    rests = [s["rest"] for d in with_macs for s in d.requant if s.get("rest")]
    assert any(r["sum_pairs"] for r in rests), [s for d in with_macs for s in d.requant]
    ref = llvm_cpu(import_onnx(path.read_bytes(), "m_q.onnx"), x, function="main_graph")
    assert_within_one_step(np.asarray(cm(x)), ref)


class FactorAttentionEnd(nn.Module):
    """CoaT's factorized attention end, scale * (q @ kv) + x: the product's int8 value is
    requantized again after its scalar scale, then added to the residual."""

    def __init__(self, d=16):
        super().__init__()
        self.q, self.kv = nn.Linear(d, d), nn.Linear(d, d)
        self.scale = d ** -0.5

    def forward(self, x):
        kv = self.kv(x).transpose(-1, -2) @ x
        return self.scale * (self.q(x) @ kv) + x


def test_int8_value_requantized_again_before_the_residual_add_runs_on_the_npu(tmp_path):
    """The scaled product becomes integer stages of the matmul's int8 level (calibration makes
    this one an identity, as in CoaT), then the pair add. Before, the matmul stayed on host
    ("requantized twice without per-channel values")."""
    path, x = ort_quantized_model(tmp_path, FactorAttentionEnd, shape=(1, 49, 16))
    cm = torq.compile(str(path), remarks=io.StringIO(), flags=("--torq-no-cache",))
    with_macs = [d for d in cm.report.dispatches if d.macs]
    assert all(d.executor == "torq" for d in with_macs), [(d.name, d.reason) for d in with_macs]
    (block,) = [s for d in with_macs for s in d.requant if s.get("rest")]
    assert block["sum_pairs"] == 256 * 256, block
    ref = llvm_cpu(import_onnx(path.read_bytes(), "m_q.onnx"), x, function="main_graph")
    assert_within_one_step(np.asarray(cm(x)), ref)


class RepVggBatchNorm(RepVggDepthwise):
    """conv3x3(x) + BN(x) + x: the BN's dequantized x is a product the next add and the final
    add both read, and llvm-cpu may fuse it into either, which the per-channel fit refuses."""

    def __init__(self, c=16):
        super().__init__(c)
        self.conv1 = random_batchnorm(c)


def test_residual_stages_refused_leave_the_conv_on_host_with_its_reason(tmp_path):
    """When the stages cannot be formed either, the dispatch stays on host with the first
    refusal's reason and the model is computed as llvm-cpu does. (Keeping that refusal's
    traceback past the function's erasure once crashed the garbage collector; that crash
    depends on when the collector runs, so this test may not catch its return.)"""
    path, x = ort_quantized_model(tmp_path, RepVggBatchNorm, shape=(1, 16, 10, 10))
    cm = torq.compile(str(path), remarks=io.StringIO(), flags=("--torq-no-cache", "--torq-jobs=1"))
    host = [d for d in cm.report.dispatches if d.macs and d.executor != "torq"]
    assert len(host) == 1 and "neither a constant nor per channel" in host[0].reason, \
        [(d.name, d.reason) for d in cm.report.dispatches]
    ref = llvm_cpu(import_onnx(path.read_bytes(), "m_q.onnx"), x, function="main_graph")
    assert_within_one_step(np.asarray(cm(x)), ref)
