#!/usr/bin/env python3
"""The architectures issue 15 found falling off the NPU or compiling too slowly, measured
as they are now: torchvision DenseNet-121 and ViT-B/16 at 224x224, Hugging Face's Whisper
encoder (2 layers, 80 mel bins x 3000 frames) and a conv1d audio front end on the raw
waveform (samples/models.py WaveformFrontEnd, 1 s at 16 kHz), one table.

    .venv/bin/pip install transformers   # not a test dependency (torchvision: see README)
    nice -n 10 .venv/bin/python build_tools/benchmarks/hard_architectures.py   # -> RESULTS-hard-architectures.md

Per model (random seeded weights, nothing downloaded), in its own child process: export
with iree-turbine, a cold `torq.compile` (an empty cache directory, one worker per core)
and iree-compile llvm-cpu of the same MLIR (seconds, ratio), one simulator run, and, as
in RESULTS-architectures.md, the NPU's share of the MACs, dispatches on the NPU / host
(each host dispatch's reason below the table), the output's relative L2 error vs torch
fp32 beside torch's own bf16 run's, and the simulated figures (cycles, efficiency =
roofline / cycles, DDR traffic = DMA bytes / compulsory bytes). "Before" is what the
issue measured.
"""

from __future__ import annotations

import io
import os
import sys
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (  # noqa: E402
    RUN_COLUMNS,
    compile_cold_and_warm,
    llvm_cpu_compile,
    rows_markdown,
    run_against_torch,
    run_cells,
    table_main,
)

# torchvision's PyPI wheel's C++ ops are built for the CUDA torch (README).
sys.modules.setdefault("torchvision._meta_registrations", types.ModuleType("torchvision._meta_registrations"))
HERE = os.path.dirname(os.path.abspath(__file__))
# name -> (row label, what issue 15 measured)
MODELS = {
    "densenet121": ("torchvision DenseNet-121 1x3x224x224", "torq.compile did not finish in 15 minutes"),
    "vit_b_16": ("torchvision ViT-B/16 1x3x224x224", "compile 182 s, simulator 44 s, DDR traffic 1.52x compulsory"),
    "whisper_encoder": ("transformers Whisper encoder, 2 layers, 1x80x3000",
                        "torq-compile failed (conv1d on host, then llvm-cpu translation)"),
    "waveform_frontend": ("conv1d front end (1->64 k127 s64, GroupNorm, conv1d k7 s3, GELU), 1x1x16000",
                          "0.2% of MACs on the NPU"),
}


def build(name: str):
    """(model in eval mode, example input) of a MODELS name, random seeded weights."""
    import torch

    torch.manual_seed(0)
    if name in ("densenet121", "vit_b_16"):
        import torchvision

        model = getattr(torchvision.models, name)(weights=None).eval()
        with torch.no_grad():  # ViT's classifier starts at zero: every output would be 0
            for p in model.parameters():
                if p.dim() >= 2 and not p.any():
                    p.normal_(0.0, 0.02, generator=torch.Generator().manual_seed(2))
        return model, torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(1))
    if name == "whisper_encoder":
        return _whisper_encoder(), torch.randn(1, 80, 3000, generator=torch.Generator().manual_seed(1))
    from models import make_waveform_frontend

    return make_waveform_frontend()


def _whisper_encoder():
    import torch
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    cfg = WhisperConfig(num_mel_bins=80, encoder_layers=2, d_model=384, encoder_attention_heads=6,
                        encoder_ffn_dim=1536, max_source_positions=1500, attn_implementation="eager")

    class LastHiddenState(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = WhisperEncoder(cfg)

        def forward(self, x):
            return self.encoder(x).last_hidden_state

    return LastHiddenState().eval()


def measure(spec: dict) -> dict:
    """One row (in the worker process): spec {"model": a MODELS name}."""
    import iree.turbine.aot as aot

    model, x = build(spec["model"])
    exported = aot.export(model, x)
    cm, cold, _ = compile_cold_and_warm(exported, "SL2610", io.StringIO())
    iree_s, _ = llvm_cpu_compile(str(exported.mlir_module))
    return {"compile_s": cold, "iree_s": iree_s, "before": MODELS[spec["model"]][1],
            **run_against_torch(cm, model, x)}


COLUMNS = ["before (issue 15)", "torq-compile s", "iree-compile llvm-cpu s", "ratio", "simulator run s",
           *RUN_COLUMNS]


def markdown(rows: list[dict]) -> list[str]:
    return rows_markdown(rows, ["model"] + COLUMNS, lambda r: [
        r["before"], f"{r['compile_s']:.1f}", f"{r['iree_s']:.1f}", f"{r['compile_s'] / r['iree_s']:.2f}×",
        f"{r['run_s']:.1f}", *run_cells(r)])


def main(argv=None) -> int:
    return table_main(argv, __file__, measure, markdown, doc=__doc__, models=MODELS, kind="model", timeout=1800,
                      output=os.path.join(HERE, "RESULTS-hard-architectures.md"),
                      title="Issue 15's architectures on Torq, now", needs="transformers",
                      spec=lambda name: (MODELS[name][0], {"model": name}))


if __name__ == "__main__":
    sys.exit(main())
