"""--torq-check-dispatches: every NPU result compared with its host copy (IREE llvm-cpu) on the
same inputs, the per-layer check of DESIGN §7 (compiler/dispatch_check.py,
runtime/dispatch_check.py). The host copy is IREE's own compile of the original dispatch, so
the reference is independent of the simulator's kernels."""

import io
import os
import subprocess
import sys

import numpy as np
import pytest
from mlir_inputs import CONV_F32

import torq
from torq.runtime.dispatch_check import compare, summary_line

BIN = os.path.dirname(sys.executable)


def test_compare_counts_steps_and_float_error():
    npu = np.array([[3, -2], [7, 9]], np.int8)
    host = np.array([[3, -1], [7, 8]], np.int8)
    r = compare("d", 0, npu, host)
    assert (r["differing"], r["elements"], r["max_steps"]) == (2, 4, 1)
    f = compare("d", 1, np.array([1.0, 2.0], np.float32), np.array([1.0, 2.5], np.float32))
    assert f["max_steps"] is None and f["differing"] == 1
    assert f["rel_l2"] == pytest.approx(0.5 / np.hypot(1.0, 2.5))
    assert "2 of 4 elements differ" in summary_line([r, f])
    with pytest.raises(ValueError, match="NPU shape"):
        compare("d", 0, npu, host[:1])


def test_bf16_conv_checked_against_f32_host_copy(tmp_path):
    """A bf16 NPU conv differs from llvm-cpu's f32 conv by bf16 rounding: the check must see
    that difference (it compares two different computations) and it must be small."""
    x = np.random.default_rng(0).standard_normal((1, 4, 10, 10)).astype(np.float32)
    plain = torq.compile(CONV_F32, remarks=io.StringIO())
    checked = torq.compile(CONV_F32, remarks=io.StringIO(), flags=("--torq-check-dispatches",))
    y = checked(x)
    np.testing.assert_array_equal(y, plain(x))  # the check passes the NPU result on unchanged
    npu = [d for d in checked.report.dispatches if d.executor == "torq"]
    assert len(checked.last_checks) == len(npu) == 1
    (c,) = checked.last_checks
    assert c["name"] == npu[0].name and c["dtype"] == "float32" and c["max_steps"] is None
    assert c["differing"] > 0 and 0 < c["rel_l2"] < 1e-2, c


def test_int8_layers_within_one_step_of_llvm_cpu(tmp_path):
    """An ONNX Runtime-quantized downsample block: each NPU dispatch's int8 result (the
    intermediate conv, the block's end) against llvm-cpu's on the same inputs."""
    pytest.importorskip("onnxruntime")
    from test_ort_quantized import DownsampleBlock, ort_quantized_model

    path, x = ort_quantized_model(tmp_path, DownsampleBlock)
    cm = torq.compile(str(path), remarks=io.StringIO(), flags=("--torq-check-dispatches",))
    y = cm(x)
    npu = {d.name for d in cm.report.dispatches if d.executor == "torq"}
    assert {c["name"] for c in cm.last_checks} == npu and len(npu) >= 2
    ints = [c for c in cm.last_checks if c["max_steps"] is not None]
    assert ints and all(c["max_steps"] <= 1 for c in cm.last_checks if c["max_steps"] is not None), cm.last_checks
    assert all(c["differing_share"] < 1e-2 for c in ints), ints
    plain = torq.compile(str(path), remarks=io.StringIO())
    np.testing.assert_array_equal(y, plain(x))


def test_results_written_into_a_box_are_checked(tmp_path):
    """RegNet's 1x1 conv writes its int8 result into the zero-point border IREE made for the
    grouped conv's padded input (a box of an operand): checked as the whole updated operand,
    so every NPU dispatch has a check."""
    pytest.importorskip("onnxruntime")
    from test_ort_quantized import GroupedConv, ort_quantized_model

    path, x = ort_quantized_model(tmp_path, GroupedConv)
    cm = torq.compile(str(path), remarks=io.StringIO(), flags=("--torq-check-dispatches",))
    y = cm(x)
    npu = {d.name for d in cm.report.dispatches if d.executor == "torq"}
    assert {c["name"] for c in cm.last_checks} == npu and len(npu) == 3, (cm.last_checks, npu)
    ints = [c for c in cm.last_checks if c["max_steps"] is not None]
    assert len(ints) == 2 and all(c["max_steps"] <= 1 for c in ints), cm.last_checks  # the last: dequantized
    assert ints[0]["elements"] == 16 * 26 * 26, ints[0]  # the whole padded operand the 1x1 conv writes into
    np.testing.assert_array_equal(y, torq.compile(str(path), remarks=io.StringIO())(x))


def test_run_module_prints_the_checks(tmp_path):
    src, vmfb = tmp_path / "conv.mlir", tmp_path / "conv.vmfb"
    src.write_text(CONV_F32)
    r = subprocess.run([os.path.join(BIN, "torq-compile"), str(src), "-o", str(vmfb), "--torq-check-dispatches"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    np.save(tmp_path / "x.npy", np.ones((1, 4, 10, 10), np.float32))
    r = subprocess.run([os.path.join(BIN, "torq-run-module"), f"--module={vmfb}", f"--input=@{tmp_path / 'x.npy'}",
                        "--print-stats"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "NPU results vs their host copies" in r.stdout and "1 NPU results checked" in r.stdout, r.stdout
