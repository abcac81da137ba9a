"""Typed errors of the Torq runtime (`torq.runtime`).

Every failure a user can cause or meet while loading or running a module is a
`TorqRuntimeError`, with a one-line message that says what and where:

- `ModuleLoadError`: the .vmfb cannot be read or instantiated
  ("not a valid .vmfb: <path>: <reason>", or an import the runtime lacks).
- `InputError` (also a `ValueError`): a call got the wrong number of inputs,
  or an input of the wrong shape or dtype; names the function, the input
  index (also as `.index`), what was expected and what was given. Raised
  before the VM is invoked.
- `DispatchError`: a Torq dispatch failed in the executable loader or the
  simulator. Its message keeps the original `ExecutableError` /
  `SimulatorError` message (also available as `__cause__`), prefixed with
  the dispatch that failed.
- `InvocationError`: the IREE host code failed (e.g. a shape assertion in the
  compiled module); keeps IREE's message.
"""

from __future__ import annotations


class TorqRuntimeError(RuntimeError):
    """Base of every error the Torq runtime raises for a module or a call."""


class ModuleLoadError(TorqRuntimeError):
    """A module that cannot be loaded."""


class InputError(TorqRuntimeError, ValueError):
    """Wrong inputs for a function (count, shape or dtype).

    `index` is the position of the offending input (None for a wrong count).
    """

    def __init__(self, message: str, index: int | None = None) -> None:
        super().__init__(message)
        self.index = index


class DispatchError(TorqRuntimeError):
    """A Torq dispatch whose executable could not be loaded or simulated."""

    def __init__(self, message: str, dispatch: str = "") -> None:
        super().__init__(message)
        self.dispatch = dispatch


class InvocationError(TorqRuntimeError):
    """The host (IREE) part of a call failed."""
