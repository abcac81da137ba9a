"""ONNX models through `torq-compile`, `iree-compile --iree-hal-target-backends=torq` and `torq.compile`.

The models are built in code with `onnx.helper` (no downloads). Each runs on
the Torq simulator and is compared with an independent reference: ONNX's own
`onnx.reference.ReferenceEvaluator` (f32, bf16 tolerance of DESIGN §7), or,
for int8 QDQ, IREE llvm-cpu compiling the same imported MLIR (bit-exact).
Bad inputs fail with one line naming the file, and write nothing.
"""

import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import torq  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "samples"))
from cnn import error_figures, within_limits  # noqa: E402

BIN = os.path.dirname(sys.executable)
GRAPH = "main_graph"  # IREE's importer names the function after the ONNX graph


def tool(name, *args):
    return subprocess.run([os.path.join(BIN, name), *map(str, args)], capture_output=True, text=True)


def run_ok(name, *args):
    r = tool(name, *args)
    assert r.returncode == 0, f"{name} failed:\n{r.stderr}"
    return r


def f32_model(seed=0) -> onnx.ModelProto:
    """Conv 3x3 + bias + Relu, Conv 3x3 stride 2 + Relu, Flatten, Gemm: NCHW f32, opset 17."""
    rng = np.random.default_rng(seed)

    def init(name, shape, scale):
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)

    inits = [init("w1", (16, 3, 3, 3), 0.3), init("b1", (16,), 0.1), init("w2", (8, 16, 3, 3), 0.15),
             init("b2", (8,), 0.1), init("wfc", (10, 8 * 8 * 8), 0.05), init("bfc", (10,), 0.1)]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
             helper.make_node("Flatten", ["r2"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "wfc", "bfc"], ["y"], name="fc", transB=1)]
    graph = helper.make_graph(nodes, GRAPH, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def f32_case(tmp_path_factory):
    d = tmp_path_factory.mktemp("onnx_f32")
    model = f32_model()
    path = d / "model.onnx"
    onnx.save(model, path)
    x = np.random.default_rng(1).standard_normal((1, 3, 16, 16)).astype(np.float32)
    ref = ReferenceEvaluator(model).run(None, {"x": x})[0]
    return path, x, ref


@pytest.mark.parametrize("cli", ["torq-compile", "iree-compile"])
def test_f32_conv_gemm_cli(f32_case, tmp_path, cli):
    path, x, ref = f32_case
    vmfb = tmp_path / "model.vmfb"
    target = ["--iree-hal-target-backends=torq"] if cli == "iree-compile" else []
    run_ok(cli, path, *target, "-o", vmfb)
    np.save(tmp_path / "x.npy", x)
    r = run_ok("torq-run-module", f"--module={vmfb}", "--device=torq", f"--function={GRAPH}",
               f"--input=@{tmp_path / 'x.npy'}", f"--output=@{tmp_path / 'y.npy'}", "--print-stats")
    torq_rows = [ln for ln in r.stdout.splitlines() if "│ torq " in ln]  # one row per NPU dispatch
    assert len(torq_rows) >= 3, r.stdout  # both convs and the Gemm
    rel_l2, cosine = error_figures(np.load(tmp_path / "y.npy"), ref)
    assert within_limits(rel_l2, cosine), (rel_l2, cosine)


def test_f32_conv_gemm_python_api(f32_case):
    path, x, ref = f32_case
    cm = torq.compile(pathlib.Path(path))
    on_torq = [d for d in cm.report.dispatches if d.executor == "torq"]
    conv_macs = 16 * 16 * 16 * 3 * 9 + 8 * 8 * 8 * 16 * 9
    assert len(on_torq) >= 3 and cm.report.torq_macs >= conv_macs + 10 * 512, cm.report.dispatches
    assert cm.function_names == [GRAPH]
    y = cm(x)  # the module's only function
    rel_l2, cosine = error_figures(y, ref)
    assert within_limits(rel_l2, cosine), (rel_l2, cosine)
    assert sum(s["macs"] for s in cm.last_stats) >= conv_macs
    # Inputs are checked against the ONNX graph's signature.
    with pytest.raises(Exception, match=rf"{GRAPH}: input 0: expected 1x3x16x16xf32, got 1x3x8x8xf32"):
        cm(np.zeros((1, 3, 8, 8), np.float32))


def test_run_module_errors_name_the_graph_function(f32_case, tmp_path):
    path, x, _ = f32_case
    vmfb = tmp_path / "model.vmfb"
    torq.compile(str(path)).save(vmfb)
    np.save(tmp_path / "x.npy", x)
    r = tool("torq-run-module", f"--module={vmfb}", "--device=torq", f"--input=@{tmp_path / 'x.npy'}")
    assert r.returncode != 0
    assert r.stderr.strip().splitlines() == [
        f"torq-run-module: error: module {vmfb} has no function 'main' (functions: {GRAPH})"]
    np.save(tmp_path / "bad.npy", x[:, :2])
    r = tool("torq-run-module", f"--module={vmfb}", f"--function={GRAPH}", f"--input=@{tmp_path / 'bad.npy'}")
    assert r.returncode != 0 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "expected 1x3x16x16xf32" in r.stderr


def test_external_data_next_to_the_model(tmp_path):
    # (Seed 2 would give rel L2 1.2e-2, the same figure as a torch bf16 emulation of the model:
    # its logits are small against their terms, so bf16 itself misses the tolerance.)
    model = f32_model(seed=1)
    x = np.random.default_rng(2).standard_normal((1, 3, 16, 16)).astype(np.float32)
    ref = ReferenceEvaluator(model).run(None, {"x": x})[0]
    onnx.save(model, tmp_path / "ext.onnx", save_as_external_data=True, all_tensors_to_one_file=True,
              location="ext.bin", size_threshold=0)
    assert (tmp_path / "ext.bin").stat().st_size > 20_000 > (tmp_path / "ext.onnx").stat().st_size
    rel_l2, cosine = error_figures(torq.compile(tmp_path / "ext.onnx")(x), ref)
    assert within_limits(rel_l2, cosine), (rel_l2, cosine)
    (tmp_path / "ext.bin").unlink()
    with pytest.raises(torq.TorqCompileError, match=r"ext\.onnx: cannot load the model's external tensor data"):
        torq.compile(tmp_path / "ext.onnx")


# --- int8 QDQ --------------------------------------------------------------------------

def qdq_conv_model(seed=0) -> onnx.ModelProto:
    """QDQ int8: Q/DQ on the input, int8 weights (+ int32 bias) through DequantizeLinear,
    Conv + Relu, Q/DQ on the output, twice (the first conv's output stays int8 in between).
    Scales are calibration-like numbers (see tests/e2e/test_qdq_int8.py for what round ones do)."""
    rng = np.random.default_rng(seed)
    inits, nodes = [], []

    def const(name, value):
        inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def q_dq(x, scale, zp, out):
        nodes.append(helper.make_node("QuantizeLinear", [x, scale, zp], [out + "_q"]))
        nodes.append(helper.make_node("DequantizeLinear", [out + "_q", scale, zp], [out]))

    q_dq("x", const("sx", np.float32(0.0487)), const("zx", np.int8(3)), "xd")
    prev, prev_scale, cin = "xd", np.float32(0.0487), 8
    for i, (cout, sy, zy) in enumerate([(16, 0.79, -5), (8, 0.63, 2)]):
        sw = np.float32(0.0103)
        nodes.append(helper.make_node("DequantizeLinear", [
            const(f"w{i}", rng.integers(-127, 128, (cout, cin, 3, 3)).astype(np.int8)),
            const(f"sw{i}", sw), const(f"zw{i}", np.int8(0))], [f"wd{i}"]))
        nodes.append(helper.make_node("DequantizeLinear", [
            const(f"b{i}", rng.integers(-2000, 2000, cout).astype(np.int32)),
            const(f"sb{i}", np.float32(prev_scale * sw)), const(f"zb{i}", np.int32(0))], [f"bd{i}"]))
        nodes.append(helper.make_node("Conv", [prev, f"wd{i}", f"bd{i}"], [f"c{i}"], name=f"conv{i}",
                                      pads=[1, 1, 1, 1]))
        nodes.append(helper.make_node("Relu", [f"c{i}"], [f"r{i}"]))
        q_dq(f"r{i}", const(f"sy{i}", np.float32(sy)), const(f"zy{i}", np.int8(zy)), f"y{i}")
        prev, prev_scale, cin = f"y{i}", np.float32(sy), cout
    graph = helper.make_graph(nodes, GRAPH, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16, 16])],
                              [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [1, 8, 16, 16])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


