"""Elementwise generics with several results (torq-split-elementwise-results) run on the NPU.

DenseNet's transition: the average pooling's mean is both a part of the next
concatenation and the input of the next layer's batch norm + ReLU, and IREE
fuses both into one two-result generic after the window sum. Before the split
that dispatch stayed on the host ("a 2x2 window sum not divided by the window
size 4"); the reference is torch fp32.

RepViT's distillation head: the pooled features are a result and the input of a batch
norm in the same dispatch, after the pooling's tile loop. The NSS program stores them
and reads them back from the output; the program validator refused any DmaIn of an
output ("DmaIn on tensor 4 of kind output": RepViT-M1 and EdgeNeXt did not compile)
until a read-back of what earlier DmaOuts wrote was allowed.
"""

import torch
import torch.nn as nn
from torch_reference import run_against_torch


class Transition(nn.Module):
    def __init__(self, c=32, growth=8):
        super().__init__()
        self.bn1, self.conv1 = nn.BatchNorm2d(c), nn.Conv2d(c, c // 2, 1, bias=False)
        self.pool = nn.AvgPool2d(2, 2)
        self.bn2, self.conv2 = nn.BatchNorm2d(c // 2), nn.Conv2d(c // 2, growth, 3, padding=1, bias=False)
        for bn in (self.bn1, self.bn2):
            bn.running_mean.uniform_(-0.1, 0.1)
            bn.running_var.uniform_(0.5, 1.5)

    def forward(self, x):
        p = self.pool(self.conv1(torch.relu(self.bn1(x))))
        return torch.cat([p, self.conv2(torch.relu(self.bn2(p)))], 1)


class NormAndGate(nn.Module):
    """A batch norm's output and the hardsigmoid of it, both used (MobileNetV3-like)."""

    def __init__(self, c=16):
        super().__init__()
        self.conv, self.bn = nn.Conv2d(c, c, 1, bias=False), nn.BatchNorm2d(c)
        self.bn.running_mean.uniform_(-0.1, 0.1)
        self.bn.running_var.uniform_(0.5, 1.5)

    def forward(self, x):
        y = self.bn(self.conv(x))
        return torch.cat([y, nn.functional.hardsigmoid(y)], 1)


class PooledAndNormed(nn.Module):
    """The mean of a residual sum over the spatial dims, returned with a batch norm of it."""

    def __init__(self, c=384):
        super().__init__()
        self.bn = nn.BatchNorm1d(c)
        self.bn.running_mean.uniform_(-0.1, 0.1)
        self.bn.running_var.uniform_(0.5, 1.5)

    def forward(self, a, b):
        m = (a + 0.5 * b).mean(-1)
        return torch.cat([m, self.bn(m)], 1)


def test_densenet_transition_runs_on_the_npu():
    torch.manual_seed(0)
    run = run_against_torch(Transition(), torch.randn(1, 32, 16, 16))
    assert run.cm.report.npu_mac_share == 1.0


def test_two_results_of_one_chain_run_on_the_npu():
    torch.manual_seed(1)
    run_against_torch(NormAndGate(), torch.randn(1, 16, 8, 8))


def test_a_result_read_again_after_its_tile_loop():
    torch.manual_seed(2)
    a, b = torch.randn(1, 384, 49), torch.randn(1, 384, 49)
    run_against_torch(PooledAndNormed(), a, b)
