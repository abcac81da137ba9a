"""Compiled dispatches by content address: in memory within a compile, on disk across compiles.

A dispatch's compile is a function of its function's text, the pipeline, the
`PassOptions` (hardware model included), the versions of iree-torq and IREE,
and of what the compile read of its flow-level constants (compiler/constant_args.py:
the requantization reads weights, biases and scales through `ConstantArgs`, which
records each question it asked). So an entry is found in two steps:

- `text_key` hashes everything but the constants' values: the function with
  its name, locations and `CONSTANT_ARG` values taken out (which arguments are
  constants, and of what type, stays in), the pipeline, options and versions.
  Two layers of one model have the same text key.
- Under a text key, each entry is stored with the questions its compile asked
  (`Compiled.constants_read`) and a digest of the answers
  (`ConstantArgs.digest`). A function is a hit when its own constants give the
  same answers to an entry's questions: the compile would have asked the same
  questions, got the same answers and done the same.

A static int8 model's rescales read every scale, so its layers have entries of
their own; a dynamically quantized transformer's NPU dispatches read at most
whether a zero-point product is zero, so all its layers share one.

A hit is the stored executable itself: an executable names no call site
(torq-serialize-executable leaves the program's name and source empty; the
runtime names calls from the dispatch records), so it equals a fresh compile
byte for byte (tests/e2e/test_dispatch_cache.py). On disk, a text key is a
directory holding its question sets (`q-<hash>.pickle`) and its entries
(`e-<question hash>-<answers>.pickle`), each file written atomically: two
compiles writing at once can only cost a miss. Only successes are stored: a
refusal is found again, with its remark, on the next compile.
"""

from __future__ import annotations

import hashlib
import io
import os
import pickle
from dataclasses import dataclass, field, replace
from typing import Callable

from iree.compiler import ir

from .constant_args import Questions, mask_constant_values
from .files import write_atomically
from .ir_text import canonical_text
from .passes import PassOptions
from .versions import compiler_source_fingerprint, installed_version

CACHE_FORMAT = 2
# The name every function has while its key is hashed.
_KEY_NAME = "torq_dispatch"


@dataclass
class Compiled:
    """A dispatch compiled to a Torq executable, and what the target needs to call it."""
    blob: bytes
    tiles: int
    lram_peak: int
    host_result_types: list[str]  # per function result, the type the host passes (MLIR text)
    # Per function argument, its shape: the call reshapes an operand of another shape (a
    # dim the pipeline expanded, compiler/index_digits.py).
    arg_shapes: list[tuple[int, ...]]
    reports: dict = field(default_factory=dict)  # pipeline.run_passes's, by pass name
    # The questions the compile asked of the function's constants (constant_args.py), in order.
    constants_read: Questions = ()
    cached: bool = False


def bytecode(module: ir.Module) -> bytes:
    """The MLIR bytecode of `module`: what `text_key` hashes and what a worker parses."""
    f = io.BytesIO()
    module.operation.write_bytecode(f)
    return f.getvalue()


def cache_versions() -> str:
    """This package's version and compiler source fingerprint, and IREE's: part of every key."""
    return (f"iree-torq {installed_version('iree-torq')} ({compiler_source_fingerprint()}), "
            f"iree-base-compiler {installed_version('iree-base-compiler')}")


def text_key(data: bytes, pipeline: list[str], options: PassOptions) -> str:
    """The content address of compiling the one-function module of bytecode `data` with
    `pipeline` and `options`, its constants' values aside (the module docstring)."""
    canonical = ir.Module.parse(data)  # a copy: its name and constants go
    func = canonical.body.operations[0].operation
    func.attributes["sym_name"] = ir.StringAttr.get(_KEY_NAME)
    mask_constant_values(func)
    h = hashlib.sha256()
    for part in (f"torq dispatch cache {CACHE_FORMAT}", cache_versions(), repr(pipeline), repr(options)):
        h.update(part.encode() + b"\0")
    h.update(canonical_text(canonical).encode())
    return h.hexdigest()


def _questions_hash(questions: Questions) -> str:
    return hashlib.sha256(repr(questions).encode()).hexdigest()[:32]


class DispatchCache:
    """Compiled dispatches by text key and constants' answers: in memory, and in `directory`
    when given."""

    def __init__(self, directory: str | None):
        self.directory = directory
        # text key -> {(questions, answers): entry}
        self.memory: dict[str, dict[tuple[Questions, str], Compiled]] = {}
        self.disk_questions: dict[str, list[Questions]] = {}  # text key -> question sets on disk

    def _dir(self, key: str) -> str:
        return os.path.join(self.directory, key[:2], key)

    def get(self, key: str, digest: Callable[[Questions], str]):
        """The entry under `key` whose questions the function answers as its compile did
        (`digest(questions)`: the function's answers, `ConstantArgs.digest`), or None."""
        entries = self._entries(key)
        for questions in dict.fromkeys([q for q, _ in entries] + self._disk_questions(key)):
            answers = digest(questions)
            if (questions, answers) not in entries and self.directory:
                entry = self._load(os.path.join(self._dir(key), f"e-{_questions_hash(questions)}-{answers}.pickle"))
                if entry is not None and entry.constants_read == questions:
                    entries[(questions, answers)] = entry
            if (questions, answers) in entries:
                return entries[(questions, answers)]
        return None

    def put(self, key: str, answers: str, entry: Compiled) -> None:
        """Stores `entry` (a `Compiled` whose `constants_read` are its questions) under `key`,
        with `answers` its function's (`ConstantArgs.digest` of those questions)."""
        questions = entry.constants_read
        self._entries(key)[(questions, answers)] = entry
        if not self.directory:
            return
        qhash = _questions_hash(questions)
        try:
            os.makedirs(self._dir(key), exist_ok=True)
            qpath = os.path.join(self._dir(key), f"q-{qhash}.pickle")
            if not os.path.exists(qpath):
                write_atomically(qpath, pickle.dumps(questions, protocol=pickle.HIGHEST_PROTOCOL))
            write_atomically(os.path.join(self._dir(key), f"e-{qhash}-{answers}.pickle"),
                             pickle.dumps(replace(entry, cached=False), protocol=pickle.HIGHEST_PROTOCOL))
        except OSError:
            pass  # a read-only or full cache directory costs only the next compile's time

    def _entries(self, key: str) -> dict:
        return self.memory.setdefault(key, {})

    def _disk_questions(self, key: str) -> list[Questions]:
        """The question sets stored on disk under `key`, read once per compile."""
        if not self.directory:
            return []
        if key not in self.disk_questions:
            try:
                names = sorted(n for n in os.listdir(self._dir(key)) if n.startswith("q-"))
            except OSError:
                names = []
            found = (self._load(os.path.join(self._dir(key), n), tuple) for n in names)
            self.disk_questions[key] = [q for q in found if q is not None]
        return self.disk_questions[key]

    @staticmethod
    def _load(path: str, kind: type | None = None):
        try:
            with open(path, "rb") as f:
                value = pickle.load(f)
        except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError):
            return None  # absent, or written by another version: compile afresh
        return value if isinstance(value, kind or Compiled) else None
