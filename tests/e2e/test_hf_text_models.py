"""Hugging Face GPT-2 and BERT (tiny random configurations), exported through iree-turbine as
users do, compile for Torq and match torch fp32 within the bf16 bounds.

Every dispatch runs on the NPU: the attention masks the models build from positions (an
index-only generic, folded at compile time into a constant the NPU copies:
torq-fold-index-constants) and the embedding lookup IREE fuses with the position (and
token type) embedding add (the add reads a gathered view: torq-split-fused-gathers)
included.
"""

from __future__ import annotations

import io
import sys
import types

import pytest
import torch
from torch_reference import within_bf16_limits

import torq

sys.modules.setdefault("torchvision._meta_registrations", types.ModuleType("torchvision._meta_registrations"))
transformers = pytest.importorskip("transformers")


class LastHidden(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids):
        return self.model(input_ids=ids).last_hidden_state


def _model(name: str):
    torch.manual_seed(0)
    if name == "gpt2":
        cfg = transformers.GPT2Config(vocab_size=1000, n_embd=128, n_layer=2, n_head=2)
        return transformers.GPT2Model(cfg).eval()
    cfg = transformers.BertConfig(vocab_size=1000, hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                                  intermediate_size=256)
    return transformers.BertModel(cfg).eval()


@pytest.mark.parametrize("name", ["gpt2", "bert"])
def test_runs_on_the_npu(name):
    import iree.turbine.aot as aot

    model = LastHidden(_model(name))
    ids = torch.randint(0, 1000, (1, 16), generator=torch.Generator().manual_seed(1))
    cm = torq.compile(aot.export(model, ids), remarks=io.StringIO())
    assert cm.report.npu_mac_share == 1.0
    host = [(d.name, d.reason) for d in cm.report.dispatches if d.executor != "torq"]
    assert not host, host
    with torch.no_grad():
        assert within_bf16_limits(cm(ids.numpy()), model(ids).numpy())
