"""A model quantized with torch's PT2E flow, as torch users quantize models.

torchao's `prepare_pt2e` / `convert_pt2e` with X86InductorQuantizer (uint8
activations, per-channel int8 weights, the last conv's output left in f32),
exported by iree-turbine. The uint8 activations become int8 ones before IREE
(compiler/torch_qdq.py: exact, checked against llvm-cpu on both forms); both
convs run on the NPU, the last one's f32 dequantize of its accumulator on
the host (compiler/requant_tail.py). References: llvm-cpu on the exported
MLIR as written.
"""

import io

import numpy as np
import pytest
import torch
from iree.compiler import ir
from iree.compiler.api import Session, Source
from llvm_cpu import llvm_cpu
from torch_reference import REL_L2_LIMIT

import torq
from torq.compiler.torch_qdq import rewrite_uint8_activations


def pt2e_export(model: torch.nn.Module, x: torch.Tensor) -> str:
    """`model` quantized as torch users do (X86InductorQuantizer's default config, 4 random
    calibration inputs of x's shape), exported by iree-turbine: MLIR text."""
    from iree.turbine import aot
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
    from torchao.quantization.pt2e.quantizer import x86_inductor_quantizer as xiq

    graph = torch.export.export(model.eval(), (x,)).module()
    quantizer = xiq.X86InductorQuantizer().set_global(xiq.get_default_x86_inductor_quantization_config())
    prepared = prepare_pt2e(graph, quantizer)
    for _ in range(4):  # calibration
        prepared(torch.randn(x.shape))
    return str(aot.export(convert_pt2e(prepared), x).mlir_module)


