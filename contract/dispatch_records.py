"""The compile record of a function's dispatches, as a compiled .vmfb carries it for the runtime.

Contract:
- torq-compile adds the entry `KEY` to the `iree.reflection` dictionary of
  each public function that has dispatches (IREE copies it into the .vmfb
  function's reflection map): compact JSON `{"v": VERSION, "dispatches":
  [...]}`, one object per dispatch of that function in program order, NPU
  and host alike, with the fields `FIELDS`: "name" (the dispatch's name: the
  runtime's name for an NPU call), "executor" ("torq" | "host"), "ops"
  (what it computes, e.g. "conv2d+elementwise"), "macs" (the compiler's
  count of the model's MACs, null when unknown), "source" (where it came
  from in the model: torch `file:line`s, ONNX node names; "" when unknown)
  and "reason" (why a host dispatch stays on the host; "" for NPU ones).
- It is what the runtime knows of host dispatches (they have no Torq
  executable), of the program order and of where each NPU call comes from:
  identical dispatches share one executable, which names no call site, and
  the runtime names the k-th NPU call of an invocation by the function's
  k-th NPU record (`call_sites`).
- `decode(text)` returns the list of dicts, or None for a text it cannot
  read (another version, not JSON): a report then has NPU rows only.
  Readers ignore fields they do not know; a new field needs no new version,
  a changed meaning does.
"""

from __future__ import annotations

import json

KEY = "torq.dispatches"
VERSION = 1
FIELDS = ("name", "executor", "ops", "macs", "source", "reason")


def encode(dispatches: list[dict]) -> str:
    """The reflection value of one function's dispatch records (dicts with `FIELDS`)."""
    rows = [{k: d.get(k) for k in FIELDS} for d in dispatches]
    return json.dumps({"v": VERSION, "dispatches": rows}, separators=(",", ":"))


def decode(text: str) -> list[dict] | None:
    """The records of a reflection value, or None when it is not a version this reads."""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict) or data.get("v") != VERSION or not isinstance(data.get("dispatches"), list):
        return None
    rows = [d for d in data["dispatches"] if isinstance(d, dict) and isinstance(d.get("name"), str)]
    return [{k: d.get(k, "" if k != "macs" else None) for k in FIELDS} for d in rows]


def from_reflection(reflection) -> list[dict] | None:
    """The records in a .vmfb function's reflection map (`VmFunction.reflection`), or None."""
    text = dict(reflection).get(KEY)
    return decode(text) if text else None


def call_sites(records: list[dict] | None) -> tuple[tuple[str, str], ...]:
    """(name, source) of each NPU dispatch of `records`, in program order: the function's Torq calls."""
    return tuple((r["name"], r.get("source") or "") for r in records or () if r.get("executor") == "torq")
