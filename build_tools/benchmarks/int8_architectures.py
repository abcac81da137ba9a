#!/usr/bin/env python3
"""Real architectures nobody here wrote, quantized as users quantize them (issue 11): torchvision
classifiers and timm vision transformers / MetaFormers (named timm/<name>) through onnxruntime
QDQ, compiled for Torq and run on the simulator, one table.

    .venv/bin/pip install onnxruntime timm torchvision==0.28.0 --no-deps   # not test dependencies
    nice -n 10 .venv/bin/python build_tools/benchmarks/int8_architectures.py   # -> RESULTS-int8-architectures.md

timm's LeViT is not in the default list: at 224x224 IREE llvm-cpu, the reference, rejects it
(its stack-allocation limit).

Per model (random seeded weights, batch-norm statistics randomised, nothing downloaded),
in its own child process: `torch.onnx.export`, onnxruntime `quantize_static`
(samples/ort_int8.py: QDQ, per-channel int8 weights, int8 activations, 4 random
calibration inputs), `torq.compile` (seconds, in-process, caches off, with
--torq-check-dispatches: each NPU dispatch's result is compared at run time with its own
llvm-cpu copy fed the same inputs), one simulator run. Columns: the NPU's share of the
MACs; dispatches on the NPU / host (each host dispatch's reason below the table); the
dequantized output's relative L2 error vs IREE llvm-cpu on the same imported MLIR and vs
onnxruntime, beside llvm-cpu vs onnxruntime; llvm-cpu's own output with one input element
moved by one quantization step (the largest of five seeded elements: the model's
sensitivity, the floor of any difference between two int8 implementations that round one
value differently); per layer, the int8
elements off and the most output steps (DESIGN §7: within one step); a rescale's level one off
carried through a steeper step: the channels refitted so that it is not more than one output
step at the result, and the accumulator values where no rescale avoids it (counted exactly by
the compiler over every reachable value, and the most steps there; compiler/requant_compose.py);
the simulated cycles.
Output levels: the distinct values of llvm-cpu's output (a handful would make the error
columns meaningless: random weights can collapse a deep net's logits onto one level).
"""

from __future__ import annotations

import io
import os
import sys
import tempfile
import time
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "samples"))
from common import (  # noqa: E402
    composition,
    composition_text,
    rows_markdown,
    table_main,
)

# torchvision's PyPI wheel's C++ ops are built for the CUDA torch: its meta registrations
# fail on ours, and the model code needs none of them (README).
sys.modules.setdefault("torchvision._meta_registrations", types.ModuleType("torchvision._meta_registrations"))
HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = ["efficientnet_b0", "regnet_y_400mf", "shufflenet_v2_x1_0", "mnasnet1_0", "timm/ghostnet_100",
          "timm/convformer_s18", "timm/mobilevit_xxs", "timm/coat_lite_tiny", "timm/efficientvit_m0",
          "timm/tiny_vit_5m_224", "timm/edgenext_xx_small"]
COLUMNS = ["model", "torq-compile s", "NPU share of MACs", "dispatches torq/host", "output levels", "rel L2 vs llvm-cpu",
           "rel L2 vs onnxruntime", "llvm-cpu vs onnxruntime", "llvm-cpu, one input step moved",
           "per layer vs llvm-cpu, same inputs", "level one off, carried", "simulated cycles"]


def _size(name: str) -> int:
    """The input's height and width: timm's default for a timm/<name> model, else 224."""
    if not name.startswith("timm/"):
        return 224
    import timm

    return timm.get_pretrained_cfg(name[len("timm/"):]).input_size[-1]


