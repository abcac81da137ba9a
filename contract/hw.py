"""The Torq hardware model: every hardware number lives here and nowhere else.

`TorqHw` describes one NPU configuration. Passes ask it how much LRAM they may
use; the simulator asks it for LRAM size and timing parameters. Presets are
selected with `--torq-hw=NAME[:key=value,...]` (see `parse_hw_spec`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass


class HwSpecError(ValueError):
    """A `--torq-hw` value that names no preset or has a bad override."""


@dataclass(frozen=True)
class TorqHw:
    name: str = "SL2610"
    # On-chip memory visible to the slices.
    lram_kb: int = 512
    # Part of LRAM kept for descriptors and NSS programs: not usable for tensors.
    reserved_kb: int = 14
    slices: int = 2
    # Multiply-accumulates per cycle per slice, by operand dtype.
    macs_per_cycle_i8: int = 256
    macs_per_cycle_i16: int = 64
    macs_per_cycle_bf16: int = 64
    # Elementwise lanes per cycle per slice.
    lanes_i8: int = 64
    lanes_i16: int = 32
    lanes_bf16: int = 32
    # XRAM <-> LRAM DMA: one link of this bandwidth, shared by the DMA-in and DMA-out
    # engines (contract/timing.py); effective rate = bytes/cycle x efficiency.
    dma_bytes_per_cycle: int = 8
    dma_efficiency: float = 0.65
    # Fixed costs (model parameters of this project, not vendor figures): a DMA's setup
    # on its engine before its transfer, a compute's overhead before its MACs/lanes work.
    dma_setup_cycles: int = 32
    compute_overhead_cycles: int = 16
    clock_mhz: int = 800
    # Alignment of LRAM buffers in bytes.
    lram_alignment: int = 64

    @property
    def lram_bytes(self) -> int:
        return self.lram_kb * 1024

    @property
    def available_lram_bytes(self) -> int:
        """LRAM the compiler may fill with tensors (total minus reserved)."""
        return max(0, (self.lram_kb - self.reserved_kb) * 1024)

    def macs_per_cycle(self, dtype: str) -> int:
        return {
            "i8": self.macs_per_cycle_i8,
            "i16": self.macs_per_cycle_i16,
            "bf16": self.macs_per_cycle_bf16,
        }.get(dtype, self.macs_per_cycle_bf16)

    def lanes(self, dtype: str) -> int:
        return {"i8": self.lanes_i8, "i16": self.lanes_i16, "bf16": self.lanes_bf16}.get(
            dtype, self.lanes_bf16
        )

    @property
    def dma_effective_bytes_per_cycle(self) -> float:
        return self.dma_bytes_per_cycle * self.dma_efficiency

    @property
    def spec(self) -> str:
        """The `--torq-hw` text for this model: the preset name plus any overrides."""
        base = PRESETS.get(self.name)
        if base is None:
            return self.name
        changed = [f"{f.name}={getattr(self, f.name)}" for f in dataclasses.fields(self)
                   if getattr(self, f.name) != getattr(base, f.name)]
        return self.name + (":" + ",".join(changed) if changed else "")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @staticmethod
    def from_dict(d: dict) -> "TorqHw":
        names = {f.name for f in dataclasses.fields(TorqHw)}
        return TorqHw(**{k: v for k, v in d.items() if k in names})


PRESETS: dict[str, TorqHw] = {
    "SL2610": TorqHw(),
}

DEFAULT_HW = "SL2610"


def parse_hw_spec(spec: str | None) -> TorqHw:
    """Parses `NAME` or `NAME:key=value,key=value` into a `TorqHw`."""
    spec = spec or DEFAULT_HW
    name, _, overrides = spec.partition(":")
    if name not in PRESETS:
        raise HwSpecError(
            f"unknown Torq hardware '{name}' (known: {', '.join(sorted(PRESETS))}; "
            "see --torq-hw=list)"
        )
    hw = PRESETS[name]
    if not overrides:
        return hw
    fields = {f.name: f for f in dataclasses.fields(TorqHw)}
    changes = {}
    for item in overrides.split(","):
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or key not in fields or key == "name":
            raise HwSpecError(
                f"bad --torq-hw override '{item}' (expected key=value with key one of "
                f"{', '.join(k for k in fields if k != 'name')})"
            )
        typ = type(getattr(hw, key))
        try:
            changes[key] = typ(value)
        except ValueError:
            raise HwSpecError(f"bad value for --torq-hw override '{key}': '{value}'") from None
        if changes[key] <= 0 and key not in ("reserved_kb", "dma_setup_cycles", "compute_overhead_cycles"):
            raise HwSpecError(f"--torq-hw override '{key}' must be positive, got '{value}'")
    hw = dataclasses.replace(hw, **changes)
    if hw.available_lram_bytes <= 0:
        raise HwSpecError(f"--torq-hw: lram_kb={hw.lram_kb} leaves no LRAM after {hw.reserved_kb} KiB reserved")
    return hw


def describe_presets() -> str:
    lines = []
    for name, hw in PRESETS.items():
        lines.append(
            f"{name}: LRAM {hw.lram_kb} KiB ({hw.reserved_kb} KiB reserved), {hw.slices} slices, "
            f"MACs/cycle/slice i8 {hw.macs_per_cycle_i8} bf16 {hw.macs_per_cycle_bf16}, "
            f"DMA {hw.dma_bytes_per_cycle} B/cycle x {hw.dma_efficiency}, {hw.clock_mhz} MHz"
        )
    return "\n".join(lines)
