"""Identical dispatches compile once, in memory and through the on-disk cache; distinct ones
compile in worker processes (compiler/dispatch_compile.py, compiler/dispatch_cache.py).

The references are compiles with the cache off (`--torq-no-cache`: every dispatch
compiled on its own) and in one process (`--torq-jobs=1`): a cached or parallel compile
must give the same .vmfb byte for byte, and any change of what the compile depends on
(its text, options, versions, and the constants it read) must miss.
"""
import hashlib
import os
import pickle
import sys

import numpy as np
import pytest
from iree.compiler import ir

import torq
from torq.compiler.dispatch_cache import Compiled, DispatchCache, bytecode, text_key
from torq.compiler.dispatch_compile import DispatchCompiler
from torq.compiler.passes import PassOptions
from torq.compiler.pipeline import DISPATCH_PIPELINE
from torq.contract.executable import parse_executable
from torq.contract.hw import parse_hw_spec

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "samples"))
from cnn import error_figures, within_limits  # noqa: E402

# A chain of six matmuls (+ relu) with weights passed in: five distinct shapes, then two
# layers of the same shape whose dispatches are identical functions.
WIDTHS = [64, 48, 40, 32, 24, 24, 24]


def _chain_mlir() -> str:
    args = ", ".join(f"%w{i}: tensor<{a}x{b}xf32>" for i, (a, b) in enumerate(zip(WIDTHS, WIDTHS[1:])))
    lines = [f"func.func @main(%x: tensor<8x{WIDTHS[0]}xf32>, {args}) -> tensor<8x{WIDTHS[-1]}xf32> {{",
             "  %zero = arith.constant 0.0 : f32"]
    v = "%x"
    for i, (a, b) in enumerate(zip(WIDTHS, WIDTHS[1:])):
        lines += [
            f"  %e{i} = tensor.empty() : tensor<8x{b}xf32>",
            f"  %f{i} = linalg.fill ins(%zero : f32) outs(%e{i} : tensor<8x{b}xf32>) -> tensor<8x{b}xf32>",
            f"  %m{i} = linalg.matmul ins({v}, %w{i} : tensor<8x{a}xf32>, tensor<{a}x{b}xf32>) "
            f"outs(%f{i} : tensor<8x{b}xf32>) -> tensor<8x{b}xf32>",
            f"  %r{i} = linalg.generic {{indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, "
            f"affine_map<(d0, d1) -> (d0, d1)>], iterator_types = [\"parallel\", \"parallel\"]}} "
            f"ins(%m{i} : tensor<8x{b}xf32>) outs(%e{i} : tensor<8x{b}xf32>) {{",
            "  ^bb0(%in: f32, %out: f32):",
            "    %y = arith.maximumf %in, %zero : f32",
            "    linalg.yield %y : f32",
            f"  }} -> tensor<8x{b}xf32>"]
        v = f"%r{i}"
    lines += [f"  return {v} : tensor<8x{WIDTHS[-1]}xf32>", "}"]
    return "\n".join(lines)


CHAIN = _chain_mlir()


def _compile(*flags):
    cm = torq.compile(CHAIN, flags=["--torq-quiet", *flags])
    return cm, [(d.name, d.executor, d.reason, d.cached) for d in cm.report.dispatches]


def _inputs():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, WIDTHS[0])).astype(np.float32)
    ws = [(rng.standard_normal((a, b)) / np.sqrt(a)).astype(np.float32) for a, b in zip(WIDTHS, WIDTHS[1:])]
    return x, ws


def test_identical_dispatches_compile_once_and_run():
    fresh, fresh_decisions = _compile("--torq-no-cache", "--torq-jobs=1")
    cm, decisions = _compile("--torq-jobs=1")
    assert [d[:3] for d in decisions] == [d[:3] for d in fresh_decisions]
    assert all(d[1] == "torq" for d in decisions), decisions
    # The last layer's dispatch is the one before it: the same function, compiled once.
    assert [d[3] for d in decisions] == [False] * 5 + [True]
    assert not any(d[3] for d in fresh_decisions)
    assert cm.vmfb == fresh.vmfb  # the reused executable, renamed, equals a fresh compile
    x, ws = _inputs()
    ref = x
    for w in ws:
        ref = np.maximum(ref @ w, 0)
    assert within_limits(*error_figures(np.asarray(cm(x, *ws)), ref))