def test_qdq_int8_conv_bit_exact_vs_llvm_cpu():
    from llvm_cpu import llvm_cpu

    from torq.compiler.onnx_import import import_onnx

    model = qdq_conv_model()
    data = model.SerializeToString()
    x = (np.random.default_rng(4).standard_normal((1, 8, 16, 16)) * 3).astype(np.float32)

    # Reference: IREE llvm-cpu on the same imported module.
    imported = import_onnx(data, "qdq.onnx")
    ref = llvm_cpu(imported, x, function=GRAPH)

    remarks = []

    class Sink:
        def write(self, s):
            remarks.append(s)

    cm = torq.compile(data, remarks=Sink())
    y = cm(x)
    assert y.dtype == np.float32 and y.shape == ref.shape
    assert np.array_equal(y, ref), f"{int((y != ref).sum())} of {y.size} outputs differ from llvm-cpu"
    # The output is a dequantized int8: multiples of the output scale, many distinct levels.
    q = ref / np.float32(0.63)
    assert np.allclose(q, np.round(q), atol=1e-4) and len(np.unique(np.round(q))) > 20
    # Independent check: ONNX's reference evaluator, within one output quantum.
    onnx_ref = ReferenceEvaluator(model).run(None, {"x": x})[0]
    # (an off-by-one first-layer rounding, f32 op order, can move a second-layer output further)
    assert np.mean(np.abs(y - onnx_ref) <= 0.63 + 1e-5) >= 0.99

    # Both convs run on the NPU as i8 x i8 -> i32 convs: torch-mlir folds the input zero point
    # into a per-channel correction, and the f32 requantization IREE emits for QuantizeLinear
    # (sitofp, scales, f32 bias, relu, divf, roundeven, clamp, fptosi) becomes an integer
    # rescale that equals it on every reachable accumulator (compiler/requant.py). The last
    # conv's DequantizeLinear (int8 -> f32) is f32 compute: a small host dispatch after it.
    convs = [d for d in cm.report.dispatches if d.macs and d.macs >= 16 * 16 * 8 * 16 * 9]
    assert len(convs) == 2 and all(d.executor == "torq" for d in convs), convs
    text = "".join(remarks)
    assert "conv0: remark" not in text and "conv1: remark" not in text, text
    # The input QuantizeLinear (f32 -> int8: divf, roundeven) stays on host.
    assert "QuantizeLinear_0, x]: remark: dispatch main_graph_dispatch_0 stays on host" in text, text


