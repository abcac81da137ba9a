"""Hugging Face decoders beside Llama (tiny random configurations, the 4-D mask recipe of
test_hf_llama.py), exported through iree-turbine, compile for Torq and match torch fp32
within the bf16 bounds.

- Mistral: every dispatch of the forward pass on the NPU.
- Phi (partial rotary: rotate_half on the first 8 of 16 head dims, the rest passed
  through): every dispatch on the NPU too. It failed to compile twice over before: the
  host copy that writes a finished box into an operand stored a rank-reduced value with
  operand-rank offsets but reduced sizes (IREE refused the module), and its second
  layer's dispatches, equal to the first's and so taken from the dispatch cache, lost
  their in-place operands. Then its rotated half (q[..., :8], a box that stops short of
  the input's end) stayed on the host until extraction read such a box as a slice.
- Qwen2: every dispatch on the NPU. IREE fuses its rotate_half into apply_rotary over
  collapsed dims (the half index as a quotient of the collapsed column, the head index
  recombined from a quotient and a remainder): 4 host dispatches until
  torq-unroll-index-dims folded such index arithmetic with the loop ranges and split
  the collapsed dim into its halves.
- GPT-NeoX: every dispatch on the NPU. IREE leaves its attention matmuls over two batch
  dims, one of extent 1, which the matmul pattern did not read (2 host dispatches, 97.6%
  of the MACs on the NPU) until a matmul role could hold two dims (letters A and B).
- StableLM (grouped-query attention, 4 query heads on 2 KV heads, partial rotary): every
  dispatch on the NPU. IREE writes K repeated per query head (the repeat fuses into the
  rotary's dispatch) but reads V by KV head, so the query-head group is a dim of Q, K
  and the result and not of V: the attention stayed on the host (2 dispatches, 97.8% of
  the MACs) until the decomposition took such a dim as batch of Q Kᵀ and a second query
  dim of P V.
- Qwen3 (grouped-query attention, q and k normalised per head): every dispatch on the
  NPU. Its norm makes IREE fuse the rotary over the collapsed row of heads x halves x
  columns, reading the half index as a digit of it ((d / 8) % 2 of 128 columns): 4 host
  dispatches until torq-unroll-index-dims expanded such a dim into one loop dim per
  digit (compiler/index_digits.py), the call reshaping the operands and the result.
- GPT-J (rotate_every_two on the first 8 of 16 head dims): every dispatch on the NPU.
  Its interleave reads x[..., 0::2] and x[..., 1::2], strided loads that a store and an
  elementwise negation read, which no convolution map takes: 8 host dispatches until
  extraction passed such an input reshaped (16 columns as 8 pairs) and read each half
  as a unit-stride box of it (box_reads.StrideSplit).
- Falcon (fused QKV, multi-query attention): every dispatch on the NPU. Its rotary read
  slices of box loads (2 host dispatches until the pieces' slices merged); its key and
  value heads are gathered through a flattened index with torch's wrap of negative
  indices, the key's column written from two digits (d % 8 + ((d / 8) % 2) * 8): 6 more
  until the wraps folded, the column became d % 16 and the index three loop dims read
  as boxes (a coordinate plus a constant too).
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

T = 8
WIDTHS = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
              max_position_embeddings=64)


class CausalLM(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids):
        t = ids.shape[1]
        causal = torch.triu(torch.full((t, t), -1e9), diagonal=1)[None, None]
        return self.model(input_ids=ids, attention_mask=causal, use_cache=False).logits


def _compile(model):
    import iree.turbine.aot as aot

    model = CausalLM(model.eval()).eval()
    ids = torch.randint(0, 256, (1, T), generator=torch.Generator().manual_seed(1))
    cm = torq.compile(aot.export(model, ids), remarks=io.StringIO())
    with torch.no_grad():
        assert within_bf16_limits(cm(ids.numpy()), model(ids).numpy())
    assert cm.report.npu_mac_share == 1.0
    return [(d.name, d.reason) for d in cm.report.dispatches
            if d.executor != "torq" and not d.name.startswith("initializer_")]


def test_mistral_runs_on_the_npu():
    torch.manual_seed(0)
    assert _compile(transformers.MistralForCausalLM(transformers.MistralConfig(num_key_value_heads=2, **WIDTHS))) == []


def test_phi_partial_rotary_runs_on_the_npu():
    torch.manual_seed(0)
    assert _compile(transformers.PhiForCausalLM(transformers.PhiConfig(**WIDTHS))) == []


def test_qwen2_fused_rotary_runs_on_the_npu():
    torch.manual_seed(0)
    assert _compile(transformers.Qwen2ForCausalLM(transformers.Qwen2Config(num_key_value_heads=2, **WIDTHS))) == []


def test_qwen3_rotary_over_collapsed_heads_runs_on_the_npu():
    torch.manual_seed(0)
    config = transformers.Qwen3Config(num_key_value_heads=2, head_dim=16, **WIDTHS)
    assert _compile(transformers.Qwen3ForCausalLM(config)) == []


def test_qwen3_rotary_tables_exported_once_at_load(tmp_path):
    """IREE hoists Qwen3's cos / sin tables into globals and reshapes them for the rotary's
    dispatch, which the target reshapes again (its head dim expanded into digits): the NPU
    calls read them through load-time views (compiler/load_time_views.py), so the model's
    function copies no constant at run time (in IREE's stream IR)."""
    import os
    import subprocess

    import iree.turbine.aot as aot

    torch.manual_seed(0)
    config = transformers.Qwen3Config(num_key_value_heads=2, head_dim=16, **WIDTHS)
    model = CausalLM(transformers.Qwen3ForCausalLM(config).eval()).eval()
    src = tmp_path / "qwen3.mlir"
    src.write_text(str(aot.export(model, torch.zeros((1, T), dtype=torch.int64)).mlir_module))
    out = subprocess.run([os.path.join(os.path.dirname(sys.executable), "torq-compile"), str(src),
                          "--compile-to=executable-sources", "--torq-cache-dir=none", "-o", "-"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    start = out.stdout.index("util.func public @main")
    end = out.stdout.find("util.func", start + 1)
    main = out.stdout[start:end if end > 0 else len(out.stdout)]
    assert main.count("torq.run_") > 20 and "resource<constant>" not in main


def test_gptj_interleaved_rotary_runs_on_the_npu():
    torch.manual_seed(0)
    config = transformers.GPTJConfig(vocab_size=256, n_embd=64, n_layer=2, n_head=4, rotary_dim=8, n_positions=64)
    assert _compile(transformers.GPTJForCausalLM(config)) == []


def test_falcon_fused_qkv_runs_on_the_npu():
    torch.manual_seed(0)
    config = transformers.FalconConfig(vocab_size=256, hidden_size=64, num_hidden_layers=2, num_attention_heads=4)
    assert _compile(transformers.FalconForCausalLM(config)) == []


def test_gpt_neox_attention_runs_on_the_npu():
    torch.manual_seed(0)
    assert _compile(transformers.GPTNeoXForCausalLM(transformers.GPTNeoXConfig(**WIDTHS))) == []


def test_stablelm_grouped_query_attention_runs_on_the_npu():
    torch.manual_seed(0)
    config = transformers.StableLmConfig(num_key_value_heads=2, **WIDTHS)
    assert _compile(transformers.StableLmForCausalLM(config)) == []
