"""The `torq` VM module's entry points, as a compiled .vmfb calls them.

A dispatch the compiler put on the NPU becomes a call of
`torq.run_i{N}_o{M}` (N tensor inputs, M results) with signature
(`!util.buffer` serialized executable, N x `!hal.buffer_view`) ->
M x `!hal.buffer_view` and calling convention "0" + "r" * (N + 1) + "_" +
"r" * M. The runtime's `TorqModule` exports one function per arity, N in
0..MAX_INPUTS (0: a dispatch that writes a constant) and M in 1..MAX_RESULTS (the VM refuses variadic conventions),
so the compiler leaves a dispatch with more to the host.

With --torq-check-dispatches each checked NPU result also goes through
`torq.check` (`CHECK_EXPORT`): (`!util.buffer` executable, `!util.buffer`
holding the result's index as one i32, the NPU result, the same result of
the dispatch's host copy) -> the NPU result, unchanged; the runtime records
how far apart the two are.
"""

from __future__ import annotations

MODULE_NAME = "torq"
# 32: IREE's own CPU dispatch runs at most 32 bindings (inputs and results), so a dispatch
# with more inputs would not run on the host either (its host copy under
# --torq-check-dispatches needs inputs + results <= 32). MobileOne's and FastViT's
# train-time blocks (branches and BatchNorm vectors as inputs of their own) need 17 to 21.
MAX_INPUTS = 32
MAX_RESULTS = 4
CHECK_EXPORT = "check"
CHECK_CONVENTION = "0rrrr_r"


def export_name(n_inputs: int, n_results: int) -> str:
    """The function the module exports for this arity (without the module name)."""
    return f"run_i{n_inputs}_o{n_results}"


def calling_convention(n_inputs: int, n_results: int) -> str:
    return "0" + "r" * (n_inputs + 1) + "_" + "r" * n_results
