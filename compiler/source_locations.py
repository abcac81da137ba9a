"""Where a dispatch came from in the user's model, and what it computes, for reports and remarks.

Contract:
- `location_frames(text)` reads one printed MLIR location (`str(op.location)`)
  and returns its user-facing frames: a file location as `path:line`; a
  call site as its innermost frame outside torch, IREE and torch-mlir
  (iree-turbine / torch.export write each op's Python stack as
  `callsite(innermost at outer...)`, with torch's own export frame last); a
  name location (IREE's ONNX importer names each op after its ONNX node) as
  the name; a fused location as the frames of its parts; unknown as none.
  The Python bindings have no location accessors, so this parses the text.
- `dispatch_source(dispatch)` is the source of a `flow.dispatch.workgroups`:
  the frames of its own location and of every op inside it (dispatch creation
  keeps the locations of the ops it fuses, and the region ops of a fused
  elementwise generic keep theirs), without repeats, lines of one file
  joined (`/m/model.py:9,10`; files and names by `; `), at most
  `MAX_FRAMES`. A file frame counts only when that file exists: MLIR text
  printed without debug info (`torq.compile` of a torch module prints it so)
  has locations in a buffer named after the model, which name no file the
  user can open. "" when nothing is known.
- `dispatch_op_kinds(dispatch)` names what the dispatch computes, in order,
  without repeats, joined by `+`: a named linalg op by its name
  (`matmul`, `softmax`), a generic by its contraction kind (`conv2d`,
  `matmul`, ...) or `elementwise` / `reduction`, attention as `attention`,
  a fused pad as `pad`; a dispatch of none of these is `copy`.
- The source reaches the runtime through the dispatch records
  (contract/dispatch_records.py), not the executable, which identical
  dispatches share.
- `first_frame_location(source)`: the `path:line` prefix remarks start with
  (a compiler diagnostic's place), or "" when the source is not a file line.
"""

from __future__ import annotations

import functools
import os
import re

from iree.compiler import ir

from .ir_utils import walk_ops

MAX_FRAMES = 8
# Frames of the export machinery, not of the model: torch (export, dynamo, nn), IREE / turbine.
_LIBRARY = re.compile(r"[/\\](?:site|dist)-packages[/\\](?:torch|functorch|iree|torch_mlir|shark_turbine)[/\\]")
_FILE = re.compile(r'"((?:[^"\\]|\\.)*)":(\d+):(\d+)(?:\s+to\s+(?:\d+)?:\d+)?')
_STRING = re.compile(r'"((?:[^"\\]|\\.)*)"')
# Ops whose location says little about the model: constants and buffers are hoisted and shared.
_SKIPPED_OPS = frozenset({"arith.constant", "tensor.empty", "linalg.fill", "flow.dispatch.tensor.load",
                          "flow.dispatch.tensor.store", "flow.return", "linalg.yield", "linalg.index",
                          "iree_tensor_ext.dispatch.tensor.load", "iree_tensor_ext.dispatch.tensor.store"})


class _Reader:
    """A recursive reader of printed MLIR locations; each `loc` returns a call stack per part."""

    def __init__(self, text: str):
        self.s, self.i = text, 0

    def skip(self, token: str) -> bool:
        while self.i < len(self.s) and self.s[self.i] == " ":
            self.i += 1
        if self.s.startswith(token, self.i):
            self.i += len(token)
            return True
        return False

    def loc(self) -> list[list[str]]:
        """The location at the cursor: a list of call stacks (innermost frame first)."""
        if self.skip("loc("):
            parts = self.loc()
            self.skip(")")
            return parts
        if self.skip("unknown"):
            return []
        if self.skip("callsite("):
            callee = self.loc()
            self.skip("at ")
            caller = self.loc()
            self.skip(")")
            outer = caller[0] if caller else []
            return [stack + outer for stack in callee] or ([outer] if outer else [])
        if self.skip("fused"):
            if self.skip("<"):  # fused metadata: skip it (nested <> do not occur in locations)
                self.i = self.s.index(">", self.i) + 1
            parts: list[list[str]] = []
            if self.skip("["):
                while not self.skip("]") and self.i < len(self.s):
                    parts += self.loc()
                    self.skip(",")
            return parts
        m = _FILE.match(self.s, self.i)
        if m:
            self.i = m.end()
            return [[f"{m.group(1)}:{m.group(2)}"]]
        m = _STRING.match(self.s, self.i)
        if m:
            self.i = m.end()
            name = m.group(1)
            if self.skip("("):  # a name with a child location: the name is the user's
                self.loc()
                self.skip(")")
            return [] if name.startswith("onnx_importer.") else [[name]]
        self.i = len(self.s)  # something this reader does not know: no frames
        return []


