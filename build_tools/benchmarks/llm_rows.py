"""The LLM rows of the benchmark suite (issue 12): samples/llm.py's Llama decoder, prefill and
KV-cached decode on the Torq simulator, beside iree-compile llvm-cpu's compile of the same export.

`measure_llm(spec)` builds the model (random seeded weights, SmolLM2-135M's widths; `layers`,
`vocab`, `prompt`, `tokens`, `max_len` from the spec), exports prefill and decode together
through iree-turbine, with the weights inline and external (a parameter archive), compiles
each with `torq.compile` (cold and warm, as the other rows) and with llvm-cpu (compile
seconds only: its functions are not run), generates `tokens` tokens with the external one
greedily on the simulator (samples/llm.generate: each step against torch fp32 and torch bf16
fed the same tokens) and reports prefill's and decode's simulated figures. `markdown(rows)`
is the table.
"""

from __future__ import annotations

import io
import os
import tempfile


def is_llm(name: str) -> bool:
    return name == "llm"


def measure_llm(spec: dict, llvm_cpu_compile) -> dict:
    """One LLM row (`llvm_cpu_compile` is run.py's: compile seconds and the .vmfb, not loaded:
    only its compile time is compared)."""
    from common import compile_cold_and_warm
    from llm import LlamaConfig, export_llm, make_llama

    import torq

    kw = spec["kwargs"]
    cfg = LlamaConfig(layers=kw["layers"], vocab=kw["vocab"], max_len=kw["max_len"])
    label = (f"llm {cfg.layers} layers, vocab {cfg.vocab:,}, prompt {kw['prompt']}, cache {cfg.max_len}, "
             f"{kw['tokens']} tokens")
    row: dict = {"label": label, "model": "llm", "llm": True}
    model = make_llama(cfg)
    with tempfile.TemporaryDirectory(prefix="torq-bench-llm-") as tmp:
        archive = os.path.join(tmp, "weights.irpa")
        try:
            for weights, parameters in (("inline", None), ("external", archive)):
                mlir = export_llm(model, kw["prompt"], parameters).mlir_module.operation.get_asm(
                    enable_debug_info=True)
                iree_s, _ = llvm_cpu_compile(mlir)
                cm, cold, warm = compile_cold_and_warm(mlir, spec["hw"], io.StringIO())
                row[weights] = {"torq_compile_s": cold, "warm_compile_s": warm, "iree_compile_s": iree_s}
        except torq.TorqCompileError as e:
            return {**row, "error": f"torq compile ({weights} weights): {' '.join(str(e).split())[:300]}"}
        cm.parameters = f"model={archive}"  # generation runs the external-weights module
        _generate(row, cm, model, kw)
    return row


def _generate(row: dict, cm, model, kw: dict) -> None:
    """The generation's figures into `row`."""
    import torch
    from llm import generate, mac_share

    prompt = torch.randint(0, model.cfg.vocab, (1, kw["prompt"]), generator=torch.Generator().manual_seed(1))
    gen = generate(cm, model, prompt, kw["tokens"])
    prefill, decode = gen.steps[0], gen.steps[1:]
    row["prefill"] = _call_figures([prefill])
    row["decode"] = _call_figures(decode)
    row["cycles"] = row["decode"]["cycles"]
    row["mac_share"] = {f: mac_share(cm.report, f) for f in ("prefill", "decode")}
    row["rel_l2_max"] = max(s.rel_l2 for s in gen.steps)
    row["cosine_min"] = min(s.cosine for s in gen.steps)
    row["bf16_rel_l2_max"] = max(s.bf16_rel_l2 for s in gen.steps)
    row["same_as_fp32"] = sum(s.token == s.torch_token for s in gen.steps)
    row["same_as_bf16"] = sum(s.token == s.bf16_token for s in gen.steps)
    row["steps"] = len(gen.steps)
    # Steps whose greedy token is not torch's (fp32 or bf16, fed the same tokens): how close
    # torch's own top two logits were there, against the logits' RMS.
    row["parted"] = [(i, s.token, s.torch_token, s.bf16_token, s.top2_gap, s.logits_rms)
                     for i, s in enumerate(gen.steps) if s.token != s.torch_token or s.token != s.bf16_token]
    row["decode_wall_s"] = sum(s.wall_s for s in decode) / max(1, len(decode))
    row["host"] = [(d.name, d.macs or 0, d.reason) for d in cm.report.dispatches
                   if d.executor == "host" and not d.name.startswith("initializer_")]
    row["load_time_host"] = sum(d.name.startswith("initializer_") for d in cm.report.dispatches)


