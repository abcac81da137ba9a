"""`torq.compiler.compile_str` / `compile_file`: IREE's Python compiler API with the Torq target.

The compiled modules run on the Torq simulator and are compared with
independent references: the same MLIR through `iree.compiler` on llvm-cpu,
or eager torch fp32. Errors must be IREE's `CompilerToolError` (a script that
switched its import line keeps its `except`), carrying IREE's diagnostics.
"""

import inspect
import os
import subprocess
import sys

import iree.compiler as ireec
import numpy as np
import pytest
from llvm_cpu import llvm_cpu

import torq
import torq.compiler as torqc

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "samples"))
from cnn import error_figures, within_limits  # noqa: E402

MATMUL_RELU = """
func.func @main(%a: tensor<16x32xf32>, %b: tensor<32x24xf32>) -> tensor<16x24xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<16x24xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%e : tensor<16x24xf32>) -> tensor<16x24xf32>
  %m = linalg.matmul ins(%a, %b : tensor<16x32xf32>, tensor<32x24xf32>) outs(%acc : tensor<16x24xf32>)
    -> tensor<16x24xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>],
                       iterator_types = ["parallel", "parallel"]}
      ins(%m : tensor<16x24xf32>) outs(%e : tensor<16x24xf32>) {
  ^bb0(%x: f32, %o: f32):
    %y = arith.maximumf %x, %zero : f32
    linalg.yield %y : f32
  } -> tensor<16x24xf32>
  return %r : tensor<16x24xf32>
}
"""

# %q is never defined: IREE's parser rejects line 2, column 23.
BAD_MLIR = """func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {
  %b = arith.addf %a, %q : tensor<4xf32>
  return %b : tensor<4xf32>
}
"""


def _inputs():
    rng = np.random.default_rng(0)
    return rng.standard_normal((16, 32), dtype=np.float32), rng.standard_normal((32, 24), dtype=np.float32)


def test_compile_str_runs_on_torq_like_llvm_cpu():
    a, b = _inputs()
    vmfb = torqc.compile_str(MATMUL_RELU, target_backends=["torq"], input_type="auto")
    assert isinstance(vmfb, bytes)
    m = torq.load(vmfb)
    got = m.main(a, b)
    assert [s["executor"] for s in m.last_stats] == ["torq"]  # the matmul + ReLU ran on the NPU
    rel_l2, cosine = error_figures(got, llvm_cpu(MATMUL_RELU, a, b))
    assert within_limits(rel_l2, cosine), (rel_l2, cosine)


def test_compile_file_output_file_and_torq_flags(tmp_path):
    src = tmp_path / "m.mlir"
    src.write_text(MATMUL_RELU)
    out = tmp_path / "m.vmfb"
    # Torq flags ride in extra_args beside IREE's; output_file= writes and returns None, as IREE does.
    assert torqc.compile_file(str(src), target_backends=["torq"], output_file=str(out),
                              extra_args=["--torq-hw=SL2610:lram_kb=64", "--iree-opt-level=O2"]) is None
    a, b = _inputs()
    got = torq.load(str(out)).main(a, b)
    rel_l2, cosine = error_figures(got, llvm_cpu(MATMUL_RELU, a, b))
    assert within_limits(rel_l2, cosine), (rel_l2, cosine)


def test_turbine_export_compiles_with_one_call(tmp_path):
    """An iree-turbine export (torch-dialect MLIR) through both APIs, against eager torch."""
    import iree.turbine.aot as aot
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 16), torch.nn.ReLU()).eval()
    x = torch.randn(8, 32)
    exported = aot.export(model, args=(x,))
    with torch.no_grad():
        ref = model(x).numpy()
    vmfb = torqc.compile_str(str(exported.mlir_module), target_backends=["torq"], input_type="torch")
    for got in (torq.load(vmfb).main(x), torq.compile(exported)(x)):
        rel_l2, cosine = error_figures(got, ref)
        assert within_limits(rel_l2, cosine), (rel_l2, cosine)


def test_other_backends_go_to_iree_unchanged():
    a, b = _inputs()
    ours = torqc.compile_str(MATMUL_RELU, target_backends=["llvm-cpu"], extra_args=["--iree-llvmcpu-target-cpu=host"])
    iree = ireec.compile_str(MATMUL_RELU, target_backends=["llvm-cpu"], extra_args=["--iree-llvmcpu-target-cpu=host"])
    assert ours == iree


def test_same_signatures_as_iree():
    for name in ("compile_str", "compile_file"):
        ours, theirs = inspect.signature(getattr(torqc, name)), inspect.signature(getattr(ireec, name))
        assert [(p.name, p.kind) for p in ours.parameters.values()] == \
            [(p.name, p.kind) for p in theirs.parameters.values()]
    assert torqc.CompilerToolError is ireec.CompilerToolError
    assert torqc.InputType is ireec.InputType and torqc.OutputFormat is ireec.OutputFormat


def test_iree_rejecting_the_input_raises_its_diagnostics():
    with pytest.raises(ireec.CompilerToolError) as info:
        torqc.compile_str(BAD_MLIR, target_backends=["torq"])
    e = info.value
    assert isinstance(e, torqc.TorqCompilerToolError)
    assert "failed to parse the input" in e.message
    assert any("<string>:2:23" in d and "undeclared SSA value" in d for d in e.diagnostics), e.diagnostics
    assert "<string>:2:23" in str(e)


def test_bad_arguments_are_named():
    with pytest.raises(ireec.CompilerToolError, match="unknown flag '--torq-bogus'"):
        torqc.compile_str(MATMUL_RELU, target_backends=["torq"], extra_args=["--torq-bogus"])
    with pytest.raises(ireec.CompilerToolError, match="option not found: iree-bogus"):
        torqc.compile_str(MATMUL_RELU, target_backends=["torq"], extra_args=["--iree-bogus"])
    with pytest.raises(ireec.CompilerToolError, match="cannot read input file 'missing.mlir'"):
        torqc.compile_file("missing.mlir", target_backends=["torq"])
    with pytest.raises(TypeError):  # not a CompilerOptions field, as in iree.compiler
        torqc.compile_str(MATMUL_RELU, target_backends=["torq"], targets=["torq"])
    with pytest.raises(ValueError, match="input_type"):
        torqc.compile_str(MATMUL_RELU, target_backends=["torq"], input_type="caffe")
    with pytest.raises(ValueError, match=r"target_backends=\['torq'\] alone"):
        torqc.compile_str(MATMUL_RELU, target_backends=["torq", "llvm-cpu"])


def test_importing_torq_compiler_stays_cheap():
    code = ("import sys, torq.compiler; "
            "print(any(m in sys.modules for m in ('iree.compiler', 'torq.compiler.driver', 'torch')))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "False"