class ConvBlock(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(8, 16, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(16, 8, 1)

    def forward(self, x):
        return self.conv2(torch.relu(self.conv1(x)))


@pytest.fixture(scope="module")
def pt2e_mlir():
    torch.manual_seed(0)
    x = torch.randn(1, 8, 24, 24)
    return pt2e_export(ConvBlock(), x), x.numpy()


def test_pt2e_uint8_rewrite_is_exact(pt2e_mlir):
    text, x = pt2e_mlir
    assert ",ui8>" in text
    session = Session()
    inv = session.invocation()
    assert inv.parse_source(Source.wrap_buffer(session, text.encode(), buffer_name="pt2e.mlir"))
    module = inv.export_module()
    with module.context, ir.Location.unknown():
        assert rewrite_uint8_activations(module) == 2  # the input's and conv1's activations
        rewritten = str(module)
    assert ",ui8>" not in rewritten
    assert np.array_equal(llvm_cpu(text, x), llvm_cpu(rewritten, x))


def test_pt2e_conv_block_on_npu(pt2e_mlir):
    text, x = pt2e_mlir
    ref = llvm_cpu(text, x)
    remarks = io.StringIO()
    cm = torq.compile(text, remarks=remarks)
    convs = [d for d in cm.report.dispatches if d.macs]
    assert len(convs) == 2 and all(d.executor == "torq" for d in convs), (cm.report.dispatches, remarks.getvalue())
    host = [d.reason for d in cm.report.dispatches if d.executor == "host"]
    assert len(host) == 1 and host[0].startswith("quantize of an f32 tensor"), host
    y = cm(x)
    # conv1's int8 result is within one step of llvm-cpu's; conv2 and its dequantize are exact
    # from there, so the float output is close, not equal.
    assert np.linalg.norm(y - ref) / np.linalg.norm(ref) < REL_L2_LIMIT
    # With only exact rescales on the NPU (conv1 where its rescale is exact, else on the host),
    # the accumulator and its host dequantize give llvm-cpu's bits.
    exact = torq.compile(text, remarks=io.StringIO(), flags=("--torq-requant=exact",))
    assert np.array_equal(exact(x), ref)
    assert [d.executor for d in exact.report.dispatches if d.macs][1] == "torq"


class ResidualBlocks(torch.nn.Module):
    """torchvision ResNet's two block forms: an identity BasicBlock and a downsampling one (a
    1x1 stride-2 conv + BatchNorm on the residual), then a 1x1 conv so both adds are quantized.
    X86InductorQuantizer quantizes conv + BatchNorm + add + relu as one pattern: the
    accumulator and the dequantized residual are added in f32 before the only quantize."""

    def __init__(self, c=16):
        super().__init__()
        conv_bn = lambda i, o, k, s: torch.nn.Sequential(  # noqa: E731
            torch.nn.Conv2d(i, o, k, stride=s, padding=k // 2, bias=False), torch.nn.BatchNorm2d(o))
        self.stem = conv_bn(8, c, 3, 1)
        self.a1, self.a2 = conv_bn(c, c, 3, 1), conv_bn(c, c, 3, 1)
        self.b1, self.b2 = conv_bn(c, 2 * c, 3, 2), conv_bn(2 * c, 2 * c, 3, 1)
        self.down = conv_bn(c, 2 * c, 1, 2)
        self.head = torch.nn.Conv2d(2 * c, 8, 1)
        g = torch.Generator().manual_seed(0)
        for m in self.modules():  # BatchNorms as trained ones: statistics away from 0 / 1
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.2, 0.2, generator=g)
                m.running_var.uniform_(0.5, 1.5, generator=g)
                m.weight.data.uniform_(0.5, 1.5, generator=g)
                m.bias.data.uniform_(-0.2, 0.2, generator=g)

    def forward(self, x):
        x = torch.relu(self.stem(x))
        x = torch.relu(self.a2(torch.relu(self.a1(x))) + x)
        x = torch.relu(self.b2(torch.relu(self.b1(x))) + self.down(x))
        return self.head(x)


def test_pt2e_residual_adds_run_on_the_npu():
    """Both adds (an int8 residual; the downsample conv's i32 accumulator, requantized on its
    own) are integer rescales of the accumulator plus the residual in its units
    (compiler/requant_acc_residual.py); every conv on the NPU, each NPU dispatch within one
    output step of its llvm-cpu copy on the same inputs, the model close to llvm-cpu."""
    torch.manual_seed(0)
    x = torch.randn(1, 8, 16, 16)
    text = pt2e_export(ResidualBlocks(), x)
    ref = llvm_cpu(text, x.numpy())
    remarks = io.StringIO()
    cm = torq.compile(text, remarks=remarks, flags=("--torq-check-dispatches",))
    convs = [d for d in cm.report.dispatches if d.macs]
    assert all(d.executor == "torq" for d in convs), [(d.executor, d.reason) for d in convs]
    assert remarks.getvalue().count("plus the int8 residual in its units") == 2, remarks.getvalue()
    assert "the i32 residual's own rescale" in remarks.getvalue()
    y = cm(x.numpy())
    checks = [c for c in cm.last_checks if c["max_steps"] is not None]
    assert len(checks) >= 5 and max(c["max_steps"] for c in checks) <= 1, checks
    assert np.linalg.norm(y - ref) / np.linalg.norm(ref) < REL_L2_LIMIT


class WideHead(torch.nn.Module):
    """MobileNetV2's head: a 320 -> 1280 1x1 conv + BatchNorm + ReLU6 on a 7x7 map, then the
    average pool and the classifier. At this size IREE writes the conv's result into a padded
    buffer for the pool and corrects its accumulator by the weights' int64 zero points (all 0)
    times the input's sums per position, an i32 tensor of another dispatch."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Sequential(torch.nn.Conv2d(8, 320, 3, padding=1), torch.nn.BatchNorm2d(320))
        self.last = torch.nn.Sequential(torch.nn.Conv2d(320, 1280, 1), torch.nn.BatchNorm2d(1280), torch.nn.ReLU6())
        self.fc = torch.nn.Linear(1280, 10)

    def forward(self, x):
        y = self.last(self.conv(x))
        return self.fc(torch.flatten(torch.nn.functional.adaptive_avg_pool2d(y, 1), 1))


def test_pt2e_zero_point_product_folds():
    """The product of the all-zero weight zero points and the sums folds to 0
    (requant_zero_point.fold_zero_products): the 1x1 conv runs on the NPU, within one output
    step of its llvm-cpu copy, the model close to llvm-cpu."""
    torch.manual_seed(0)
    x = torch.randn(1, 8, 7, 7)
    text = pt2e_export(WideHead(), x)
    ref = llvm_cpu(text, x.numpy())
    cm = torq.compile(text, remarks=io.StringIO(), flags=("--torq-check-dispatches",))
    wide = [d for d in cm.report.dispatches if d.macs == 320 * 1280 * 49]
    assert len(wide) == 1 and wide[0].executor == "torq", [(d.executor, d.macs, d.reason) for d in cm.report.dispatches]
    y = cm(x.numpy())
    checks = [c for c in cm.last_checks if c["max_steps"] is not None]
    assert checks and max(c["max_steps"] for c in checks) <= 1, checks
    assert np.linalg.norm(y - ref) / np.linalg.norm(ref) < REL_L2_LIMIT


class PatchEmbed(torch.nn.Module):
    """ViT's patch embedding: a stride-4 conv whose f32 output (the last quantized op's, left
    unquantized by X86InductorQuantizer) is read as tokens, flatten(2).transpose(1, 2). IREE
    writes the conv's dequantize transposed, in the conv's dispatch."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Conv2d(3, 16, 4, stride=4)
        self.norm = torch.nn.LayerNorm(16)

    def forward(self, x):
        return self.norm(self.proj(x).flatten(2).transpose(1, 2))


def test_pt2e_transposed_accumulator_dequantize_is_correct():
    """The host computes an int8 conv's f32 dequantize from the accumulator the NPU writes, as
    it is: one that writes the accumulator transposed has the NPU write it transposed (an i32
    copy after the conv). It was reshaped, not transposed: rel L2 1.44 vs llvm-cpu here, 1.41 on
    DeiT's patch embedding."""
    torch.manual_seed(0)
    x = torch.randn(1, 3, 32, 32)
    text = pt2e_export(PatchEmbed(), x)
    ref = llvm_cpu(text, x.numpy())
    cm = torq.compile(text, remarks=io.StringIO())
    conv = [d for d in cm.report.dispatches if d.macs == 16 * 48 * 64]
    assert len(conv) == 1 and conv[0].executor == "torq", cm.report.dispatches
    y = cm(x.numpy())
    assert np.linalg.norm(y - ref) / np.linalg.norm(ref) < REL_L2_LIMIT


class ResidualMlp(torch.nn.Module):
    """A transformer's MLP on an f32 residual stream (DeiT's x + fc2(act(fc1(norm(x))))): PT2E
    leaves fc2's output and the stream in f32, and IREE adds them in fc2's dispatch."""

    def __init__(self):
        super().__init__()
        self.norm = torch.nn.LayerNorm(32)
        self.fc1 = torch.nn.Linear(32, 64)
        self.fc2 = torch.nn.Linear(64, 32)

    def forward(self, x):
        return x + self.fc2(torch.relu(self.fc1(self.norm(x))))


def test_pt2e_f32_residual_added_to_a_dequantized_accumulator():
    """fc2 runs on the NPU and the host adds the f32 residual in the dequantize it computes from
    the accumulator (HostTail.tensors); it stayed on host ('operand 0 of the requantization is
    not a constant'). Both Linears on the NPU, the output close to llvm-cpu."""
    torch.manual_seed(0)
    x = torch.randn(1, 10, 32)
    text = pt2e_export(ResidualMlp(), x)
    ref = llvm_cpu(text, x.numpy())
    cm = torq.compile(text, remarks=io.StringIO())
    linears = [d for d in cm.report.dispatches if d.macs == 10 * 32 * 64]
    assert len(linears) == 2 and all(d.executor == "torq" for d in linears), \
        [(d.executor, d.macs, d.reason) for d in cm.report.dispatches]
    y = cm(x.numpy())
    assert np.linalg.norm(y - ref) / np.linalg.norm(ref) < REL_L2_LIMIT


class ActivationBlock(torch.nn.Module):
    """MobileNetV3's (EfficientNet's) conv + BatchNorm + hardswish (SiLU), a depthwise one after
    it, then a 1x1 conv so both activations are quantized. X86InductorQuantizer quantizes each
    conv with its activation as one pattern: the dequantized accumulator goes through the
    activation before the only quantize, and the chain is not monotone in the accumulator."""

    def __init__(self, act):
        super().__init__()
        bn = lambda c: torch.nn.BatchNorm2d(c)  # noqa: E731
        self.c1 = torch.nn.Sequential(torch.nn.Conv2d(8, 16, 3, padding=1), bn(16), act())
        self.c2 = torch.nn.Sequential(torch.nn.Conv2d(16, 16, 3, padding=1, groups=16), bn(16), act())
        self.c3 = torch.nn.Conv2d(16, 8, 1)
        for m in self.modules():
            if isinstance(m, torch.nn.BatchNorm2d):  # statistics as a trained net's, not the identity
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2)
                m.weight.data.uniform_(0.5, 1.5)
                m.bias.data.uniform_(-0.5, 0.5)

    def forward(self, x):
        return self.c3(self.c2(self.c1(x)))


@pytest.mark.parametrize("act", [torch.nn.Hardswish, torch.nn.SiLU])
def test_pt2e_activation_fused_into_the_conv_runs_on_the_npu(act):
    """Both conv + activation dispatches run on the NPU as segment tables of a grid level
    (compiler/requant_fused_activation.py); they stayed on host ('the chain is not monotone in
    the accumulator'). Each NPU dispatch is within one output step of its llvm-cpu copy on the
    same inputs (SiLU's exp is llvm-cpu's own there), and the model close to llvm-cpu."""
    torch.manual_seed(0)
    x = torch.randn(1, 8, 16, 16)
    text = pt2e_export(ActivationBlock(act).eval(), x)
    ref = llvm_cpu(text, x.numpy())
    remarks = io.StringIO()
    cm = torq.compile(text, remarks=remarks, flags=("--torq-check-dispatches",))
    convs = [d for d in cm.report.dispatches if d.macs]
    assert len(convs) == 3 and all(d.executor == "torq" for d in convs), [(d.executor, d.reason) for d in convs]
    y = cm(x.numpy())
    checks = [c for c in cm.last_checks if c["max_steps"] is not None]
    assert len(checks) == 2 and max(c["max_steps"] for c in checks) <= 1, checks
    assert all(c["differing"] < 0.1 * c["elements"] for c in checks), checks
    assert np.linalg.norm(y - ref) / np.linalg.norm(ref) < REL_L2_LIMIT


class WideConvSiLU(torch.nn.Module):
    """A conv + SiLU whose accumulators reach x < -88.7 (128 input channels, weights x20):
    SiLU's exp(-x) overflows to +inf there and 1 / (1 + inf) = 0, on llvm-cpu as in IEEE."""

    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(128, 16, 3, padding=1)
        self.c2 = torch.nn.Conv2d(16, 8, 1)
        with torch.no_grad():
            self.c1.weight.mul_(20)

    def forward(self, x):
        return self.c2(torch.nn.functional.silu(self.c1(x)))


def test_pt2e_silu_whose_exp_overflows_runs_on_the_npu():
    """The chain's exp overflowing to +inf on part of the accumulator range is IEEE's value,
    as llvm-cpu computes it; the conv stayed on host ("the chain overflows f32 on the
    accumulator range": MobileViT-XXS's convs, 79M MACs). Within one step of its llvm-cpu copy."""
    torch.manual_seed(0)
    x = torch.randn(1, 128, 12, 12)
    text = pt2e_export(WideConvSiLU().eval(), x)
    ref = llvm_cpu(text, x.numpy())
    cm = torq.compile(text, remarks=io.StringIO(), flags=("--torq-check-dispatches",))
    convs = [d for d in cm.report.dispatches if d.macs]
    assert len(convs) == 2 and all(d.executor == "torq" for d in convs), [(d.executor, d.reason) for d in convs]
    y = cm(x.numpy())
    checks = [c for c in cm.last_checks if c["max_steps"] is not None]
    assert len(checks) == 1 and checks[0]["max_steps"] <= 1 and checks[0]["differing"] < 0.1 * checks[0]["elements"]
    assert np.linalg.norm(y - ref) / np.linalg.norm(ref) < REL_L2_LIMIT


def _quantize(value: str, scale: str, result: str) -> str:
    """Body lines quantizing f32 `%value` to int8 `%result` as PT2E's quantize_per_tensor
    lowers: divide by `%scale`, round to even, add the zero point -128 (`%lo`), clamp to
    [`%lo`, `%hi`], convert."""
    return f"""    %{result}_d = arith.divf %{value}, %{scale} : f32
    %{result}_r = math.roundeven %{result}_d : f32
    %{result}_z = arith.addf %{result}_r, %lo : f32
    %{result}_lo = arith.maxnumf %{result}_z, %lo : f32
    %{result}_hi = arith.minnumf %{result}_lo, %hi : f32
    %{result} = arith.fptosi %{result}_hi : f32 to i8"""


def _depthwise_with_f32_and_int8_results(channels: int, size: int) -> str:
    """@main: an int8 depthwise 3x3 conv whose accumulator is dequantized, ReLU'd and returned
    in f32 and also quantized to int8, both from one generic: the form IREE gives PT2E
    MobileNetV3's depthwise conv before its squeeze-excitation (the f32 value feeds the
    gate's multiply, the int8 one the pooling)."""
    rng = np.random.default_rng(0)
    c, n = channels, size - 2
    w = rng.integers(-127, 128, (c, 3, 3))
    zp_corr = rng.integers(-3000, 3000, c)  # the input zero point times the weight sums
    sw = rng.uniform(2e-3, 8e-3, c)
    bias = rng.uniform(-0.5, 0.5, c)
    dense = lambda a, t: f"dense<{np.array2string(np.asarray(a), separator=', ', threshold=1 << 20)}> : {t}"  # noqa: E731
    x_t, w_t, acc_t = f"tensor<{c}x{size}x{size}xi8>", f"tensor<{c}x3x3xi8>", f"tensor<{c}x{n}x{n}xi32>"
    f_t, q_t = f"tensor<{c}x{n}x{n}xf32>", f"tensor<{c}x{n}x{n}xi8>"
    return f"""
#in = affine_map<(d0, d1, d2, d3, d4) -> (d2, d0 + d3, d1 + d4)>
#w = affine_map<(d0, d1, d2, d3, d4) -> (d2, d3, d4)>
#acc = affine_map<(d0, d1, d2, d3, d4) -> (d2, d0, d1)>
#id = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#ch = affine_map<(d0, d1, d2) -> (d0)>
func.func @main(%x: {x_t}) -> ({f_t}, {q_t}) {{
  %w = arith.constant {dense(w, w_t)}
  %corr = arith.constant {dense(zp_corr, f"tensor<{c}xi32>")}
  %sw = arith.constant {dense(sw.astype(np.float32), f"tensor<{c}xf32>")}
  %bias = arith.constant {dense(bias.astype(np.float32), f"tensor<{c}xf32>")}
  %sx = arith.constant 2.37333938e-03 : f32
  %sy = arith.constant 6.0e-03 : f32
  %zero = arith.constant 0.0 : f32
  %lo = arith.constant -128.0 : f32
  %hi = arith.constant 127.0 : f32
  %c0 = arith.constant 0 : i32
  %e = tensor.empty() : {acc_t}
  %init = linalg.fill ins(%c0 : i32) outs(%e : {acc_t}) -> {acc_t}
  %a = linalg.generic {{indexing_maps = [#in, #w, #acc],
      iterator_types = ["parallel", "parallel", "parallel", "reduction", "reduction"]}}
      ins(%x, %w : {x_t}, {w_t}) outs(%init : {acc_t}) {{
  ^bb0(%xi: i8, %wi: i8, %o: i32):
    %x32 = arith.extsi %xi : i8 to i32
    %w32 = arith.extsi %wi : i8 to i32
    %p = arith.muli %x32, %w32 : i32
    %s = arith.addi %o, %p : i32
    linalg.yield %s : i32
  }} -> {acc_t}
  %ef = tensor.empty() : {f_t}
  %eq = tensor.empty() : {q_t}
  %r:2 = linalg.generic {{indexing_maps = [#id, #ch, #ch, #ch, #id, #id], iterator_types = ["parallel", "parallel", "parallel"]}}
      ins(%a, %corr, %sw, %bias : {acc_t}, tensor<{c}xi32>, tensor<{c}xf32>, tensor<{c}xf32>)
      outs(%ef, %eq : {f_t}, {q_t}) {{
  ^bb0(%ai: i32, %ci: i32, %swc: f32, %bc: f32, %of: f32, %oq: i8):
    %d = arith.subi %ai, %ci : i32
    %f = arith.sitofp %d : i32 to f32
    %m1 = arith.mulf %f, %sx : f32
    %m2 = arith.mulf %m1, %swc : f32
    %y = arith.addf %m2, %bc : f32
    %gt = arith.cmpf ugt, %y, %zero : f32
    %relu = arith.select %gt, %y, %zero : f32
{_quantize("relu", "sy", "q")}
    linalg.yield %relu, %q : f32, i8
  }} -> ({f_t}, {q_t})
  return %r#0, %r#1 : {f_t}, {q_t}
}}
"""


def test_dequantized_accumulator_and_its_int8_value_from_one_npu_result():
    """The depthwise conv runs on the NPU, which writes its accumulator once; the host computes
    the f32 value from it and the int8 one from that f32 value (HostTail.source). It stayed on
    host ('the f32 dequantize of the depthwise_conv2d accumulator is not only the dispatch's
    result'): 8 dispatches, about 5% of PT2E MobileNetV3-Large's MACs. The host runs the
    model's own float ops on the exact accumulator, so both results equal llvm-cpu's."""
    text = _depthwise_with_f32_and_int8_results(16, 14)
    x = np.random.default_rng(1).integers(-128, 128, (16, 14, 14)).astype(np.int8)
    ref_f, ref_q = llvm_cpu(text, x)
    remarks = io.StringIO()
    cm = torq.compile(text, remarks=remarks)
    conv = [d for d in cm.report.dispatches if d.macs == 16 * 12 * 12 * 9]
    assert len(conv) == 1 and conv[0].executor == "torq", [(d.executor, d.macs, d.reason) for d in cm.report.dispatches]
    y_f, y_q = cm(x)
    assert ((ref_q > -128) & (ref_q < 127)).mean() > 0.3  # most values between the clamps
    np.testing.assert_array_equal(y_q, ref_q)
    np.testing.assert_array_equal(y_f, ref_f)


class GroupedHead(torch.nn.Module):
    """RegNet's grouped 3x3 conv as the model's last layer: its output, dequantized in f32,
    adds a bias per group x channel."""

    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(8, 16, 1)
        self.grouped = torch.nn.Conv2d(16, 16, 3, padding=1, groups=4)

    def forward(self, x):
        return self.grouped(torch.relu(self.conv1(x)))


def test_pt2e_grouped_conv_f32_output_on_the_npu():
    """The grouped conv runs on the NPU and the host computes its f32 output from the
    accumulator, with the bias per group x channel (a two-dim constant of HostTail); it stayed
    on host ('the dequantize on the host reads values that vary along several dims'). The
    model close to llvm-cpu."""
    torch.manual_seed(0)
    x = torch.randn(1, 8, 10, 10)
    text = pt2e_export(GroupedHead().eval(), x)
    ref = llvm_cpu(text, x.numpy())
    cm = torq.compile(text, remarks=io.StringIO())
    grouped = [d for d in cm.report.dispatches if d.macs == 16 * 4 * 9 * 100]
    assert len(grouped) == 1 and grouped[0].executor == "torq", \
        [(d.executor, d.macs, d.reason) for d in cm.report.dispatches]
    y = cm(x.numpy())
    assert np.linalg.norm(y - ref) / np.linalg.norm(ref) < 1e-5


class ConvNeXtBlock(torch.nn.Module):
    """ConvNeXt's block: a depthwise 7x7 conv, then LayerNorm and the MLP's Linears on the
    channels-last (batch, height, width, channels) view, and the residual."""

    def __init__(self, c: int = 16):
        super().__init__()
        self.dw = torch.nn.Conv2d(c, c, 7, padding=3, groups=c)
        self.norm = torch.nn.LayerNorm(c)
        self.fc1 = torch.nn.Linear(c, 4 * c)
        self.fc2 = torch.nn.Linear(4 * c, c)

    def forward(self, x):
        y = self.dw(x).permute(0, 2, 3, 1)
        y = self.fc2(torch.nn.functional.gelu(self.fc1(self.norm(y))))
        return x + y.permute(0, 3, 1, 2)


class PatchMlp(torch.nn.Module):
    """MobileViT's transformer MLP on (patches, tokens, channels): a 3-D input whose leading
    dim is 4, not 1."""

    def __init__(self, c: int = 16):
        super().__init__()
        self.conv = torch.nn.Conv2d(c, c, 1)
        self.fc1 = torch.nn.Linear(c, 4 * c)
        self.fc2 = torch.nn.Linear(4 * c, c)

    def forward(self, x):
        y = self.conv(x).reshape(4, 16, 16)
        return self.fc2(torch.nn.functional.gelu(self.fc1(y)))


@pytest.mark.parametrize("model", [ConvNeXtBlock, PatchMlp])
def test_pt2e_linear_on_4d_activations_runs_on_the_npu(model):
    """A quantized Linear of a 4-D input, or of a 3-D one whose leading dim is not 1, becomes
    one on its (1, rows, K) view, the view on the int8 tensor (compiler/torch_linear.
    rewrite_quantized_linears), so IREE makes an int8 matmul of it: fc1 stayed a float matmul
    on host (ConvNeXt-Tiny: 17% of its MACs on the NPU). Both Linears on the NPU, the model
    close to llvm-cpu."""
    torch.manual_seed(0)
    x = torch.randn(1, 16, 8, 8)
    text = pt2e_export(model().eval(), x)
    ref = llvm_cpu(text, x.numpy())
    cm = torq.compile(text, remarks=io.StringIO(), flags=("--torq-no-cache",))
    linears = [d for d in cm.report.dispatches if d.macs == 64 * 16 * 64]
    assert len(linears) == 2 and all(d.executor == "torq" for d in linears), \
        [(d.executor, d.macs, d.reason) for d in cm.report.dispatches]
    y = cm(x.numpy())
    assert np.linalg.norm(y - ref) / np.linalg.norm(ref) < REL_L2_LIMIT


def _max_pool_of_dequantized(channels: int, size: int) -> str:
    """@main: an int8 tensor dequantized, max pooled 3x3 stride 1 with ceil mode's padding
    (low 1, high 2, -inf) and quantized back at the same scale: PT2E GoogLeNet's inception
    pool, which torch-mlir left in f32."""
    c, n = channels, size
    x_t, f_t, p_t = (f"tensor<1x{c}x{n}x{n}xi8>", f"tensor<1x{c}x{n}x{n}xf32>",
                     f"tensor<1x{c}x{n + 3}x{n + 3}xf32>")
    return f"""
#id = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
func.func @main(%x: {x_t}) -> {x_t} {{
  %s = arith.constant 8.87689122e-04 : f32
  %ninf = arith.constant 0xFF800000 : f32
  %lo = arith.constant -128.0 : f32
  %hi = arith.constant 127.0 : f32
  %z = arith.constant -128 : i16
  %ef = tensor.empty() : {f_t}
  %d = linalg.generic {{indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}}
      ins(%x : {x_t}) outs(%ef : {f_t}) {{
  ^bb0(%i: i8, %o: f32):
    %w = arith.extsi %i : i8 to i16
    %v = arith.subi %w, %z : i16
    %f = arith.sitofp %v : i16 to f32
    %m = arith.mulf %f, %s : f32
    linalg.yield %m : f32
  }} -> {f_t}
  %p = tensor.pad %d low[0, 0, 1, 1] high[0, 0, 2, 2] {{
  ^bb0(%a: index, %b: index, %c: index, %e: index):
    tensor.yield %ninf : f32
  }} : {f_t} to {p_t}
  %win = tensor.empty() : tensor<3x3xf32>
  %init = linalg.fill ins(%ninf : f32) outs(%ef : {f_t}) -> {f_t}
  %mp = linalg.pooling_nchw_max {{dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>}}
      ins(%p, %win : {p_t}, tensor<3x3xf32>) outs(%init : {f_t}) -> {f_t}
  %eq = tensor.empty() : {x_t}
  %q = linalg.generic {{indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}}
      ins(%mp : {f_t}) outs(%eq : {x_t}) {{
  ^bb0(%i: f32, %o: i8):
{_quantize("i", "s", "qq")}
    linalg.yield %qq : i8
  }} -> {x_t}
  return %q : {x_t}
}}
"""


def test_max_pool_of_dequantized_int8_is_an_int8_max_pool():
    """The dispatch runs on the NPU as an int8 max pool of x padded with -128
    (compiler/requant_max_pool.py), equal to llvm-cpu's f32 form on every element; it stayed
    on host ('int8 arithmetic in f32 as 3 linalg ops ...')."""
    text = _max_pool_of_dequantized(16, 13)
    x = np.random.default_rng(2).integers(-128, 128, (1, 16, 13, 13)).astype(np.int8)
    ref = llvm_cpu(text, x)
    cm = torq.compile(text, remarks=io.StringIO(), flags=("--torq-no-cache",))
    pools = [d for d in cm.report.dispatches if "reduction" in d.ops or "pool" in d.ops]
    assert pools and all(d.executor == "torq" for d in pools), \
        [(d.executor, d.ops, d.reason) for d in cm.report.dispatches]
    np.testing.assert_array_equal(cm(x), ref)
