"""The front-end cache (compiler/frontend_cache.py): IREE's module at dispatch creation is
kept on disk and parsed back when the same input is compiled again with the same IREE
flags, whatever the Torq flags. The reference is a compile with every cache off
(`--torq-no-cache`): a compile from the cache must give the same .vmfb byte for byte.
Whether IREE's front end ran is read from the driver (its parse of the input)."""

import os

import numpy as np
import pytest
from torch_reference import REL_L2_LIMIT

import torq
from torq.compiler import driver

RNG = np.random.default_rng(0)
W = RNG.standard_normal((8, 16)).astype(np.float32)


def _mlir(w: np.ndarray) -> str:
    """x @ w^T with w an inline constant: IREE's const-eval folds the transpose."""
    values = ", ".join("[" + ", ".join(f"{v:.6e}" for v in row) + "]" for row in w)
    return f"""
func.func @main(%x: tensor<4x16xf32>) -> tensor<4x8xf32> {{
  %w = arith.constant dense<[{values}]> : tensor<8x16xf32>
  %e = tensor.empty() : tensor<16x8xf32>
  %wt = linalg.transpose ins(%w : tensor<8x16xf32>) outs(%e : tensor<16x8xf32>) permutation = [1, 0]
  %zero = arith.constant 0.0 : f32
  %o = tensor.empty() : tensor<4x8xf32>
  %f = linalg.fill ins(%zero : f32) outs(%o : tensor<4x8xf32>) -> tensor<4x8xf32>
  %y = linalg.matmul ins(%x, %wt : tensor<4x16xf32>, tensor<16x8xf32>) outs(%f : tensor<4x8xf32>) -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}}"""


SOURCE = _mlir(W)


@pytest.fixture
def front_end_runs(monkeypatch):
    """How many times IREE's front end ran (the driver parses the input only then)."""
    calls = []
    parse = driver._parsed_input

    def counted(*args, **kwargs):
        calls.append(1)
        return parse(*args, **kwargs)

    monkeypatch.setattr(driver, "_parsed_input", counted)
    return calls


def _compile(source, cache, *flags):
    return torq.compile(source, flags=["--torq-quiet", f"--torq-cache-dir={cache}", *flags]).vmfb


def _entries(cache):
    d = os.path.join(cache, "frontend")
    return sorted(os.listdir(d)) if os.path.isdir(d) else []


def test_recompile_reads_the_front_end_and_matches_a_fresh_compile(tmp_path, front_end_runs):
    cache = str(tmp_path)
    first = _compile(SOURCE, cache)
    assert len(front_end_runs) == 1 and len(_entries(cache)) == 1
    again = _compile(SOURCE, cache)
    assert len(front_end_runs) == 1  # from the cache
    fresh = torq.compile(SOURCE, flags=["--torq-quiet", "--torq-no-cache"]).vmfb
    assert first == again == fresh
    x = RNG.standard_normal((4, 16)).astype(np.float32)
    y = np.asarray(torq.load(again).main(x))
    ref = x.astype(np.float64) @ W.T.astype(np.float64)
    assert np.linalg.norm(y - ref) / np.linalg.norm(ref) < REL_L2_LIMIT


def test_other_torq_flags_reuse_the_front_end(tmp_path, front_end_runs):
    cache = str(tmp_path)
    _compile(SOURCE, cache)
    other = _compile(SOURCE, cache, "--torq-hw=SL2610:lram_kb=256", "--torq-super-tiling-strategy=traffic")
    assert len(front_end_runs) == 1 and len(_entries(cache)) == 1
    fresh = torq.compile(SOURCE, flags=["--torq-quiet", "--torq-no-cache", "--torq-hw=SL2610:lram_kb=256",
                                        "--torq-super-tiling-strategy=traffic"]).vmfb
    assert other == fresh


def test_another_input_or_iree_flag_misses(tmp_path, front_end_runs):
    cache = str(tmp_path)
    _compile(SOURCE, cache)
    _compile(_mlir(W + 1), cache)  # other weights
    _compile(SOURCE, cache, "--iree-opt-const-eval=false")  # another IREE flag
    assert len(front_end_runs) == 3 and len(_entries(cache)) == 3


def test_unreadable_entry_compiles_afresh(tmp_path, front_end_runs):
    cache = str(tmp_path)
    first = _compile(SOURCE, cache)
    (entry,) = _entries(cache)
    path = os.path.join(cache, "frontend", entry)
    data = open(path, "rb").read()
    with open(path, "wb") as f:
        f.write(data[: len(data) // 2])
    again = _compile(SOURCE, cache)
    assert len(front_end_runs) == 2 and again == first
    assert open(path, "rb").read() == data  # written again whole


def test_no_cache_writes_nothing(tmp_path, front_end_runs):
    torq.compile(SOURCE, flags=["--torq-quiet", "--torq-no-cache", f"--torq-cache-dir={tmp_path}"])
    assert _entries(str(tmp_path)) == []


def test_dispatches_of_a_cached_front_end_hit_the_dispatch_cache(tmp_path, front_end_runs):
    """A torch export's weights are blobs (dense_resource); a parse names each after its
    first holder, uniqued in the context, so the cached module's blobs may carry other
    names than IREE's: the dispatch cache key must not see them (ir_text.canonical_text)."""
    import torch

    torch.manual_seed(0)
    # Folded batch norms (IREE's const-eval makes new blobs) of one shape: blobs of one
    # base name, told apart by their suffixes.
    layers = [torch.nn.Conv2d(3 if i == 0 else 16, 16, 3, padding=1) for i in range(4)]
    model = torch.nn.Sequential(*[m for conv in layers
                                  for m in (conv, torch.nn.BatchNorm2d(16), torch.nn.ReLU())]).eval()
    x = torch.randn(1, 3, 16, 16)
    flags = ["--torq-quiet", f"--torq-cache-dir={tmp_path}"]
    first = torq.compile(model, x, flags=flags)
    again = torq.compile(model, x, flags=flags)
    assert len(front_end_runs) == 1
    assert again.report.dispatches and all(d.cached for d in again.report.dispatches if d.executor == "torq")
    assert again.vmfb == first.vmfb
