"""Small MLIR inputs the CLI and runtime tests share."""


def conv_f32_types(cin: int, cout: int, size: int) -> tuple[str, str]:
    """The input and result types of `conv_f32_ops`."""
    return f"tensor<1x{cin}x{size}x{size}xf32>", f"tensor<1x{cout}x{size - 2}x{size - 2}xf32>"


def conv_f32_ops(cin: int, cout: int, size: int, weight: float) -> str:
    """The ops of a 3x3 conv in linalg on tensors, f32, inside a function: %x (1 x cin x size x
    size) convolved with the constant weight `weight` (cout x cin x 3 x 3) into %c; %e is an
    empty tensor of the result's type."""
    x, out = conv_f32_types(cin, cout, size)
    w = f"tensor<{cout}x{cin}x3x3xf32>"
    return f"""  %w = arith.constant dense<{weight}> : {w}
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : {out}
  %acc = linalg.fill ins(%zero : f32) outs(%e : {out}) -> {out}
  %c = linalg.conv_2d_nchw_fchw ins(%x, %w : {x}, {w})
       outs(%acc : {out}) -> {out}
"""


def conv_f32(cin: int, cout: int, size: int, weight: float) -> str:
    """@main(%x) of `conv_f32_ops`, returning the conv."""
    x, out = conv_f32_types(cin, cout, size)
    return f"\nfunc.func @main(%x: {x}) -> {out} {{\n{conv_f32_ops(cin, cout, size, weight)}  return %c : {out}\n}}\n"


# 4 -> 8 channels on 10x10.
CONV_F32 = conv_f32(4, 8, 10, 0.125)
# 8 -> 16 channels on 24x24: several tiles in a small LRAM (SL2610:lram_kb=24).
TILED_CONV_F32 = conv_f32(8, 16, 24, 0.0625)