def _user_frame(stack: list[str]) -> str:
    """The innermost frame of `stack` outside the export machinery (else the innermost)."""
    for frame in stack:
        if not _LIBRARY.search(frame):
            return frame
    return stack[0]


def location_frames(text: str) -> list[str]:
    """The user-facing frames of one printed location (see module docstring)."""
    try:
        stacks = _Reader(text.strip()).loc()
    except ValueError:
        return []
    return [_user_frame(s) for s in stacks if s]


def _split_file_line(frame: str) -> tuple[str, int] | None:
    path, _, line = frame.rpartition(":")
    return (path, int(line)) if path and line.isdigit() else None


def join_frames(frames: list[str]) -> str:
    """`/m/a.py:3,9; /node/name`: lines of one file together, in order of first appearance."""
    groups: dict[str, list[int]] = {}
    names: list[str] = []
    for frame in frames:
        fl = _split_file_line(frame)
        if fl is None:
            if frame not in names:
                names.append(frame)
            continue
        lines = groups.setdefault(fl[0], [])
        if fl[1] not in lines:
            lines.append(fl[1])
    parts = [f"{path}:{','.join(str(n) for n in sorted(lines))}" for path, lines in groups.items()]
    return "; ".join(parts + names)


@functools.lru_cache(maxsize=256)
def _names_a_file(path: str) -> bool:
    return os.path.isfile(path)


def _is_known(frame: str) -> bool:
    """A name (ONNX node), or a file line of a file that exists."""
    fl = _split_file_line(frame)
    return fl is None or _names_a_file(fl[0])


def dispatch_source(dispatch: ir.Operation) -> str:
    """Where `dispatch` came from in the model (see module docstring)."""
    frames: list[str] = []
    seen: set[str] = set()
    for op in walk_ops(dispatch):
        if op is not dispatch and op.name in _SKIPPED_OPS:
            continue
        for frame in location_frames(str(op.location)):
            if frame not in seen:
                seen.add(frame)
                if _is_known(frame):
                    frames.append(frame)
    more = len(frames) - MAX_FRAMES
    text = join_frames(frames[:MAX_FRAMES])
    return f"{text} (+{more} more)" if more > 0 else text


def _generic_kind(op: ir.Operation) -> str:
    from .patterns import classify_contraction

    c = classify_contraction(op)
    if c is not None:
        return c.kind
    iterators = str(op.attributes["iterator_types"]) if "iterator_types" in op.attributes else ""
    return "reduction" if "reduction" in iterators else "elementwise"


def dispatch_op_kinds(dispatch: ir.Operation) -> str:
    """What `dispatch` computes, e.g. `conv2d+elementwise` (see module docstring)."""
    kinds: list[str] = []
    for op in walk_ops(dispatch):
        name = op.name
        if name == "linalg.generic":
            kind = _generic_kind(op)
        elif name.startswith("linalg.") and name not in ("linalg.yield", "linalg.index", "linalg.fill"):
            kind = name.removeprefix("linalg.")
        elif name == "iree_linalg_ext.attention":
            kind = "attention"
        elif name == "tensor.pad":
            kind = "pad"
        else:
            continue
        if kind not in kinds:
            kinds.append(kind)
    return "+".join(kinds) or "copy"


def first_frame_location(source: str) -> str:
    """`path:line` of the first file frame of a `dispatch_source` text, else ""."""
    first = source.split(";")[0].split(" (+")[0].strip()
    path, _, lines = first.rpartition(":")
    line = lines.split(",")[0]
    return f"{path}:{line}" if path and line.isdigit() else ""
