"""Command-line behaviour: good paths and one-line errors for bad input."""

import os
import subprocess
import sys

import numpy as np
import pytest
from mlir_inputs import CONV_F32
from torch_reference import within_bf16_limits  # noqa: E402

BIN = os.path.dirname(sys.executable)


def run(tool, *args, cwd=None):
    return subprocess.run([os.path.join(BIN, tool), *args], capture_output=True, text=True, cwd=cwd)


@pytest.fixture()
def conv_mlir(tmp_path):
    p = tmp_path / "conv.mlir"
    p.write_text(CONV_F32)
    return p


def test_compile_and_run_linalg_conv(tmp_path, conv_mlir):
    out = tmp_path / "conv.vmfb"
    r = run("torq-compile", str(conv_mlir), "-o", str(out))
    assert r.returncode == 0, r.stderr
    x = np.random.default_rng(0).standard_normal((1, 4, 10, 10)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    r = run("torq-run-module", f"--module={out}", "--function=main", f"--input=@{tmp_path / 'x.npy'}",
            f"--output=@{tmp_path / 'y.npy'}")
    assert r.returncode == 0, r.stderr
    y = np.load(tmp_path / "y.npy")
    # Independent reference: direct convolution in numpy (f64).
    win = np.lib.stride_tricks.sliding_window_view(x.astype(np.float64), (3, 3), axis=(2, 3))
    ref = np.einsum("nchwij,ocij->nohw", win, np.full((8, 4, 3, 3), 0.125))
    assert within_bf16_limits(y, ref)


def test_iree_compile_with_torq_target(tmp_path, conv_mlir):
    out = tmp_path / "conv.vmfb"
    r = run("iree-compile", str(conv_mlir), "--iree-hal-target-backends=torq", "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert out.stat().st_size > 0


def test_iree_compile_without_torq_is_stock(tmp_path, conv_mlir):
    from iree.compiler.tools.binaries import find_tool

    ours, stock = tmp_path / "ours.vmfb", tmp_path / "stock.vmfb"
    args = [str(conv_mlir), "--iree-hal-target-backends=llvm-cpu", "--iree-llvmcpu-target-cpu=generic"]
    assert run("iree-compile", *args, "-o", str(ours)).returncode == 0
    assert subprocess.run([find_tool("iree-compile"), *args, "-o", str(stock)]).returncode == 0
    assert ours.read_bytes() == stock.read_bytes()


def test_hw_list():
    r = run("torq-compile", "--torq-hw=list")
    assert r.returncode == 0 and "SL2610" in r.stdout


BAD = {
    "malformed": (["{bad}"], "failed to parse"),
    "unknown_flag": (["{good}", "--torq-frobnicate=1"], "unknown flag '--torq-frobnicate'"),
    "unknown_hw": (["{good}", "--torq-hw=XYZ"], "unknown Torq hardware 'XYZ'"),
    "bad_override": (["{good}", "--torq-hw=SL2610:lram=3"], "bad --torq-hw override"),
    "missing_file": (["{missing}"], "no such file"),
    "bad_requant": (["{good}", "--torq-requant=closest"], "unknown --torq-requant 'closest' (nearest, exact, one-step)"),
    "quant_dump_without_path": (["{good}", "--torq-dump-quant"], "--torq-dump-quant needs a path"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_compile_errors_are_one_line(tmp_path, conv_mlir, case):
    bad = tmp_path / "bad.mlir"
    bad.write_text("func.func @main( {\n")
    args, needle = BAD[case]
    args = [a.format(good=conv_mlir, bad=bad, missing=tmp_path / "nope.mlir") for a in args]
    out = tmp_path / "out.vmfb"
    r = run("torq-compile", *args, "-o", str(out))
    assert r.returncode != 0
    assert "Traceback" not in r.stderr
    lines = [l for l in r.stderr.splitlines() if l.startswith("torq-compile: error:")]
    assert len(lines) == 1 and needle in lines[0], r.stderr
    assert not out.exists()
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".torq-")]


def test_torq_opt_unknown_pass(conv_mlir):
    r = run("torq-opt", str(conv_mlir), "--pass-pipeline=builtin.module(no-such-pass)")
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert r.stderr.strip().startswith("torq-opt: error:")


def test_unlowerable_epilogue_falls_back_to_host(tmp_path):
    src = os.path.join(os.path.dirname(__file__), "matmul_sin.mlir")
    out = tmp_path / "m.vmfb"
    r = run("torq-compile", src, "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert "remark: dispatch main_dispatch_0 stays on host" in r.stderr and "math.sin" in r.stderr
    rng = np.random.default_rng(3)
    a = rng.standard_normal((16, 32)).astype(np.float32) * 0.2
    b = rng.standard_normal((32, 8)).astype(np.float32) * 0.2
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", b)
    r = run("torq-run-module", f"--module={out}", f"--input=@{tmp_path / 'a.npy'}",
            f"--input=@{tmp_path / 'b.npy'}", f"--output=@{tmp_path / 'y.npy'}")
    assert r.returncode == 0, r.stderr
    ref = np.sin(a.astype(np.float64) @ b.astype(np.float64))
    # f32 on the host: sin near 0 keeps the matmul's absolute rounding (~1e-7).
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), ref, rtol=1e-5, atol=1e-6)


WIDE_MAX = """
func.func @main(%a: tensor<4x2048xf32>) -> tensor<4xf32> {
  %lowest = arith.constant 0xFF800000 : f32
  %e = tensor.empty() : tensor<4xf32>
  %acc = linalg.fill ins(%lowest : f32) outs(%e : tensor<4xf32>) -> tensor<4xf32>
  %s = linalg.reduce ins(%a : tensor<4x2048xf32>) outs(%acc : tensor<4xf32>) dimensions = [1]
    (%x: f32, %y: f32) {
      %r = arith.maximumf %x, %y : f32
      linalg.yield %r : f32
    }
  return %s : tensor<4xf32>
}
"""


def test_compile_error_inside_a_dispatch_exits_cleanly(tmp_path):
    # 1 KiB usable LRAM cannot hold one row of the max's input (2048 bf16 = 4 KiB;
    # only conv / matmul contractions and sums have their reduction split): the error is
    # raised deep in super tiling with IR objects alive in its frames. One line,
    # exit 1, no crash when those objects are collected, no output file.
    src = tmp_path / "wide.mlir"
    src.write_text(WIDE_MAX)
    out = tmp_path / "m.vmfb"
    r = run("torq-compile", str(src), "--torq-hw=SL2610:lram_kb=15", "-o", str(out))
    assert r.returncode == 1, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot fit LRAM even with size-1 tiles" in lines[0], r.stderr
    assert "wide.mlir:6:" in lines[0] and "smallest footprint 4098 bytes, budget 1024 bytes" in lines[0]
    assert not out.exists() and not list(tmp_path.glob(".torq-*"))


def test_help_lists_every_torq_flag_then_points_at_iree():
    from torq.compiler.driver import TORQ_FLAGS

    for args in (["--help"], ["-h"], ["model.mlir", "--help"]):
        r = run("torq-compile", *args)
        assert r.returncode == 0 and not r.stderr, r.stderr
        assert r.stdout.startswith("usage: torq-compile")
        assert all(flag in r.stdout for flag in TORQ_FLAGS)
        assert "iree-compile --help" in r.stdout
    r = run("iree-compile", "--iree-hal-target-backends=torq", "--help")
    assert r.returncode == 0 and r.stdout.startswith("usage: iree-compile")


def test_version_names_package_iree_and_hardware():
    from importlib import metadata

    r = run("torq-compile", "--version")
    assert r.returncode == 0, r.stderr
    assert f"iree-torq {metadata.version('iree-torq')}" in r.stdout
    assert f"iree-base-compiler {metadata.version('iree-base-compiler')}" in r.stdout
    assert "SL2610" in r.stdout


ILLEGAL_OP = """func.func @main(%arg0: !torch.vtensor<[4],f32>) -> !torch.vtensor<[4],f32> {
  %0 = torch.operator "torch.aten.not_an_op"(%arg0) : (!torch.vtensor<[4],f32>) -> !torch.vtensor<[4],f32>
  return %0 : !torch.vtensor<[4],f32>
}
"""


def test_iree_rejection_shows_iree_diagnostic_with_location(tmp_path):
    """IREE's own error (with its file:line:col) reaches the CLI's error line and the Python
    API's exception, not only the process's stderr."""
    import torq

    src = tmp_path / "bad.mlir"
    src.write_text(ILLEGAL_OP)
    r = run("torq-compile", str(src), "-o", str(tmp_path / "bad.vmfb"))
    assert r.returncode == 1 and not (tmp_path / "bad.vmfb").exists()
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("torq-compile: error:") and "bad.mlir:2:8" in last and "failed to legalize" in last
    with pytest.raises(torq.TorqCompileError) as e:
        torq.compile(str(src))
    assert "bad.mlir:2:8" in str(e.value) and "\n" not in str(e.value)
    assert any("failed to legalize operation 'torch.operator'" in d for d in e.value.diagnostics)


def test_run_module_checks_expected_output(tmp_path, conv_mlir):
    """--expected_output as iree-run-module has it, against an independent numpy reference: a
    match within the f32 threshold succeeds, a mismatch names the element and exits 1."""
    out = tmp_path / "conv.vmfb"
    assert run("torq-compile", str(conv_mlir), "-o", str(out)).returncode == 0
    x = np.random.default_rng(0).standard_normal((1, 4, 10, 10)).astype(np.float32)
    win = np.lib.stride_tricks.sliding_window_view(x.astype(np.float64), (3, 3), axis=(2, 3))
    ref = np.einsum("nchwij,ocij->nohw", win, np.full((8, 4, 3, 3), 0.125)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "ref.npy", ref)
    ref[0, 1, 2, 3] += 1.0
    np.save(tmp_path / "wrong.npy", ref)
    base = [f"--module={out}", f"--input=@{tmp_path / 'x.npy'}", "--expected_f32_threshold=0.05"]
    r = run("torq-run-module", *base, f"--expected_output=@{tmp_path / 'ref.npy'}")
    assert r.returncode == 0 and "[SUCCESS] all function outputs matched" in r.stdout, r.stdout + r.stderr
    r = run("torq-run-module", *base, f"--expected_output=@{tmp_path / 'wrong.npy'}")
    assert r.returncode == 1 and "[FAILED] result[0]: element [0, 1, 2, 3]" in r.stdout, r.stdout
    assert "1 of 512 elements differ" in r.stdout
    r = run("torq-run-module", *base, "--expected_output=(ignored)")
    assert r.returncode == 0 and "[SUCCESS]" in r.stdout
    r = run("torq-run-module", *base, "--expected_output=2x2xf32=1")
    assert r.returncode == 1 and "[FAILED] result[0]: shape 1x8x8x8, expected 2x2" in r.stdout