def _model(name: str):
    """(the model, its input): torchvision `name`, or timm's for timm/<name>."""
    import torch

    torch.manual_seed(0)
    if name.startswith("timm/"):
        import timm

        model = timm.create_model(name[len("timm/"):], pretrained=False).eval()
    else:
        import torchvision

        model = getattr(torchvision.models, name)(weights=None).eval()
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for m in model.modules():  # non-trivial batch norms, as samples/models.py's: signals stay alive
            if isinstance(m, (torch.nn.BatchNorm1d, torch.nn.BatchNorm2d)):
                m.running_mean.uniform_(-0.1, 0.1, generator=g)
                m.running_var.uniform_(0.5, 1.5, generator=g)
                m.weight.uniform_(0.5, 1.5, generator=g)
                m.bias.uniform_(-0.1, 0.1, generator=g)
    return model, torch.randn(1, 3, _size(name), _size(name), generator=torch.Generator().manual_seed(1))


def measure(spec: dict) -> dict:
    """One row (in the worker process): spec {"model": torchvision name or timm/<name>}."""
    from pathlib import Path

    import numpy as np
    from ort_int8 import int8_error_figures, one_input_step_moved, onnxruntime_output, quantize_with_ort
    from run import llvm_cpu_function

    import torq
    from torq.compiler.onnx_import import import_onnx

    model, x = _model(spec["model"])
    xs = x.numpy()
    with tempfile.TemporaryDirectory(prefix="torq-int8-arch-") as tmp:
        path = quantize_with_ort(model, x, tmp)
        _, cpu_fn = llvm_cpu_function(import_onnx(Path(path).read_bytes(), Path(path).name), function="main_graph")
        cpu, onnxrt = np.asarray(cpu_fn(xs)), onnxruntime_output(path, xs)
        # The largest of five single-element moves: one seeded element can land where no
        # quantized value changes.
        moved = [np.asarray(cpu_fn(one_input_step_moved(Path(path), xs, seed))) for seed in range(5)]
        t0 = time.perf_counter()
        cm = torq.compile(str(path), remarks=io.StringIO(), flags=("--torq-no-cache", "--torq-check-dispatches"))
        row: dict = {"compile_s": time.perf_counter() - t0}
    y = np.asarray(cm(xs))
    checks = [c for c in cm.last_checks if c["max_steps"] is not None]
    stats = [s for s in cm.last_stats if s["executor"] == "torq"]
    host = [d for d in cm.report.dispatches if d.executor != "torq"]
    row.update(share=cm.report.npu_mac_share, torq=len(cm.report.dispatches) - len(host), host=len(host),
               reasons=sorted({" ".join(d.reason.split()) for d in host}),
               layers=len(checks), layer_off=sum(c["differing"] for c in checks),
               layer_elements=sum(c["elements"] for c in checks),
               layer_steps=max((c["max_steps"] for c in checks), default=0),
               one_step=max(int8_error_figures(m, cpu, onnxrt)["rel_l2_cpu"] for m in moved),
               levels=len(np.unique(cpu)), cycles=sum(s["cycles"] for s in stats),
               composition=composition(cm.report.dispatches),
               **int8_error_figures(y, cpu, onnxrt))
    return row


def markdown(rows: list[dict]) -> list[str]:
    return rows_markdown(rows, COLUMNS, lambda r: [
        f"{r['compile_s']:.1f}", f"{100 * r['share']:.2f}%", f"{r['torq']}/{r['host']}", str(r["levels"]),
        f"{r['rel_l2_cpu']:.2e}", f"{r['rel_l2_ort']:.2e}", f"{r['cpu_vs_ort']:.2e}", f"{r['one_step']:.2e}",
        f"{r['layers']} int8: {r['layer_off']:,} of {r['layer_elements']:,} off, ≤ {r['layer_steps']} step",
        composition_text(r["composition"]), f"{r['cycles']:,}"])


def main(argv=None) -> int:
    return table_main(argv, __file__, measure, markdown, doc=__doc__, models=MODELS, kind="torchvision or timm/",
                      timeout=1800, output=os.path.join(HERE, "RESULTS-int8-architectures.md"),
                      title="Real architectures quantized by onnxruntime (torchvision and timm, random weights) on Torq",
                      spec=lambda name: (f"{name} 1x3x{_size(name)}x{_size(name)}", {"model": name}))


if __name__ == "__main__":
    sys.exit(main())
