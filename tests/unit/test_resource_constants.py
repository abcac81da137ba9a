"""dense_resource constants read all at once from the module's printed resources
(ir_utils.resource_blobs) must equal MLIR's element-by-element reads, for every element type
the compiler reads and for blob names that need quoting or carry IREE's `$n` suffix."""

import numpy as np
from iree.compiler import ir

from torq.compiler.ir_utils import constant_value, resource_blobs

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


def test_resources_read_at_once_equal_those_read_by_element():
    with ir.Context():
        module = ir.Module.parse(_module_text())
        func = module.body.operations[0].operation
        blobs = resource_blobs(func)
        attrs = [ir.DictAttr(d)["torq.constant"] for d in ir.ArrayAttr(func.attributes["arg_attrs"])]
        for attr, (name, want) in zip(attrs, BLOBS.items()):
            # the blob's bytes themselves (a wrong length would fall back to the slow read)
            np.testing.assert_array_equal(np.frombuffer(blobs[name.strip('"')], want.dtype).reshape(want.shape), want)
            fast, slow = constant_value(attr, blobs), constant_value(attr)
            assert fast.dtype == slow.dtype == want.dtype
            np.testing.assert_array_equal(fast, want)
            np.testing.assert_array_equal(slow, want)
    assert sorted(blobs) == sorted(n.strip('"') for n in BLOBS)  # every blob found, by its name


def test_a_blob_not_printed_is_read_by_element():
    with ir.Context():
        module = ir.Module.parse(_module_text())
        func = module.body.operations[0].operation
        attr = ir.DictAttr(ir.ArrayAttr(func.attributes["arg_attrs"])[1])["torq.constant"]
        np.testing.assert_array_equal(constant_value(attr, {}), BLOBS["torch_tensor_5_torch.float32"])
