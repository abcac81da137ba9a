"""driver.ops_text: the text checks the driver makes on an input (QDQ marks, the torch-level
rewrites' op names) scan the MLIR text before its dialect resources, where the weights are,
and a bytecode input printed without its resources (all of it when it does not parse)."""

from torq.compiler import driver

OPS = b'module {\n  func.func @main() {\n    %0 = torch.aten.linear %x, %w, %none\n  }\n}\n'
RESOURCES = b'\n{-#\n  dialect_resources: {\n    builtin: {\n      w: "0x04000000QuantizeLinear"\n    }\n  }\n#-}\n'


def test_text_before_the_resources():
    assert driver.ops_text(OPS + RESOURCES) == OPS
    assert not driver._is_qdq(driver.ops_text(OPS + RESOURCES))  # a mark inside a weight's hex is no op


def test_text_without_resources_and_unreadable_bytecode_whole():
    assert driver.ops_text(OPS) == OPS
    bytecode = b"ML\xefR" + RESOURCES
    assert driver.ops_text(bytecode) == bytecode


LINEAR = """func.func @main(%x: !torch.vtensor<[1,8,64],f32>, %w: !torch.vtensor<[32,64],f32>) -> !torch.vtensor<[1,8,32],f32> {
  %none = torch.constant.none
  %0 = torch.aten.linear %x, %w, %none : !torch.vtensor<[1,8,64],f32>, !torch.vtensor<[32,64],f32>, !torch.none -> !torch.vtensor<[1,8,32],f32>
  return %0 : !torch.vtensor<[1,8,32],f32>
}"""


def test_bytecode_is_printed_so_that_its_marks_read_as_text():
    # A saved .mlirbc (the README's way to keep a torch export's locations for torq-compile)
    # names its ops and types in tables: torch_linear's rank-3 Linear mark is not in its bytes.
    import io

    from iree.compiler import ir

    from torq.compiler.torch_linear import may_rewrite

    with ir.Context():
        buffer = io.BytesIO()
        ir.Module.parse(LINEAR).operation.write_bytecode(buffer)
    bytecode = buffer.getvalue()
    assert bytecode.startswith(b"ML\xefR") and not may_rewrite(bytecode)
    assert may_rewrite(driver.ops_text(bytecode))