def test_disk_cache_hits_equal_fresh_compiles_and_changes_miss(tmp_path):
    fresh, _ = _compile("--torq-no-cache")
    cache = f"--torq-cache-dir={tmp_path}"
    cold, cold_decisions = _compile(cache, "--torq-jobs=1")
    warm, warm_decisions = _compile(cache, "--torq-jobs=1")
    assert [d[3] for d in cold_decisions] == [False] * 5 + [True]
    assert all(d[3] for d in warm_decisions)
    assert cold.vmfb == fresh.vmfb and warm.vmfb == fresh.vmfb
    assert len(list(tmp_path.rglob("e-*.pickle"))) == 5
    # What the compile depends on is in the key: another hardware model or strategy misses.
    for flags in (["--torq-hw=SL2610:lram_kb=256"], ["--torq-super-tiling-strategy=traffic"]):
        _, decisions = _compile(cache, "--torq-jobs=1", *flags)
        assert [d[3] for d in decisions] == [False] * 5 + [True], flags
    # An unreadable entry is a miss, not an error.
    for entry in tmp_path.rglob("*.pickle"):
        entry.write_bytes(b"not a pickle")
    again, decisions = _compile(cache, "--torq-jobs=1")
    assert [d[3] for d in decisions] == [False] * 5 + [True]
    assert again.vmfb == fresh.vmfb


def test_parallel_compile_equals_one_process():
    one, one_decisions = _compile("--torq-no-cache", "--torq-jobs=1")
    two, two_decisions = _compile("--torq-no-cache", "-j", "2")
    assert two_decisions == one_decisions
    assert two.vmfb == one.vmfb


def test_parallel_compile_reports_refusals_as_one_process_does():
    # math.sin has no Torq lowering: the last matmul's dispatch (which fuses it) stays on
    # host, refused inside a worker's pipeline (torq-check-npu-support).
    text = CHAIN.replace("%y = arith.maximumf %in, %zero : f32\n    linalg.yield %y : f32\n  } -> tensor<8x24xf32>\n"
                         "  return", "%y = math.sin %in : f32\n    linalg.yield %y : f32\n  } -> tensor<8x24xf32>\n"
                         "  return")
    assert text != CHAIN
    one = torq.compile(text, flags=["--torq-quiet", "--torq-no-cache", "--torq-jobs=1"])
    two = torq.compile(text, flags=["--torq-quiet", "--torq-no-cache", "--torq-jobs=2"])
    decisions = [(d.name, d.executor, d.reason) for d in two.report.dispatches]
    assert decisions == [(d.name, d.executor, d.reason) for d in one.report.dispatches]
    assert any("'math.sin'" in reason for _, executor, reason in decisions if executor == "host"), decisions
    assert two.vmfb == one.vmfb


LIT_INPUT = os.path.join(os.path.dirname(__file__), "..", "compiler", "lower_requantization.mlir")


def _key(text: str, options: PassOptions | None = None) -> str:
    with ir.Context() as ctx, ir.Location.unknown():
        ctx.allow_unregistered_dialects = True
        return text_key(bytecode(ir.Module.parse(text)), DISPATCH_PIPELINE, options or PassOptions())


BIAS = "dense<[-384, -378, 381, -297]>"


def test_text_key_reads_the_text_not_names_locations_or_constant_values():
    text = open(LIT_INPUT).read()
    key = _key(text)
    assert _key(text.replace("@qdq_gemm", "@another_name")) == key
    assert _key(text + "\n// a comment\n") == key
    with_loc = text.replace("return %q : tensor<16x4xi8>", 'return %q : tensor<16x4xi8> loc("model.py":7:3)')
    assert with_loc != text and _key(with_loc) == key
    # A flow-level constant's value (an argument's torq.constant) is not: which arguments are
    # constants, and their types, are.
    assert BIAS in text
    assert _key(text.replace(BIAS, "dense<[-384, -378, 381, -296]>")) == key
    assert _key(text.replace(f"{{torq.constant = {BIAS} : tensor<4xi32>}}", "")) != key
    assert _key(text, PassOptions(requant="exact")) != key
    assert _key(text, PassOptions(hw=parse_hw_spec("SL2610:slices=1"))) != key


def _compile_functions(texts: list[str], cache: DispatchCache) -> list:
    with ir.Context() as ctx, ir.Location.unknown():
        ctx.allow_unregistered_dialects = True
        compiler = DispatchCompiler(PassOptions(), DISPATCH_PIPELINE, jobs=1, cache=cache)
        return compiler.compile_all([(f"d{k}", ir.Module.parse(t)) for k, t in enumerate(texts)])


