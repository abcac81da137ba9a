"""A MobileViT block quantized by onnxruntime: the residual of the first transformer layer
is the int8 patch unfold, whose dequantize IREE fuses with the unfold's last transpose into
an f32 dispatch of its own. The output projection's dispatch read that f32 tensor and stayed
on the host ("operand 0 of the requantization is an f32 tensor"). Now it reads the unfold
as an int8 tensor (a copy dispatch on the NPU) and dequantizes it itself
(compiler/dequantize_dispatches.py): its requantization adds an int8 residual. Within one
output step of IREE llvm-cpu."""

import io
import os
import sys

import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime.quantization")
sys.path.insert(0, os.path.dirname(__file__))
from llvm_cpu import llvm_cpu  # noqa: E402
from test_mobile_vit import MobileVitBlock  # noqa: E402
from test_ort_quantized import assert_within_one_step, ort_quantized_model  # noqa: E402

import torq  # noqa: E402
from torq.compiler.onnx_import import import_onnx  # noqa: E402


def test_unfolded_residual_is_read_as_int8(tmp_path):
    path, x = ort_quantized_model(tmp_path, MobileVitBlock, shape=(1, 16, 8, 8))
    cm = torq.compile(str(path), remarks=io.StringIO(), flags=("--torq-no-cache",))
    host = [d for d in cm.report.dispatches if d.executor != "torq"]
    assert not [d.reason for d in host if "requantization is an f32 tensor" in d.reason], [(d.name, d.reason) for d in host]
    # What stays on host is the float compute of the layer norms and the softmax (f32 by
    # design), and the input's quantize.
    assert cm.report.npu_mac_share > 0.99, [(d.name, d.macs, d.reason) for d in host]
    ref = llvm_cpu(import_onnx(path.read_bytes(), "m_q.onnx"), x, function="main_graph")
    assert_within_one_step(np.asarray(cm(x)), ref)