def _call_figures(steps) -> dict:
    """Per call, averaged over `steps`: cycles, latency, DDR bytes, roofline share, traffic ratio."""
    n = max(1, len(steps))
    cycles = sum(s.cycles for s in steps) / n
    return {"cycles": round(cycles), "latency_us": sum(s.latency_us for s in steps) / n,
            "ddr_mb": sum(s.ddr_bytes for s in steps) / n / 1e6,
            "of_roofline": sum(s.roofline_cycles for s in steps) / n / max(cycles, 1),
            "traffic_ratio": sum(s.ddr_bytes for s in steps) / max(1, sum(s.compulsory_bytes for s in steps))}


COLUMNS = ["model", "weights", "torq-compile s", "iree-compile llvm-cpu s", "ratio", "warm recompile s",
           "prefill cycles (of roofline)", "prefill DDR MB (÷ compulsory)", "decode cycles / token (of roofline)",
           "decode tokens/s simulated", "decode DDR MB / token (÷ compulsory)", "decode wall s / token",
           "NPU share of MACs prefill / decode", "dispatches on host", "logits rel L2 vs fp32 (torch bf16's)",
           "cosine", "greedy tokens = torch fp32 / bf16", "wall s"]


def _compile_cells(c: dict) -> list[str]:
    return [f"{c['torq_compile_s']:.1f}", f"{c['iree_compile_s']:.1f}",
            f"{c['torq_compile_s'] / c['iree_compile_s']:.1f}×", f"{c['warm_compile_s']:.1f}"]


def _rows(r: dict) -> list[list[str]]:
    """The inline-weights compile row, then the external-weights row with the run's figures."""
    if "cycles" not in r:
        return [[r.get("label", "?"), f"**failed**: {' '.join(str(r.get('error')).split())[:160]}"] +
                [""] * (len(COLUMNS) - 2)]
    blank = [""] * (len(COLUMNS) - 6)
    return [[r["label"], "inline", *_compile_cells(r["inline"]), *blank],
            [r["label"], "external (.irpa)", *_compile_cells(r["external"]), *_run_cells(r)]]


def _run_cells(r: dict) -> list[str]:
    p, d = r["prefill"], r["decode"]
    share = " / ".join(f"{100 * npu / max(total, 1):.1f}%" for npu, total in r["mac_share"].values())
    return [f"{p['cycles']:,} ({100 * p['of_roofline']:.1f}%)", f"{p['ddr_mb']:.1f} ({p['traffic_ratio']:.2f})",
            f"{d['cycles']:,} ({100 * d['of_roofline']:.1f}%)", f"{1e6 / max(d['latency_us'], 1e-9):.1f}",
            f"{d['ddr_mb']:.1f} ({d['traffic_ratio']:.2f})", f"{r['decode_wall_s']:.2f}", share, str(len(r["host"])),
            f"≤ {r['rel_l2_max']:.2e} ({r['bf16_rel_l2_max']:.2e})", f"≥ {r['cosine_min']:.5f}",
            f"{r['same_as_fp32']} / {r['same_as_bf16']} of {r['steps']}", f"{r.get('wall_s', 0):.0f}"]


def markdown(rows: list[dict]) -> list[str]:
    """The LLM table (empty when the run had no LLM row)."""
    llm = [r for r in rows if r.get("llm")]
    if not llm:
        return []
    lines = ["## LLM (samples/llm.py: Llama decoder, SmolLM2-135M widths, random weights)", "",
             "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(cells) + " |" for r in llm for cells in _rows(r)]
    lines += ["", "prefill(tokens[1, T]) and decode(token, position, cache) exported together by iree-turbine; "
              "torq-compile cold and warm as in the bf16 table, iree-compile llvm-cpu of the same MLIR (compile "
              "only), with the weights inline (MLIR constants) and external (export_llm's parameter archive, read "
              "at load; the Linears and the tied LM head read each weight as stored, compiler/torch_linear.py, so "
              "nothing is transposed at load). Generation runs the external-weights module (the same logits and figures as the inline one, "
              "tests/e2e/test_llm_sample.py). Generation is greedy on the simulator; each step's logits are compared with torch fp32 fed "
              "the same tokens, and torch's own bf16 run (model.to(torch.bfloat16)) is shown beside it: with "
              "random weights it is as far from fp32 as the NPU. Cycles, latency and DDR bytes count the NPU "
              "dispatches (host dispatches have no simulated time); of roofline = the dispatches' roofline "
              "cycles / simulated cycles; ÷ compulsory = DMA bytes / each dispatch's inputs and outputs once. "
              "Decode figures are the mean over the decode steps.", ""]
    for r in llm:
        for name, macs, reason in r.get("host", []):
            lines.append(f"- {r['label']}: host {name} ({macs:,} MACs): {' '.join(reason.split())[:160]}")
        for i, token, fp32, bf16, gap, rms in r.get("parted", []):
            lines.append(f"- {r['label']}: step {i} chose token {token}, torch fp32 {fp32}, torch bf16 {bf16}; "
                         f"torch fp32's top two logits {gap:.3f} apart ({gap / max(rms, 1e-12):.3f} of the logits' RMS)")
    return lines + [""]
