#!/usr/bin/env python3
"""Real architectures nobody here wrote: timm's mobile vision transformers and hybrids
(issue 15 item 6), compiled for Torq and run on the simulator against torch, one table.

    .venv/bin/pip install timm        # not a test dependency
    nice -n 10 .venv/bin/python build_tools/benchmarks/architectures.py   # -> RESULTS-architectures.md

Per model (random seeded weights, `timm.create_model(pretrained=False)`, nothing
downloaded), in its own child process: export with iree-turbine, `torq.compile`
(seconds, in-process, caches off), one simulator run; the NPU's share of the MACs,
dispatches on the NPU / host (each host dispatch's reason below the table), the
output's relative L2 error vs torch fp32 beside torch's own bf16 run's
(`model.to(torch.bfloat16)`: the error bf16 itself brings with random weights), and
the simulated figures (cycles, efficiency = roofline / cycles, DDR traffic =
DMA bytes / compulsory bytes, as in RESULTS.md). A model that fails is a row with
its error. The worker processes are common.py's, as run.py's.
"""

from __future__ import annotations

import io
import os
import sys
import time
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import RUN_COLUMNS, rows_markdown, run_against_torch, run_cells, table_main  # noqa: E402

# timm imports torchvision, whose PyPI wheel's C++ ops are built for the CUDA torch: its
# meta registrations fail on ours, and the model code needs none of them (README).
sys.modules.setdefault("torchvision._meta_registrations", types.ModuleType("torchvision._meta_registrations"))
HERE = os.path.dirname(os.path.abspath(__file__))
# name -> input height/width (timm's default for the model)
MODELS = {"mobilevit_xxs": 256, "mobilevitv2_050": 256, "efficientformer_l1": 224, "poolformer_s12": 224,
          "levit_128s": 224, "edgenext_xx_small": 256, "repvit_m1": 224, "fastvit_t8": 256}
COLUMNS = ["model", "torq-compile s", *RUN_COLUMNS]


def measure(spec: dict) -> dict:
    """One row (in the worker process): spec {"model": timm name, "size": height/width}."""
    import iree.turbine.aot as aot
    import timm
    import torch

    import torq

    torch.manual_seed(0)
    model = timm.create_model(spec["model"], pretrained=False).eval()
    size = spec["size"]
    x = torch.randn(1, 3, size, size, generator=torch.Generator().manual_seed(1))
    exported = aot.export(model, x)
    t0 = time.perf_counter()
    cm = torq.compile(exported, remarks=io.StringIO(), flags=("--torq-no-cache",))
    row = {"compile_s": time.perf_counter() - t0}
    row.update(run_against_torch(cm, model, x))
    return row


def markdown(rows: list[dict]) -> list[str]:
    return rows_markdown(rows, COLUMNS, lambda r: [f"{r['compile_s']:.1f}", *run_cells(r)])


def main(argv=None) -> int:
    return table_main(argv, __file__, measure, markdown, doc=__doc__, models=MODELS, kind="timm", timeout=900,
                      output=os.path.join(HERE, "RESULTS-architectures.md"),
                      title="Real architectures (timm, random weights) on Torq", needs="timm",
                      spec=lambda name: (f"{name} {MODELS.get(name, 224)}x{MODELS.get(name, 224)}",
                                         {"model": name, "size": MODELS.get(name, 224)}))


if __name__ == "__main__":
    sys.exit(main())
