"""Installed versions of this package and the IREE packages it runs on (--version, cache keys)."""

from __future__ import annotations

from importlib import metadata


def installed_version(dist: str, missing: str = "not installed") -> str:
    """The installed version of distribution `dist`, or `missing`."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return missing
