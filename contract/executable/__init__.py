"""The Torq executable: a `Program` serialized as FlatBuffers, and its loader.

Modules: `format` (identifier, versions, enum mappings), `writer`, `schema`
(the parsed .fbs and the structural verifier), `reader`; the semantic checks
are contract/program_validator.py, next to the program model.

Contract:
- `serialize_program(p)` writes `p` with the schema in
  `schemas/torq_executable.fbs` (file identifier "TORQ", `FORMAT_VERSION`).
  By default it first runs `validate_program(p)` against the program's own
  hardware, so a compiler bug is reported at compile time.
- `parse_executable(blob, hw)` checks the blob completely BEFORE anything runs
  and returns the `Program`, or raises `ExecutableError` (a `ValueError`)
  with a one-line message: too short / truncated, wrong file identifier,
  unsupported version (`READABLE_VERSIONS`), corrupted structure (every offset, vector and string
  is bounds-checked against the blob by a verifier driven by the schema, since
  the Python flatbuffers package has none), inconsistent contents (see
  `validate_program`), or an LRAM map that does not fit the device (`hw`, or
  the hardware the program was compiled for when `hw` is None).
- Round trip is exact: `parse_executable(serialize_program(p)) == p` for a
  valid program whose `hw` is a full `TorqHw.to_dict()` and whose attribute
  lists are `list`s (tuples come back as lists; a partial `hw` dict comes back
  completed with `TorqHw` defaults), and serializing the parsed program gives
  the same bytes.
"""

from __future__ import annotations

from ..program_validator import ExecutableError, validate_program
from .format import FILE_IDENTIFIER, FORMAT_VERSION, READABLE_VERSIONS, SCHEMA_PATH
from .reader import parse_executable
from .schema import executable_schema, parse_fbs
from .writer import serialize_program

__all__ = ["ExecutableError", "FILE_IDENTIFIER", "FORMAT_VERSION", "READABLE_VERSIONS", "SCHEMA_PATH",
           "executable_schema", "parse_executable", "parse_fbs", "serialize_program", "validate_program"]
