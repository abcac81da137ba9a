#!/usr/bin/env python3
"""Models quantized dynamically (each Linear's or conv's input quantized when the model runs), by
onnxruntime's quantize_dynamic (its recipe for transformers), torch's PT2E flow in its dynamic
configuration and torchao's quantize_ (int8 dynamic activations), on Torq, one table.

    nice -n 10 .venv/bin/python build_tools/benchmarks/dynamic_architectures.py   # -> RESULTS-dynamic-architectures.md

Per model (a transformers config at its published widths, random seeded weights, nothing
downloaded; input_ids 1 x 128), in its own child process: `torch.onnx.export` of the last
hidden state, `onnxruntime.quantization.quantize_dynamic` (QInt8 weights; each MatMul's input
quantized when the model runs), then `torq.compile` of the quantized file (seconds,
in-process, cold: an empty cache directory, in which a dispatch that repeats another's
compile compiles once, as in a user's first compile; one worker per core) beside `iree-compile` llvm-cpu on the same
imported model, and their ratio; the model compiled again with --torq-keep-f32 (its float
ops on the host in f32). Columns: the NPU's share of the MACs and the dispatches on the NPU /
host, for both compiles (each host dispatch's reason below the table); the output's relative
L2 error vs IREE llvm-cpu on the quantized model as written, for both (0 is bit-identical);
llvm-cpu vs onnxruntime and vs torch fp32 on the float model (the error of the quantization
itself); the simulated cycles of the default compile. A `torchvision/` row is a torchvision
CNN (1 x 3 x 224 x 224) through quantize_dynamic, which makes its convs ConvIntegers
(EfficientNet-B0: SiLU and squeeze-excite; its dynamic quantization is the least accurate
here, see its llvm-cpu column).

A `pt2e/` row is the same model (or timm's DeiT-Tiny, 1 x 3 x 224 x 224) quantized by torchao's
PT2E flow instead: strict `torch.export`, `prepare_pt2e` with X86InductorQuantizer's dynamic
config (uint8 activations, per-channel int8 weights), one calibration call, `convert_pt2e`,
`iree.turbine.aot.export`. IREE cannot import its choose_qparams ops, so its llvm-cpu
reference (and the iree-compile time) is the module after compiler/torch_dynamic_quant.py's
rewrite, the one torq-compile makes first; "the quantizer's runtime" is torch's converted
model run eagerly. (GPT-2's projections are transformers' Conv1D modules, which the quantizer
leaves float: no pt2e/gpt2 row.) A `torchao/` row is quantized by torchao's `quantize_` with
`Int8DynamicActivationInt8WeightConfig` (per-token symmetric int8 activations, per-channel
int8 weights) and exported as is; its reference is the module after
compiler/torchao_quant.py's rewrite, and its runtime torchao's quantized model run eagerly.
"""

from __future__ import annotations

import io
import os
import sys
import tempfile
import time
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import rows_markdown, table_main  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = ["bert-base", "distilbert-base", "gpt2", "pt2e/bert-base", "pt2e/distilbert-base",
          "pt2e/timm/deit_tiny_patch16_224", "torchao/bert-base", "torchao/distilbert-base",
          "torchvision/resnet18", "torchvision/mobilenet_v2", "torchvision/efficientnet_b0"]
COLUMNS = ["model", "torq-compile s", "llvm-cpu compile s", "ratio", "NPU share of MACs", "dispatches torq/host",
           "rel L2 vs llvm-cpu", "--torq-keep-f32: NPU share, torq/host, rel L2 vs llvm-cpu",
           "llvm-cpu vs the quantizer's runtime (onnxruntime / torch)", "llvm-cpu vs torch fp32", "simulated cycles"]
TOKENS = 128


def _model(name: str):
    """(the transformers model returning its last hidden state, input_ids) for `name` (a timm or
    torchvision model and its image)."""
    import torch

    sys.modules.setdefault("torchvision._meta_registrations", types.ModuleType("torchvision._meta_registrations"))
    import transformers as tf

    torch.manual_seed(0)
    if name.startswith("timm/"):
        import timm

        return timm.create_model(name[len("timm/"):], pretrained=False).eval(), torch.randn(1, 3, 224, 224)
    if name.startswith("torchvision/"):
        import torchvision

        return getattr(torchvision.models, name[len("torchvision/"):])().eval(), torch.randn(1, 3, 224, 224)
    # (BERT's pooler output is unused here, which torchao's PT2E annotator fails on; without
    # the pooler the encoder's random weights differ from the RESULTS run before 1cb1f46)
    model = {"bert-base": lambda: tf.BertModel(tf.BertConfig(), add_pooling_layer=False),
             "distilbert-base": lambda: tf.DistilBertModel(tf.DistilBertConfig()),
             "gpt2": lambda: tf.GPT2Model(tf.GPT2Config())}[name]().eval()

    class LastHidden(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, ids):
            return self.model(input_ids=ids).last_hidden_state

    return LastHidden().eval(), torch.randint(0, 1000, (1, TOKENS))


def _quantized(name: str, directory: str):
    """(the quantize_dynamic ONNX file, the input as numpy, torch fp32's output)."""
    import onnxruntime.quantization as ort_quant
    import torch

    model, ids = _model(name)
    fp32, q = os.path.join(directory, "fp32.onnx"), os.path.join(directory, "dynamic.onnx")
    with torch.no_grad():
        torch.onnx.export(model, (ids,), fp32, dynamo=False, input_names=["x"], output_names=["y"], opset_version=17)
        reference = model(ids).numpy()
    ort_quant.quantize_dynamic(fp32, q, weight_type=ort_quant.QuantType.QInt8)
    return q, ids.numpy(), reference