def test_a_constant_the_compile_read_is_asked_of_every_function_of_its_text(tmp_path):
    """The rescale reads the bias (argument 1): a function with another bias compiles afresh,
    to another executable; one with the same constants under another name is the entry the
    first compile stored, in the same compile and, through the disk, in the next."""
    text = open(LIT_INPUT).read()
    variants = [text, text.replace(BIAS, "dense<[-384, -378, 381, -296]>"), text.replace("@qdq_gemm", "@renamed")]
    first, other, renamed = _compile_functions(variants, DispatchCache(str(tmp_path)))
    assert (1, "value") in first.constants_read and (1, "value") in other.constants_read
    assert [first.cached, other.cached, renamed.cached] == [False, False, True]
    assert other.blob != first.blob and renamed.blob == first.blob
    again = _compile_functions(variants[::-1], DispatchCache(str(tmp_path)))
    assert all(o.cached for o in again) and [o.blob for o in again] == [first.blob, other.blob, first.blob]
    assert len(list(tmp_path.rglob("e-*.pickle"))) == 2


def test_text_key_holds_the_compiler_source(monkeypatch):
    """An edited compiler (the package version unchanged, as in a developer's tree) misses:
    an entry written by another compiler could hold a program this one cannot run."""
    from torq.compiler import dispatch_cache

    text = open(LIT_INPUT).read()
    key = _key(text)
    monkeypatch.setattr(dispatch_cache, "compiler_source_fingerprint", lambda: "0" * 64)
    assert _key(text) != key


def _stored(directory) -> list[Compiled]:
    return [pickle.loads(entry.read_bytes()) for entry in directory.rglob("e-*.pickle")]


def test_cache_entries_hold_the_executables_the_compile_used(tmp_path):
    cm, _ = _compile(f"--torq-cache-dir={tmp_path}", "--torq-jobs=1")
    used = {d.executable_sha256 for d in cm.report.dispatches if not d.cached}
    stored = {hashlib.sha256(entry.blob).hexdigest() for entry in _stored(tmp_path)}
    assert stored == used and len(stored) == 5


def test_identical_dispatches_share_one_executable_named_per_call(tmp_path):
    """The two identical layers embed one executable, which names no call site; the runtime
    names each call after its own dispatch (contract/dispatch_records.call_sites)."""
    for flags in (["--torq-no-cache"], [f"--torq-cache-dir={tmp_path}"]):
        cm, decisions = _compile("--torq-jobs=1", *flags)
        shas = [d.executable_sha256 for d in cm.report.dispatches]
        assert shas[-1] == shas[-2] and len(set(shas)) == 5, flags
    blobs = [entry.blob for entry in _stored(tmp_path)]
    assert all(cm.vmfb.count(blob) == 1 for blob in blobs)
    assert {(p.name, p.source) for p in (parse_executable(b) for b in blobs)} == {("", "")}
    x, ws = _inputs()
    cm(x, *ws)
    assert [s["name"] for s in cm.last_stats] == [d.name for d in cm.report.dispatches]
    assert [s["source"] for s in cm.last_stats] == [d.source for d in cm.report.dispatches]


@pytest.mark.parametrize("flags, message", [
    (["--torq-jobs=0"], "bad --torq-jobs '0'"),
    (["-j"], "-j needs a number of processes"),
    (["--torq-cache-dir="], "--torq-cache-dir needs a directory"),
])
def test_bad_parallel_and_cache_flags(flags, message):
    with pytest.raises(torq.TorqCompileError, match=message):
        torq.compile(CHAIN, flags=flags)


def test_hw_flag_reaches_the_python_api():
    cm = torq.compile(CHAIN, flags=["--torq-quiet", "--torq-hw=SL2610:lram_kb=256"])
    assert cm.hw.lram_kb == 256
    cm = torq.compile(CHAIN, hw="SL2610:lram_kb=128", flags=["--torq-quiet", "--torq-hw=SL2610:lram_kb=256"])
    assert cm.hw.lram_kb == 128  # the keyword wins


