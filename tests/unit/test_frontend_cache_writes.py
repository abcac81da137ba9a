"""compiler/frontend_cache.py: an entry written on a thread while the compile goes on is
whole on disk once `flush` returns, and no partial file is ever visible under its name."""

import os

from torq.compiler.frontend_cache import FrontendCache


def test_entry_written_beside_is_on_disk_after_flush(tmp_path):
    cache = FrontendCache(str(tmp_path))
    data = os.urandom(1 << 20)
    cache.put_beside("k" * 64, data)
    cache.flush()
    assert cache.get("k" * 64) == data
    assert cache.writers == []
    assert not [p for p in (tmp_path / "frontend").iterdir() if p.name != "k" * 64 + ".mlirbc"]  # no temp file left


def test_unwritable_directory_costs_nothing(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    cache = FrontendCache(str(blocker))  # frontend/ cannot be made under a file
    cache.put_beside("k" * 64, b"x")
    cache.flush()  # the write failed quietly on its thread: only the next compile's time is lost
    assert cache.get("k" * 64) is None


def test_key_of_a_large_input_sees_every_byte():
    """The key of an input over one chunk (hashed chunk by chunk on threads) changes with any
    byte, the length, the name and the flags, and is the same for the same input."""
    from torq.compiler.frontend_cache import _CHUNK_BYTES, frontend_key

    data = bytearray(os.urandom(2 * _CHUNK_BYTES + 5))
    key = frontend_key(bytes(data), "m.mlir", [])
    assert frontend_key(bytes(data), "m.mlir", []) == key
    for at in (0, _CHUNK_BYTES, len(data) - 1):
        moved = bytearray(data)
        moved[at] ^= 1
        assert frontend_key(bytes(moved), "m.mlir", []) != key
    assert frontend_key(bytes(data[:-1]), "m.mlir", []) != key
    assert frontend_key(bytes(data), "n.mlir", []) != key
    assert frontend_key(bytes(data), "m.mlir", ["-j1"]) != key
