"""Sample CNN: conv+batchnorm+ReLU blocks, a residual add and a 1x1 conv head.

`python samples/cnn.py` exports it with iree-turbine, compiles it for Torq,
runs it on the simulator, compares with torch fp32 and prints the
per-dispatch table.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings

import numpy as np
import torch
import torch.nn as nn

# torch.export internals warn about their own deprecations on every export.
warnings.filterwarnings("ignore", category=FutureWarning, module="copyreg")


class ConvBnRelu(nn.Sequential):
    def __init__(self, cin: int, cout: int, stride: int = 1):
        super().__init__(nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False),
                         nn.BatchNorm2d(cout), nn.ReLU())


class SampleCNN(nn.Module):
    def __init__(self, classes: int = 10):
        super().__init__()
        self.stem = ConvBnRelu(3, 16)
        self.down = ConvBnRelu(16, 32, stride=2)
        self.res_a = ConvBnRelu(32, 32)
        self.res_b = nn.Sequential(nn.Conv2d(32, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32))
        self.head = nn.Conv2d(32, classes, 1)

    def forward(self, x):
        x = self.down(self.stem(x))
        x = torch.relu(x + self.res_b(self.res_a(x)))
        return self.head(x)


def make_model(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    model = SampleCNN()
    # Non-trivial batch-norm statistics so the folded scale/shift matter.
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.2, 0.2)
            m.running_var.uniform_(0.5, 1.5)
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.uniform_(-0.2, 0.2)
    return model.eval()


# DESIGN section 7: the bound a bf16 result must hold against torch fp32.
REL_L2_LIMIT = 1e-2
COSINE_LIMIT = 0.9999


def within_limits(rel_l2: float, cosine: float) -> bool:
    """Whether error figures (`error_figures`) hold the bf16 bound."""
    return rel_l2 <= REL_L2_LIMIT and cosine >= COSINE_LIMIT


def error_figures(got: np.ndarray, ref: np.ndarray) -> tuple[float, float]:
    got = got.astype(np.float64).ravel()
    ref = ref.astype(np.float64).ravel()
    rel_l2 = float(np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-30))
    cosine = float(got @ ref / max(np.linalg.norm(got) * np.linalg.norm(ref), 1e-30))
    return rel_l2, cosine


def main(argv=None) -> int:
    import torq
    from torq.report import print_dispatch_table

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hw", default="SL2610", help="Torq hardware, e.g. SL2610:lram_kb=64")
    p.add_argument("--size", type=int, default=32, help="input height and width")
    args = p.parse_args(argv)

    model = make_model()
    x = torch.randn(1, 3, args.size, args.size, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref = model(x).numpy()
    t0 = time.time()
    cm = torq.compile(model, x, hw=args.hw)
    t1 = time.time()
    y = cm(x.numpy())
    t2 = time.time()
    rel_l2, cosine = error_figures(y, ref)
    print(f"SampleCNN {tuple(x.shape)} on Torq {args.hw}: compile {t1 - t0:.1f} s, run {t2 - t1:.1f} s")
    print_dispatch_table(cm.report, cm.last_stats)
    print(f"vs torch fp32: relative L2 error {rel_l2:.2e} (limit {REL_L2_LIMIT:g}), cosine {cosine:.6f} "
          f"(limit {COSINE_LIMIT})")
    ok = within_limits(rel_l2, cosine)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