def test_layers_of_a_dynamically_quantized_model_share_their_compiles(tmp_path):
    """A dynamically quantized model's NPU dispatches read no weight's value (the scales, bias
    and column sums go to the host tail as operands; the compile asks only whether a
    zero-point product is zero): three Linear + ReLU layers of other weights are one compile,
    the .vmfb equals a compile with the cache off, which compiles every dispatch on its
    own, and the result is llvm-cpu's. (128 channels: IREE inlines a constant of 256 bytes
    or fewer into the dispatch body, a per-channel scale of 64 channels among them, and that
    body is another text.)"""
    pytest.importorskip("torchao.quantization.pt2e")
    import torch
    from llvm_cpu import llvm_cpu
    from test_pt2e_dynamic import _rewritten, pt2e_dynamic_export

    torch.manual_seed(0)
    model = torch.nn.Sequential(*[m for _ in range(3) for m in (torch.nn.Linear(128, 128), torch.nn.ReLU())])
    x = torch.randn(1, 16, 128)
    text, _ = pt2e_dynamic_export(model, x, "x86")
    fresh = torq.compile(text, flags=["--torq-quiet", "--torq-no-cache", "--torq-jobs=1"])
    cache = f"--torq-cache-dir={tmp_path}"
    cold = torq.compile(text, flags=["--torq-quiet", cache, "--torq-jobs=1"])
    npu = [d for d in cold.report.dispatches if d.executor == "torq"]
    assert cold.report.npu_mac_share == 1.0 and [d.cached for d in npu] == [False, True, True]
    assert len({d.executable_sha256 for d in npu}) == 1
    assert cold.vmfb == fresh.vmfb
    warm = torq.compile(text, flags=["--torq-quiet", cache, "--torq-jobs=1"])
    assert all(d.cached for d in warm.report.dispatches if d.executor == "torq") and warm.vmfb == fresh.vmfb
    # The shared executables compute each layer's own result: llvm-cpu's on the rewritten
    # module, bit for bit (the NPU's i32 accumulator is exact, the host's f32 epilogue llvm-cpu's).
    assert np.array_equal(np.asarray(cold(x.numpy())), llvm_cpu(_rewritten(text), x.numpy()))


def test_both_rounds_of_a_parallel_compile_equal_one_process(monkeypatch):
    """Two texts (another input scale inlined in the body), three biases each: the first
    round compiles one function per text, the second the four whose bias (read by the
    rescale) is their own, in the worker started for the first; every executable equals a
    one-process compile with the cache off."""
    from torq.compiler import dispatch_compile

    text = open(LIT_INPUT).read()
    scale = "%sx = arith.constant 2.130000e-02 : f32"
    assert scale in text
    texts = [t.replace(BIAS, bias) for t in (text, text.replace(scale, scale.replace("2.13", "2.14")))
             for bias in (BIAS, "dense<[-384, -378, 381, -296]>", "dense<[-380, -378, 381, -297]>")]
    started = []
    start = dispatch_compile._start_worker
    monkeypatch.setattr(dispatch_compile, "_start_worker", lambda *a: started.append(1) or start(*a))
    with ir.Context() as ctx, ir.Location.unknown():
        ctx.allow_unregistered_dialects = True
        parallel = DispatchCompiler(PassOptions(), DISPATCH_PIPELINE, jobs=2, cache=DispatchCache(None))
        two = parallel.compile_all([(f"d{k}", ir.Module.parse(t)) for k, t in enumerate(texts)])
        one = DispatchCompiler(PassOptions(), DISPATCH_PIPELINE).compile_all(
            [(f"d{k}", ir.Module.parse(t)) for k, t in enumerate(texts)])
    assert all(isinstance(o, Compiled) and not o.cached for o in two + one)
    assert [o.blob for o in two] == [o.blob for o in one] and len({o.blob for o in one}) == 6
    assert len(started) == 1


def test_a_constant_numpy_cannot_hold_answers_with_a_digest_equal_to_nothing():
    """A bf16 blob (dense_resource) has no numpy value here: a lookup asking its value, or the
    grouping by all values, misses rather than failing the compile; the mask keeps the
    argument's other attributes."""
    from torq.compiler.constant_args import VALUE, ConstantArgs, mask_constant_values

    text = """
    func.func @f(%a: tensor<2xbf16> {torq.constant = dense_resource<blob> : tensor<2xbf16>, torq.other = 1 : i64})
        -> tensor<2xbf16> {
      return %a : tensor<2xbf16>
    }
    {-#
      dialect_resources: { builtin: { blob: "0x020000003F803F80" } }
    #-}
    """
    with ir.Context() as ctx, ir.Location.unknown():
        ctx.allow_unregistered_dialects = True
        module = ir.Module.parse(text)
        func = module.body.operations[0].operation
        args = ConstantArgs(func)
        assert args.digest(((0, VALUE),)) != args.digest(((0, VALUE),))
        assert args.values_digest() == args.values_digest()  # (computed once)
        mask_constant_values(func)
        attrs = ir.DictAttr(ir.ArrayAttr(func.attributes["arg_attrs"])[0])
        assert str(attrs["torq.constant"]) == '"constant tensor<2xbf16>"' and "torq.other" in attrs