# --- bad inputs ------------------------------------------------------------------------

def _one_line_failure(r, out, needle):
    assert r.returncode != 0
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert needle in lines[0], lines[0]
    assert not out.exists()
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".torq-")]
    return lines[0]


@pytest.mark.parametrize("content,needle", [
    (b"", "not an ONNX model: the file is empty"),
    (b"\x08\x07garbage\xff\xff\xff\x00not protobuf", "not a valid ONNX model (protobuf parse error"),
    (b"module {}\n", "not a valid ONNX model"),
])
def test_garbage_and_empty_files(tmp_path, content, needle):
    src = tmp_path / "bad.onnx"
    src.write_bytes(content)
    out = tmp_path / "m.vmfb"
    _one_line_failure(tool("torq-compile", src, "-o", out), out, f"torq-compile: error: {src}: {needle}")


def test_truncated_model(tmp_path):
    data = f32_model().SerializeToString()
    out = tmp_path / "m.vmfb"
    for cut in (len(data) // 3, len(data) - 7):
        src = tmp_path / "cut.onnx"
        src.write_bytes(data[:cut])
        _one_line_failure(tool("iree-compile", src, "--iree-hal-target-backends=torq", "-o", out), out,
                          f"iree-compile: error: {src}: not a valid ONNX model")
    with pytest.raises(torq.TorqCompileError, match=r"^<bytes>: not a valid ONNX model"):
        torq.compile(data[:-7])


def test_unsupported_opset_and_op(tmp_path):
    # torch-mlir lowers Softmax from opset 13 on (opset 11 flattened the input first).
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Softmax", ["r"], ["y"], axis=1)]
    graph = helper.make_graph(nodes, GRAPH, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)]), tmp_path / "sm.onnx")
    out = tmp_path / "m.vmfb"
    _one_line_failure(tool("torq-compile", tmp_path / "sm.onnx", "-o", out), out,
                      f"{tmp_path / 'sm.onnx'}: node 'Softmax_1': ONNX op Softmax is not supported by IREE's ONNX import at opset 11")
    nodes = [helper.make_node("FooBar", ["x"], ["y"], name="custom", domain="com.example")]
    graph = helper.make_graph(nodes, GRAPH, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])
    with pytest.raises(torq.TorqCompileError, match=r"node 'custom': ONNX op com\.example\.FooBar is not supported"):
        torq.compile(model)
    # A supported op whose input shape inference leaves without a rank (a Reshape to a shape the
    # graph reads at run time): the input is named, not the op called unsupported.
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["r"]), helper.make_node("Transpose", ["r"], ["y"], perm=[1, 0])]
    graph = helper.make_graph(nodes, GRAPH, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8]),
                                             helper.make_tensor_value_info("shape", TensorProto.INT64, ["n"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", "b"])])
    with pytest.raises(torq.TorqCompileError, match=r"node 'Transpose_1': ONNX op Transpose cannot be imported: "
                                                    r"its input 'r' has no known rank"):
        torq.compile(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    # An op the ONNX checker does not know at that opset.
    nodes = [helper.make_node("Gelu", ["x"], ["y"])]
    graph = helper.make_graph(nodes, GRAPH, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "gelu.onnx")
    _one_line_failure(tool("torq-compile", tmp_path / "gelu.onnx", "-o", out), out,
                      f"{tmp_path / 'gelu.onnx'}: invalid ONNX model: No Op registered for Gelu with domain_version of 17")


def test_onnx_package_missing(tmp_path, f32_case):
    path, _, _ = f32_case
    out = tmp_path / "m.vmfb"
    code = ("import sys; sys.modules['onnx'] = None\n"
            "from torq.compiler.tools import torq_compile_main\n"
            f"sys.exit(torq_compile_main([{str(path)!r}, '-o', {str(out)!r}]))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    _one_line_failure(r, out, f"{path}: importing ONNX needs the 'onnx' Python package")


def test_detection_by_content_and_mlir_unchanged(tmp_path):
    from torq.compiler.onnx_import import is_onnx

    data = f32_model().SerializeToString()
    assert is_onnx(data, "<stdin>") and is_onnx(data, "model.pb") and is_onnx(b"", "m.ONNX")
    assert not is_onnx(data, "model.mlir")
    mlir = b"func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> { return %x : tensor<4xf32> }\n"
    assert not is_onnx(mlir, "<stdin>") and not is_onnx(b"ML\xefR\x00", "<stdin>")
    # ONNX on stdin, detected by content.
    out = tmp_path / "m.vmfb"
    r = subprocess.run([os.path.join(BIN, "torq-compile"), "-", "-o", str(out), "--torq-quiet"], input=data,
                       capture_output=True)
    assert r.returncode == 0, r.stderr.decode()
    assert out.stat().st_size > 0