def _pt2e_quantized(name: str):
    """(the PT2E dynamic model as MLIR text, its input as numpy, torch fp32's output, the
    converted model's output)."""
    import torch
    from iree.turbine import aot
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
    from torchao.quantization.pt2e.quantizer import x86_inductor_quantizer as xiq

    model, x = _model(name)
    quantizer = xiq.X86InductorQuantizer().set_global(xiq.get_default_x86_inductor_quantization_config(is_dynamic=True))
    prepared = prepare_pt2e(torch.export.export(model, (x,), strict=True).module(), quantizer)
    prepared(x)
    converted = convert_pt2e(prepared)
    with torch.no_grad():
        reference, quantized = model(x).numpy(), converted(x).numpy()
    return str(aot.export(converted, x).mlir_module), x.numpy(), reference, quantized


def _torchao_quantized(name: str):
    """As `_pt2e_quantized`, quantized by torchao's quantize_ (int8 dynamic activations)."""
    import torch
    from iree.turbine import aot
    from torchao.quantization import Int8DynamicActivationInt8WeightConfig, quantize_

    model, x = _model(name)
    with torch.no_grad():
        reference = model(x).numpy()
        quantize_(model, Int8DynamicActivationInt8WeightConfig())
        quantized = model(x).numpy()
    return str(aot.export(model, x).mlir_module), x.numpy(), reference, quantized


def _reference(name: str, tmp: str):
    """(what torq-compile reads, the input, torch fp32's output, the quantizer's runtime's
    output, the module llvm-cpu compiles, its function name)."""
    if name.startswith("pt2e/"):
        from torq.compiler.torch_dynamic_quant import rewrite_dynamic_quantization
        from torq.compiler.torch_ir import rewritten_text
        from torq.compiler.torch_qdq import rewrite_uint8_activations

        text, x, reference, quantized = _pt2e_quantized(name[len("pt2e/"):])
        both = lambda m: (rewrite_dynamic_quantization(m), rewrite_uint8_activations(m))  # noqa: E731
        return text, x, reference, quantized, rewritten_text(text, both), "main"
    if name.startswith("torchao/"):
        from torq.compiler.torch_ir import rewritten_text
        from torq.compiler.torchao_quant import rewrite_torchao_quantization

        text, x, reference, quantized = _torchao_quantized(name[len("torchao/"):])
        return text, x, reference, quantized, rewritten_text(text, rewrite_torchao_quantization), "main"
    import onnxruntime as ort

    from torq.compiler.onnx_import import import_onnx

    path, ids, reference = _quantized(name, tmp)
    onnxrt = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": ids})[0]
    return path, ids, reference, onnxrt, import_onnx(open(path, "rb").read(), path), "main_graph"


def measure(spec: dict) -> dict:
    """One row (in the worker process): spec {"model": a name of MODELS}."""
    import numpy as np
    from run import llvm_cpu_function

    import torq

    rel = lambda a, b: float(np.linalg.norm(a - b) / np.linalg.norm(b))  # noqa: E731
    with tempfile.TemporaryDirectory(prefix="torq-dynamic-") as tmp:
        source, ids, reference, runtime, cpu_module, function = _reference(spec["model"], tmp)
        llvm_s, cpu_fn = llvm_cpu_function(cpu_module, function=function)
        cpu = np.asarray(cpu_fn(ids))
        row: dict = {"llvm_s": llvm_s, "cpu_vs_runtime": rel(cpu, runtime), "cpu_vs_torch": rel(cpu, reference)}
        for key, flags in (("", ()), ("f32_", ("--torq-keep-f32",))):
            t0 = time.perf_counter()
            cache = f"--torq-cache-dir={os.path.join(tmp, 'cache-' + (key or 'default'))}"  # empty: cold
            cm = torq.compile(source, remarks=io.StringIO(), flags=(cache, *flags))
            seconds = time.perf_counter() - t0
            y = np.asarray(cm(ids))
            host = [d for d in cm.report.dispatches if d.executor != "torq"]
            row |= {f"{key}compile_s": seconds, f"{key}share": cm.report.npu_mac_share, f"{key}host": len(host),
                    f"{key}torq": len(cm.report.dispatches) - len(host), f"{key}rel_cpu": rel(y, cpu)}
            if not key:
                row["reasons"] = sorted({" ".join(d.reason.split()) for d in host})
                row["cycles"] = sum(s["cycles"] for s in cm.last_stats if s["executor"] == "torq")
    return row


def markdown(rows: list[dict]) -> list[str]:
    return rows_markdown(rows, COLUMNS, lambda r: [
        f"{r['compile_s']:.1f}", f"{r['llvm_s']:.1f}", f"{r['compile_s'] / r['llvm_s']:.2f}×",
        f"{100 * r['share']:.2f}%", f"{r['torq']}/{r['host']}", f"{r['rel_cpu']:.2e}",
        f"{100 * r['f32_share']:.2f}%, {r['f32_torq']}/{r['f32_host']}, {r['f32_rel_cpu']:.2e}",
        f"{r['cpu_vs_runtime']:.2e}", f"{r['cpu_vs_torch']:.2e}", f"{r['cycles']:,}"])


def main(argv=None) -> int:
    return table_main(argv, __file__, measure, markdown, doc=__doc__, models=MODELS, kind="model",
                      timeout=1800, output=os.path.join(HERE, "RESULTS-dynamic-architectures.md"),
                      title="Models quantized dynamically by onnxruntime quantize_dynamic, torch PT2E and "
                            "torchao quantize_ (random weights) on Torq",
                      spec=lambda name: (f"{name} {'1x3x224x224' if 'timm/' in name or 'torchvision/' in name else f'1x{TOKENS}'}",
                                         {"model": name}), needs="transformers")


if __name__ == "__main__":
    sys.exit(main())
