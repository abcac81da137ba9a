"""Torq compiler passes, one per file; each module has NAME and run(module, options)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from torq.contract.hw import TorqHw


class RequantMode(Enum):
    """How float (QDQ) requantizations become integer rescales; values are --torq-requant's."""
    NEAREST = "nearest"  # the nearest rescale, at most one output step off its own chain
    EXACT = "exact"  # only rescales equal to the f32 chain on every accumulator
    ONE_STEP = "one-step"  # the nearest, where no result value is more than one output step off


@dataclass
class PassOptions:
    hw: TorqHw = field(default_factory=TorqHw)
    keep_f32: bool = False
    super_tiling_strategy: str = "default"
    # Default strategy: extra DDR bytes (fraction of the least-traffic tiling's) a tiling may
    # move when it is predicted faster (--torq-tiling-traffic-slack; see tiling.search._parallel_sizes).
    # 0 by default: a body whose buffers fill LRAM splits each compute over the slices
    # (torq-build-nss-program), so no halo re-reads are needed to use both slices.
    tiling_traffic_slack: float = 0.0
    # torq-super-tiling returns one record per root it visits (--torq-dump-tiling).
    record_tiling: bool = False
    slice_distribution: str = "cyclic"  # see slice_distribution.py: cyclic | block | block-cyclic[:B]
    # --torq-host-fallback-on-error: a dispatch the Torq pipeline fails on stays on host
    # with a remark (the error text) instead of failing the compile.
    host_fallback_on_error: bool = False
    # --torq-requant: "nearest" compiles a float (QDQ) requantization to the integer rescale
    # nearest the f32 chain (at most one output step off, measured); "exact" keeps only rescales
    # equal to it on every accumulator (the rest stay on host); "one-step" the nearest where
    # no result value can be more than one output step off (compiler/requant_compose.py).
    # A plain str (a RequantMode's value): PassOptions is repr'd into cache keys.
    requant: str = RequantMode.NEAREST.value
    # --torq-int8-float-ops: where float compute between int8 tensors that no integer rescale
    # reproduces (a quantized model's softmax, layer norm) runs: "host" (f32, as the model
    # states it) or "bf16" (on the NPU; results may differ from the f32 chain by more than
    # one output step, measured in the benchmarks).
    int8_float_ops: str = "host"
