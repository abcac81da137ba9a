"""A matmul of a uint8 operand (`torch._int_mm(u8, s8)`, which torchao's int8 dynamic
quantization uses on CPU) zero-extends that operand. The NPU's MACs multiply signed
integers, so the contraction stays on the host with the reason; it was taken for a signed
matmul and computed wrongly (every product of a value >= 128). Reference: numpy, exact."""

import io

import numpy as np
import torch

import torq


class UnsignedMatmul(torch.nn.Module):
    def forward(self, a, b):
        return torch._int_mm(a, b)


def test_uint8_by_int8_matmul_is_exact():
    from iree.turbine import aot

    rng = np.random.default_rng(0)
    a = rng.integers(0, 256, (32, 64), dtype=np.uint8)
    b = rng.integers(-128, 128, (64, 48), dtype=np.int8)
    text = str(aot.export(UnsignedMatmul(), torch.from_numpy(a), torch.from_numpy(b)).mlir_module)
    remarks = io.StringIO()
    cm = torq.compile(text, remarks=remarks)
    y = np.asarray(cm(a, b))
    assert np.array_equal(y, a.astype(np.int32) @ b.astype(np.int32))
    reasons = [d.reason for d in cm.report.dispatches if d.macs]
    assert reasons and all("zero-extended (unsigned)" in r for r in reasons), reasons
