"""A model quantized with torch's PT2E flow, as torch users quantize models.

torchao's `prepare_pt2e` / `convert_pt2e` with X86InductorQuantizer (uint8
activations, per-channel int8 weights, the last conv's output left in f32),
exported by iree-turbine. The uint8 activations become int8 ones before IREE
(compiler/torch_qdq.py: exact, checked against llvm-cpu on both forms); both
convs run on the NPU, the last one's f32 dequantize of its accumulator on
the host (compiler/requant_tail.py). References: llvm-cpu on the exported
MLIR as written.
"""

import io

import numpy as np
import pytest
import torch
from iree.compiler import ir
from iree.compiler.api import Session, Source
from llvm_cpu import llvm_cpu
from torch_reference import REL_L2_LIMIT

import torq
from torq.compiler.torch_qdq import rewrite_uint8_activations


class ConvBlock(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(8, 16, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(16, 8, 1)

    def forward(self, x):
        return self.conv2(torch.relu(self.conv1(x)))


@pytest.fixture(scope="module")
def pt2e_mlir():
    from iree.turbine import aot
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
    from torchao.quantization.pt2e.quantizer import x86_inductor_quantizer as xiq

    torch.manual_seed(0)
    x = torch.randn(1, 8, 24, 24)
    graph = torch.export.export(ConvBlock().eval(), (x,)).module()
    quantizer = xiq.X86InductorQuantizer().set_global(xiq.get_default_x86_inductor_quantization_config())
    prepared = prepare_pt2e(graph, quantizer)
    for _ in range(4):  # calibration
        prepared(torch.randn(1, 8, 24, 24))
    return str(aot.export(convert_pt2e(prepared), x).mlir_module), x.numpy()


def test_pt2e_uint8_rewrite_is_exact(pt2e_mlir):
    text, x = pt2e_mlir
    assert ",ui8>" in text
    session = Session()
    inv = session.invocation()
    assert inv.parse_source(Source.wrap_buffer(session, text.encode(), buffer_name="pt2e.mlir"))
    module = inv.export_module()
    with module.context, ir.Location.unknown():
        assert rewrite_uint8_activations(module) == 2  # the input's and conv1's activations
        rewritten = str(module)
    assert ",ui8>" not in rewritten
    assert np.array_equal(llvm_cpu(text, x), llvm_cpu(rewritten, x))


def test_pt2e_conv_block_on_npu(pt2e_mlir):
    text, x = pt2e_mlir
    ref = llvm_cpu(text, x)
    remarks = io.StringIO()
    cm = torq.compile(text, remarks=remarks)
    convs = [d for d in cm.report.dispatches if d.macs]
    assert len(convs) == 2 and all(d.executor == "torq" for d in convs), (cm.report.dispatches, remarks.getvalue())
    host = [d.reason for d in cm.report.dispatches if d.executor == "host"]
    assert len(host) == 1 and host[0].startswith("quantize of an f32 tensor"), host
    y = cm(x)
    # conv1's int8 result is within one step of llvm-cpu's; conv2 and its dequantize are exact
    # from there, so the float output is close, not equal.
    assert np.linalg.norm(y - ref) / np.linalg.norm(ref) < REL_L2_LIMIT
    # With only exact rescales on the NPU (conv1 where its rescale is exact, else on the host),
    # the accumulator and its host dequantize give llvm-cpu's bits.
    exact = torq.compile(text, remarks=io.StringIO(), flags=("--torq-requant=exact",))
    assert np.array_equal(exact(x), ref)
    assert [d.executor for d in exact.report.dispatches if d.macs][1] == "torq"
