#!/usr/bin/env python3
"""Real architectures quantized with torch's PT2E flow, as torch users quantize them: torchvision
classifiers (and timm/<name> models) through torchao's X86InductorQuantizer, compiled for Torq
and run on the simulator, one table.

    .venv/bin/pip install timm torchvision==0.28.0 --no-deps   # not test dependencies
    nice -n 10 .venv/bin/python build_tools/benchmarks/pt2e_architectures.py   # -> RESULTS-pt2e-architectures.md

Per model (random seeded weights, batch-norm statistics randomised as in
int8_architectures.py, nothing downloaded), in its own child process: `torch.export`
(strict: torchao's annotator fails on torchvision's ResNet under non-strict export, which
groups every call of the one `relu` module a block reuses into one partition), torchao
`prepare_pt2e` with X86InductorQuantizer's default config (uint8 activations, per-channel int8
weights), 4 random calibration inputs, `convert_pt2e`, `iree.turbine.aot.export`; then
`torq.compile` (seconds, in-process, cold: an empty cache directory, as a user's first
compile, in which a dispatch that repeats another's compile compiles once; one worker per core) beside `iree-compile`
llvm-cpu on the same MLIR, and their ratio; the model compiled again with
--torq-check-dispatches (each NPU dispatch beside its own llvm-cpu copy: not what a user
compiles, so not in the ratio) and run once on the simulator. Columns: the NPU's share of the MACs; dispatches on the NPU / host (each host
dispatch's reason below the table); the output's relative L2 error vs IREE llvm-cpu on the same
exported MLIR and vs the converted torch model, beside llvm-cpu vs that torch model; per layer,
the int8 elements off llvm-cpu's on the same inputs and the most output steps (DESIGN §7:
within one step); the simulated cycles.
"""

from __future__ import annotations

import io
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import rows_markdown, table_main  # noqa: E402
from int8_architectures import _model, _size  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = ["resnet18", "resnet50", "mobilenet_v2", "mobilenet_v3_large", "efficientnet_b0", "regnet_y_400mf", "convnext_tiny",
          "googlenet", "timm/deit_tiny_patch16_224", "timm/mobilevit_xxs"]
COLUMNS = ["model", "torq-compile s", "llvm-cpu compile s", "ratio", "NPU share of MACs", "dispatches torq/host",
           "rel L2 vs llvm-cpu", "rel L2 vs torch", "llvm-cpu vs torch", "per layer vs llvm-cpu, same inputs",
           "simulated cycles"]


def quantized_mlir(name: str):
    """(the PT2E-quantized model exported by iree-turbine as MLIR text, its input, the converted
    torch model's output)."""
    import torch
    from iree.turbine import aot
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
    from torchao.quantization.pt2e.quantizer import x86_inductor_quantizer as xiq

    model, x = _model(name)
    graph = torch.export.export(model, (x,), strict=True).module()
    quantizer = xiq.X86InductorQuantizer().set_global(xiq.get_default_x86_inductor_quantization_config())
    prepared = prepare_pt2e(graph, quantizer)
    g = torch.Generator().manual_seed(2)
    for _ in range(4):  # calibration
        prepared(torch.randn(x.shape, generator=g))
    converted = convert_pt2e(prepared)
    with torch.no_grad():
        reference = converted(x).numpy()
    return str(aot.export(converted, x).mlir_module), x.numpy(), reference


def measure(spec: dict) -> dict:
    """One row (in the worker process): spec {"model": torchvision name or timm/<name>}."""
    import numpy as np
    from run import llvm_cpu_function

    import torq

    text, x, reference = quantized_mlir(spec["model"])
    llvm_s, cpu_fn = llvm_cpu_function(text)
    cpu = np.asarray(cpu_fn(x))
    with tempfile.TemporaryDirectory(prefix="torq-pt2e-cache-") as cache:
        t0 = time.perf_counter()
        torq.compile(text, remarks=io.StringIO(), flags=(f"--torq-cache-dir={cache}",))
        row: dict = {"compile_s": time.perf_counter() - t0, "llvm_s": llvm_s}
    cm = torq.compile(text, remarks=io.StringIO(), flags=("--torq-no-cache", "--torq-check-dispatches"))
    y = np.asarray(cm(x))
    rel = lambda a, b: float(np.linalg.norm(a - b) / np.linalg.norm(b))  # noqa: E731
    checks = [c for c in cm.last_checks if c["max_steps"] is not None]
    host = [d for d in cm.report.dispatches if d.executor != "torq"]
    row.update(share=cm.report.npu_mac_share, torq=len(cm.report.dispatches) - len(host), host=len(host),
               reasons=sorted({" ".join(d.reason.split()) for d in host}), rel_cpu=rel(y, cpu),
               rel_torch=rel(y, reference), cpu_vs_torch=rel(cpu, reference), layers=len(checks),
               layer_off=sum(c["differing"] for c in checks), layer_elements=sum(c["elements"] for c in checks),
               layer_steps=max((c["max_steps"] for c in checks), default=0),
               cycles=sum(s["cycles"] for s in cm.last_stats if s["executor"] == "torq"))
    return row


def markdown(rows: list[dict]) -> list[str]:
    return rows_markdown(rows, COLUMNS, lambda r: [
        f"{r['compile_s']:.1f}", f"{r['llvm_s']:.1f}", f"{r['compile_s'] / r['llvm_s']:.2f}×", f"{100 * r['share']:.2f}%", f"{r['torq']}/{r['host']}",
        f"{r['rel_cpu']:.2e}", f"{r['rel_torch']:.2e}", f"{r['cpu_vs_torch']:.2e}",
        f"{r['layers']} int8: {r['layer_off']:,} of {r['layer_elements']:,} off, ≤ {r['layer_steps']} step",
        f"{r['cycles']:,}"])


def main(argv=None) -> int:
    return table_main(argv, __file__, measure, markdown, doc=__doc__, models=MODELS, kind="torchvision or timm/",
                      timeout=1800, output=os.path.join(HERE, "RESULTS-pt2e-architectures.md"),
                      title="Real architectures quantized by torch's PT2E flow (torchao X86InductorQuantizer, "
                            "random weights) on Torq",
                      spec=lambda name: (f"{name} 1x3x{_size(name)}x{_size(name)}", {"model": name}))


if __name__ == "__main__":
    sys.exit(main())
