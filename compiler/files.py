"""Files the compiler writes whole or not at all."""

from __future__ import annotations

import os
import tempfile


def write_atomically(path: str, data: bytes) -> None:
    """Write `data` to `path` via a temp file so no partial file is left."""
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".torq-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
