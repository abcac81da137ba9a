"""dense_resource constants read in one go from a printed blob (ir_utils._resource_bytes) must
equal the values written and MLIR's element-by-element reads, for every element type the
compiler reads and for blob names that need quoting or carry IREE's `$n` suffix."""

import numpy as np
from iree.compiler import ir

from torq.compiler import ir_utils
from torq.compiler.ir_utils import constant_value

BLOBS = {
    "__auto.constant_8_3_torch.int8$1": np.arange(-12, 12, dtype=np.int8).reshape(8, 3),
    "torch_tensor_5_torch.float32": np.array([0.5, -1.25, 3e-8, np.pi, -0.0], np.float32),
    "\"w.eight:1\"": np.arange(6, dtype=np.int32).reshape(2, 3) * -70_000,
    "bias16": np.array([-32768, 7, 32767], np.int16),
}
TYPES = {np.int8: "i8", np.float32: "f32", np.int32: "i32", np.int16: "i16"}


def _module_text() -> str:
    args, blobs = [], []
    for i, (name, value) in enumerate(BLOBS.items()):
        t = f"tensor<{'x'.join(map(str, value.shape))}x{TYPES[value.dtype.type]}>"
        args.append(f"%a{i}: {t} {{torq.constant = dense_resource<{name}> : {t}}}")
        blobs.append(f'{name}: "0x04000000{value.tobytes().hex()}"')
    return (f"module {{ func.func @f({', '.join(args)}) {{ return }} }}\n"
            f"{{-# dialect_resources: {{ builtin: {{ {', '.join(blobs)} }} }} #-}}")


def _attrs(module):
    func = module.body.operations[0].operation
    return [ir.DictAttr(d)["torq.constant"] for d in ir.ArrayAttr(func.attributes["arg_attrs"])]


def test_resources_read_at_once_equal_the_values_written(monkeypatch):
    with ir.Context():
        attrs = _attrs(ir.Module.parse(_module_text()))
        for attr, want in zip(attrs, BLOBS.values()):
            # the blob's own bytes (a wrong length would fall back to the element reads)
            np.testing.assert_array_equal(np.frombuffer(ir_utils._resource_bytes(attr), want.dtype).reshape(want.shape),
                                          want)
            fast = constant_value(attr)
            with monkeypatch.context() as m:
                m.setattr(ir_utils, "_resource_bytes", lambda a: None)  # MLIR's element-by-element read
                slow = constant_value(attr)
            assert fast.dtype == slow.dtype == want.dtype
            np.testing.assert_array_equal(fast, want)
            np.testing.assert_array_equal(slow, want)
