"""A content-addressed cache of IREE's front end: the module at dispatch creation.

Everything before the Torq target (import, global optimization, dispatch
creation) is a pure function of the input bytes, its buffer name (locations),
the session flags and the compiler versions. Most of a recompile's time is
there: IREE's const-eval (`JitGlobalsPass`) JIT-compiles and runs the
weights' constant expressions with llvm-cpu, 13.5 of MobileNetV3's 14.8 s to
dispatch creation. Recompiling the same model for another Torq hardware
model or flag (a `torq-sweep`, a tiling experiment) repeats none of it: the
module at dispatch creation is kept as MLIR bytecode beside the dispatch
cache (`<cache dir>/frontend/`) and parsed back, and the compile continues
from it exactly as from IREE's own output (the .vmfb is byte for byte the
same, tests/e2e/test_frontend_cache.py).

The key holds the input bytes, its name, the flags, this package's compiler
source fingerprint (the PT2E rewrite and signature attachment run before the
phase) and the IREE compiler version. Entries over `MAX_ENTRY_BYTES` are not
written (a model with gigabytes of inline weights would fill the disk; its
weights belong in an external parameter archive anyway).
"""

from __future__ import annotations

import hashlib
import os
import threading
from concurrent.futures import ThreadPoolExecutor

from .dispatch_cache import cache_versions
from .files import write_atomically

FORMAT = 2
MAX_ENTRY_BYTES = 1 << 30
# The input is hashed in chunks of this many bytes, on a thread per core (hashlib releases
# the GIL while it hashes), and the key hashes their digests: ViT x12 with inline weights
# (692 MB of MLIR text) hashed in 0.56 s on one core, a warm recompile's largest share after
# IREE's own work.
_CHUNK_BYTES = 32 << 20


def frontend_key(data: bytes, source_name: str, flags: list[str]) -> str:
    h = hashlib.sha256()
    for part in (f"torq frontend cache {FORMAT}", cache_versions(), source_name, repr(flags)):
        h.update(part.encode() + b"\0")
    h.update(len(data).to_bytes(8, "little"))
    view = memoryview(data)
    chunks = [view[i:i + _CHUNK_BYTES] for i in range(0, len(data), _CHUNK_BYTES)]
    if len(chunks) > 1:
        with ThreadPoolExecutor(min(len(chunks), os.cpu_count() or 1)) as pool:
            digests = list(pool.map(lambda c: hashlib.sha256(c).digest(), chunks))
    else:
        digests = [hashlib.sha256(c).digest() for c in chunks]
    h.update(b"".join(digests))
    return h.hexdigest()


class FrontendCache:
    """Modules at dispatch creation (MLIR bytecode) by key, in `directory`. `put_beside`
    writes an entry on a thread while the compile goes on (a file write holds no Python
    lock: ViT-B/16's 344 MB entry took 0.74 s on the compile's path); `flush` waits for it,
    so a compile's entry is on disk when the compile returns."""

    def __init__(self, directory: str):
        self.directory = os.path.join(directory, "frontend")
        self.writers: list[threading.Thread] = []

    def _path(self, key: str) -> str:
        return os.path.join(self.directory, key + ".mlirbc")

    def get(self, key: str) -> bytes | None:
        try:
            with open(self._path(key), "rb") as f:
                return f.read()
        except OSError:
            return None

    def put(self, key: str, data: bytes) -> None:
        if len(data) > MAX_ENTRY_BYTES:
            return
        try:
            os.makedirs(self.directory, exist_ok=True)
            write_atomically(self._path(key), data)
        except OSError:
            pass  # a read-only or full cache directory costs only the next compile's time

    def put_beside(self, key: str, data: bytes) -> None:
        writer = threading.Thread(target=self.put, args=(key, data), name="torq-frontend-cache")
        writer.start()
        self.writers.append(writer)

    def flush(self) -> None:
        for writer in self.writers:
            writer.join()
        self.writers = []
