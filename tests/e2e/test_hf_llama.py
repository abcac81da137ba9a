"""A Hugging Face `transformers` Llama (LlamaForCausalLM, a tiny random configuration) exported
through iree-turbine compiles for Torq and runs on the simulator (issue 12).

As a user exports it, transformers' mask utilities put ops in the graph IREE cannot
legalize (`torch.aten.diff` finding packed sequences, an i1 scalar literal): the compile
error is IREE's own diagnostic at the transformers source line. The recipe (README,
"Hugging Face Llama"): pass a 4-D additive causal mask, which transformers uses as is.
Then every dispatch of the forward pass runs on the NPU (the embedding as a gather DMA,
rotate_half as boxes) and the logits match torch fp32 within the bf16 bounds.
"""

from __future__ import annotations

import io
import sys
import types

import pytest
import torch
from torch_reference import within_bf16_limits  # noqa: E402

import torq

# transformers imports torchvision when installed; its PyPI wheel's C++ ops do not load with the
# CPU torch (README), and the model definitions need none of them.
sys.modules.setdefault("torchvision._meta_registrations", types.ModuleType("torchvision._meta_registrations"))
transformers = pytest.importorskip("transformers")

T = 8


class CausalLM(torch.nn.Module):
    """input_ids -> logits; with `mask`, the 4-D additive causal mask made here (the recipe)."""

    def __init__(self, model, mask: bool):
        super().__init__()
        self.model, self.mask = model, mask

    def forward(self, ids):
        if not self.mask:
            return self.model(input_ids=ids, use_cache=False).logits
        t = ids.shape[1]
        causal = torch.triu(torch.full((t, t), -1e9), diagonal=1)[None, None]
        return self.model(input_ids=ids, attention_mask=causal, use_cache=False).logits


@pytest.fixture(scope="module")
def llama():
    cfg = transformers.LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(cfg).eval()


def _export(model):
    import iree.turbine.aot as aot

    ids = torch.randint(0, 256, (1, T), generator=torch.Generator().manual_seed(1))
    return aot.export(model, ids), ids


def test_as_exported_the_error_is_irees_at_the_transformers_line(llama):
    exported, _ = _export(CausalLM(llama, mask=False))
    with pytest.raises(torq.TorqCompileError) as e:
        torq.compile(exported, remarks=None)
    assert "IREE failed before dispatch creation" in str(e.value)
    assert "masking_utils.py:" in str(e.value) and "torch.aten.diff" in str(e.value)


def test_with_a_4d_mask_it_runs_on_the_npu_and_matches_torch(llama):
    model = CausalLM(llama, mask=True)
    exported, ids = _export(model)
    cm = torq.compile(exported, remarks=io.StringIO())
    with torch.no_grad():
        ref = model(ids).numpy()
    assert within_bf16_limits(cm(ids.numpy()), ref)
    assert cm.report.npu_mac_share == 1.0
    # every dispatch of the forward pass, the embedding and rotate_half included; only the
    # initializers IREE hoists out of the model's constant tables (the rotary embedding's, the
    # SDPA mask's) run on the host, once at load (no weight is transposed: compiler/torch_linear.py)
    host = [d.name for d in cm.report.dispatches if d.executor == "host" and not d.name.startswith("initializer_")]
    assert not host, host
