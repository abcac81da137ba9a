"""driver.ops_text: the text checks the driver makes on an input (QDQ marks, the torch-level
rewrites' op names) scan the MLIR text before its dialect resources, where the weights are,
and all of a bytecode input."""

from torq.compiler import driver

OPS = b'module {\n  func.func @main() {\n    %0 = torch.aten.linear %x, %w, %none\n  }\n}\n'
RESOURCES = b'\n{-#\n  dialect_resources: {\n    builtin: {\n      w: "0x04000000QuantizeLinear"\n    }\n  }\n#-}\n'


def test_text_before_the_resources():
    assert driver.ops_text(OPS + RESOURCES) == OPS
    assert not driver._is_qdq(driver.ops_text(OPS + RESOURCES))  # a mark inside a weight's hex is no op


def test_text_without_resources_and_bytecode_whole():
    assert driver.ops_text(OPS) == OPS
    bytecode = b"ML\xefR" + RESOURCES
    assert driver.ops_text(bytecode) == bytecode
