"""`iree-compile --iree-hal-target-backends=torq`: IREE's own launcher, with the Torq target.

iree-torq ships no `iree-compile` console script: one would overwrite iree-base-compiler's
launcher in bin/, and uninstalling iree-torq would then delete it. Instead `iree_torq.pth`
(site-packages root, put there by python/_torq_build.py) runs `install()` at every interpreter start.

Contract:
- Startup: install() puts one finder on sys.meta_path and imports nothing (not torq, not
  iree); the finder answers only for LAUNCHER, the module of iree-base-compiler's
  `iree-compile` console script, and returns None for every other name.
- When LAUNCHER is imported, its `main` is wrapped: a command line that wants_torq() runs
  torq.compiler.tools.iree_compile_main (what `iree-compile` ran when iree-torq shipped it);
  any other runs IREE's main untouched, with the arguments it was given.
- Without iree-torq (uninstalled, or the .pth absent) `iree-compile` is plain IREE's.

This is a top-level module, not torq.*: importing `torq` costs ~20 ms (torq.contract.hw),
which every Python start would pay.
"""

import sys

LAUNCHER = "iree.compiler.tools.scripts.iree_compile.__main__"
TORQ_TARGETS = ("--iree-hal-target-backends=torq", "--iree-hal-target-device=torq")
# --compile-to= of compiler/pipeline.py's TORQ_PHASES (tests/e2e/test_iree_compile_launcher.py checks).
TORQ_PHASE_FLAGS = ("--compile-to=torq-hl", "--compile-to=nss")


def wants_torq(argv: list[str]) -> bool:
    """True for a command line that names the Torq target, a Torq flag or a Torq phase."""
    return any(a in TORQ_TARGETS or a in TORQ_PHASE_FLAGS or a.startswith("--torq-") for a in argv)


def wrap_main(iree_main):
    """IREE's launcher `main(args=None)`, sending Torq command lines to our driver."""

    def main(args=None):
        argv = sys.argv[1:] if args is None else list(args)
        if not wants_torq(argv):
            return iree_main(args)
        from torq.compiler.tools import iree_compile_main

        return iree_compile_main(argv)

    main.__wrapped__ = iree_main
    return main


class _Loader:
    """IREE's loader for LAUNCHER, wrapping `main` once the module has run."""

    def __init__(self, loader):
        self._loader = loader

    def __getattr__(self, name):  # get_code, get_source, ...: IREE's loader's own
        return getattr(self._loader, name)

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        module.main = wrap_main(module.main)


class _Finder:
    """sys.meta_path entry: LAUNCHER's ordinary spec with a wrapping loader, None otherwise."""

    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        if fullname != LAUNCHER:
            return None
        from importlib.machinery import PathFinder

        spec = PathFinder.find_spec(fullname, path)
        if spec is None or not hasattr(spec.loader, "exec_module"):
            return None  # not IREE's usual file layout: leave the import to the other finders
        spec.loader = _Loader(spec.loader)
        return spec

    @classmethod
    def invalidate_caches(cls):
        pass


def install() -> None:
    """First on sys.meta_path (PathFinder would otherwise find LAUNCHER first); once."""
    if _Finder not in sys.meta_path:
        sys.meta_path.insert(0, _Finder)
