"""The three input kinds through the command-line tools.

torch-dialect MLIR (an iree-turbine export saved to a file), TOSA with
`--iree-input-type=tosa` (NHWC as TOSA gives it), and linalg through
`iree-compile --iree-hal-target-backends=torq`. Each runs on the Torq
simulator via `torq-run-module` and is compared with an independent
reference: torch fp32, or the same MLIR on IREE llvm-cpu.
"""

import os
import subprocess
import sys

import numpy as np
import pytest
from tosa_int8 import dense, ttype

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "samples"))
from cnn import error_figures, within_limits  # noqa: E402

BIN = os.path.dirname(sys.executable)


def run(tool, *args):
    r = subprocess.run([os.path.join(BIN, tool), *args], capture_output=True, text=True)
    assert r.returncode == 0, f"{tool} failed:\n{r.stderr}"
    return r


def run_on_torq(vmfb, x, tmp_path):
    np.save(tmp_path / "x.npy", x)
    r = run("torq-run-module", f"--module={vmfb}", "--function=main", f"--input=@{tmp_path / 'x.npy'}",
            f"--output=@{tmp_path / 'y.npy'}", "--print-stats")
    # --print-stats lists one table row per dispatch the NPU ran.
    torq_rows = [ln for ln in r.stdout.splitlines() if "│ torq " in ln]
    return np.load(tmp_path / "y.npy"), len(torq_rows)


def test_torch_dialect_mlir_file(tmp_path):
    import iree.turbine.aot as aot
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
        torch.nn.Conv2d(8, 8, 3, stride=2, padding=1), torch.nn.ReLU(),
        torch.nn.Flatten(), torch.nn.Linear(8 * 8 * 8, 10)).eval()
    x = torch.randn(1, 3, 16, 16)
    src = tmp_path / "model.mlir"
    src.write_text(str(aot.export(model, args=(x,)).mlir_module))
    assert "torch.aten" in src.read_text()  # really torch-dialect input
    vmfb = tmp_path / "model.vmfb"
    run("torq-compile", str(src), "-o", str(vmfb))
    y, on_torq = run_on_torq(vmfb, x.numpy(), tmp_path)
    assert on_torq >= 3  # both convs and the linear layer
    with torch.no_grad():
        ref = model(x).numpy()
    rel_l2, cosine = error_figures(y, ref)
    assert within_limits(rel_l2, cosine), (rel_l2, cosine)


def tosa_f32_model(rng) -> str:
    """NHWC conv 3x3 + bias + clamp(0, 6), then a 1x1 conv: f32 TOSA."""
    w1 = rng.standard_normal((16, 3, 3, 8)).astype(np.float32) * 0.2
    b1 = rng.standard_normal(16).astype(np.float32) * 0.1
    w2 = rng.standard_normal((4, 1, 1, 16)).astype(np.float32) * 0.3
    b2 = np.zeros(4, np.float32)
    zp = 'dense<0.0> : tensor<1xf32>'
    x_t, h_t, y_t = ttype((1, 12, 12, 8), "f32"), ttype((1, 12, 12, 16), "f32"), ttype((1, 12, 12, 4), "f32")
    return f"""
func.func @main(%x: {x_t}) -> {y_t} {{
  %w1 = "tosa.const"() <{{values = {dense(w1, 'f32')}}}> : () -> {ttype(w1.shape, 'f32')}
  %b1 = "tosa.const"() <{{values = {dense(b1, 'f32')}}}> : () -> tensor<16xf32>
  %w2 = "tosa.const"() <{{values = {dense(w2, 'f32')}}}> : () -> {ttype(w2.shape, 'f32')}
  %b2 = "tosa.const"() <{{values = {dense(b2, 'f32')}}}> : () -> tensor<4xf32>
  %zp = "tosa.const"() <{{values = {zp}}}> : () -> tensor<1xf32>
  %c1 = "tosa.conv2d"(%x, %w1, %b1, %zp, %zp) <{{acc_type = f32, dilation = array<i64: 1, 1>,
        pad = array<i64: 1, 1, 1, 1>, stride = array<i64: 1, 1>}}>
        : ({x_t}, {ttype(w1.shape, 'f32')}, tensor<16xf32>, tensor<1xf32>, tensor<1xf32>) -> {h_t}
  %r1 = "tosa.clamp"(%c1) <{{max_val = 6.0 : f32, min_val = 0.0 : f32}}> : ({h_t}) -> {h_t}
  %c2 = "tosa.conv2d"(%r1, %w2, %b2, %zp, %zp) <{{acc_type = f32, dilation = array<i64: 1, 1>,
        pad = array<i64: 0, 0, 0, 0>, stride = array<i64: 1, 1>}}>
        : ({h_t}, {ttype(w2.shape, 'f32')}, tensor<4xf32>, tensor<1xf32>, tensor<1xf32>) -> {y_t}
  return %c2 : {y_t}
}}
"""


@pytest.mark.parametrize("tool", ["torq-compile", "iree-compile"])
def test_tosa_f32_nhwc(tmp_path, tool):
    rng = np.random.default_rng(1)
    src = tmp_path / "model.mlir"
    src.write_text(tosa_f32_model(rng))
    x = rng.standard_normal((1, 12, 12, 8)).astype(np.float32)
    ref_vmfb = tmp_path / "ref.vmfb"
    run("iree-compile", str(src), "--iree-input-type=tosa", "--iree-hal-target-backends=llvm-cpu",
        "--iree-llvmcpu-target-cpu=host", "-o", str(ref_vmfb))
    np.save(tmp_path / "x.npy", x)
    run("iree-run-module", f"--module={ref_vmfb}", "--device=local-task", "--function=main",
        f"--input=@{tmp_path / 'x.npy'}", f"--output=@{tmp_path / 'ref.npy'}")
    ref = np.load(tmp_path / "ref.npy")
    vmfb = tmp_path / "model.vmfb"
    extra = ["--iree-hal-target-backends=torq"] if tool == "iree-compile" else []
    run(tool, str(src), "--iree-input-type=tosa", *extra, "-o", str(vmfb))
    y, on_torq = run_on_torq(vmfb, x, tmp_path)
    assert on_torq >= 2  # both NHWC convs
    rel_l2, cosine = error_figures(y, ref)
    assert within_limits(rel_l2, cosine), (rel_l2, cosine)
