"""A worker process of `dispatch_compile` (`python -m torq.compiler.dispatch_worker`).

It reads tasks from stdin and writes outcomes to stdout, each one pickle frame:
a task is (function bytecode, pipeline, PassOptions), its outcome the
`Compiled` or `Refused` record `dispatch_compile._compile_bytecode` gives. Its
arguments name modules to import before the first task (`dispatch_compile.QDQ_PRELOAD`). A
plain subprocess, not multiprocessing: a spawned multiprocessing child
re-imports the user's main script, which breaks any script that calls
`torq.compile` without an `if __name__ == "__main__"` guard. Anything the
compiler prints goes to stderr; stdout carries only the frames.
"""

from __future__ import annotations

import os
import pickle
import sys


def main() -> int:
    frames = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # stray prints must not corrupt the frames
    from torq.compiler.dispatch_compile import _compile_bytecode, import_ahead, keep_freed_memory

    keep_freed_memory()
    import_ahead(tuple(sys.argv[1:]))

    tasks = sys.stdin.buffer
    while True:
        try:
            data, pipeline, options = pickle.load(tasks)
        except EOFError:
            # Every outcome is flushed: exit without the interpreter's teardown (freeing the
            # MLIR context and the modules took 0.16 s, which the compile waited for).
            sys.stderr.flush()
            os._exit(0)
        pickle.dump(_compile_bytecode(data, pipeline, options), frames, protocol=pickle.HIGHEST_PROTOCOL)
        frames.flush()


if __name__ == "__main__":
    sys.exit(main())
