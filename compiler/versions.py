"""Installed versions of this package and the IREE packages it runs on (--version, cache keys)."""

from __future__ import annotations

import functools
import hashlib
from importlib import metadata
from pathlib import Path


@functools.cache  # the key of every dispatch reads it; installs do not change under a compile
def installed_version(dist: str, missing: str = "not installed") -> str:
    """The installed version of distribution `dist`, or `missing`."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return missing


@functools.cache
def compiler_source_fingerprint() -> str:
    """A sha256 over the source of the packages a dispatch compile runs (torq.compiler and
    torq.contract): the dispatch cache's key holds it, so an edited compiler (a developer's
    tree, where the package version stays the same) never reads what another one wrote."""
    from torq import compiler, contract

    h = hashlib.sha256()
    for package in (compiler, contract):
        root = Path(package.__file__).parent
        for path in sorted(root.rglob("*.py")):
            h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()
