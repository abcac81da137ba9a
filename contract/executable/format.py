"""The Torq executable's format: identifier, versions, schema, and the mappings
between the program model's strings and the schema's enums (writer and reader
share them)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ..hw import TorqHw
from ..program import DTYPE_BYTES, TENSOR_KINDS, Compute, DmaIn, DmaOut, Program
from ..program_validator import ExecutableError
from ..schemas.torq_fb import Hw as fbHw
from ..schemas.torq_fb.Command import Command as CommandType
from ..schemas.torq_fb.DType import DType
from ..schemas.torq_fb.RefKind import RefKind
from ..schemas.torq_fb.TensorKind import TensorKind

FILE_IDENTIFIER = b"TORQ"
# Bump when a reader of the previous version could misread a new blob.
# `version` must stay the first field of table Program in every version.
# 2: TensorDesc.aliases (in-place outputs; a version 1 reader would ignore it
#    and leave the untouched part of such an output zero).
# Compute.split (a compute run on several slices at once) was appended without a bump:
# it changes timing only, a blob without it reads split = 1, and a reader without it
# computes the same outputs.
# Program.source (where the dispatch came from in the model) was appended the same way: a
# blob without it reads "", and a reader without it runs the same program.
# 3: DmaIn's gather form (index_buffer, index_dtype, index_bound) and the i64 dtype; a
#    version 2 reader would read a gather as a plain box. Only a program with a gather or
#    an i64 tensor is written as version 3 (`blob_version`): every other blob stays
#    readable by version 2 readers, byte for byte as before; a reader refuses a blob
#    whose content its version does not have.
# 4: DmaOut's scatter form (index_buffer, index_dtype, index_bound, index_dim); a version 3
#    reader would read a scatter as a plain box. Only a program with a scatter is written
#    as version 4; every other blob is written as before (3 with a gather or an i64 tensor,
#    else 2), byte for byte.
# 5: DmaIn's strided form (strides); a version 4 reader would read a strided box as a
#    plain one. Only a program with a strided DmaIn is written as version 5; every other
#    blob is written as before, byte for byte.
FORMAT_VERSION = 5
# Versions this reader parses: a version 1 blob is a version 2 blob without aliases, a
# version 2 blob a version 3 blob without gathers, a version 3 blob a version 4 blob
# without scatters, a version 4 blob a version 5 blob without strided DMA.
READABLE_VERSIONS = (1, 2, 3, 4, 5)
SCHEMA_PATH = Path(__file__).parent.parent / "schemas" / "torq_executable.fbs"

HEADER_BYTES = 8  # root offset + file identifier


# What each version from 3 on added, as a reader names it when a blob of an older version
# holds it.
VERSION_CONTENT = {3: "gather DMA or i64 tensor", 4: "scatter DMA", 5: "strided DMA"}


def blob_version(p: Program) -> int:
    """The version a blob of `p` is written as: the oldest whose readers read it right."""
    if any(isinstance(c, DmaIn) and c.strided for c in p.commands):
        return 5
    if any(isinstance(c, DmaOut) and c.scatters for c in p.commands):
        return 4
    gathers = any(isinstance(c, DmaIn) and c.gathers for c in p.commands)
    return 3 if gathers or any(t.dtype == "i64" for t in p.tensors) else 2


# --------------------------------------------------------------------------
# Enum mappings (data model strings <-> schema enums)

DTYPE_CODES: dict[str, int] = {name: getattr(DType, name) for name in DTYPE_BYTES}
TENSOR_KIND_CODES: dict[str, int] = {kind: getattr(TensorKind, kind.capitalize()) for kind in TENSOR_KINDS}
REF_KIND_CODES: dict[str, int] = {"value": RefKind.Value, "operand": RefKind.Operand, "const": RefKind.Const}
COMMAND_CODES: dict[type, int] = {DmaIn: CommandType.DmaIn, DmaOut: CommandType.DmaOut, Compute: CommandType.Compute}


def inverse(d: dict[str, int]) -> dict[int, str]:
    return {v: k for k, v in d.items()}


def accessor_name(name: str) -> str:
    """flatc's Python accessor name for a snake_case field."""
    return "".join(part[:1].upper() + part[1:] for part in name.split("_"))


HW_FIELDS = [(f.name, type(getattr(TorqHw(), f.name))) for f in dataclasses.fields(TorqHw)]


def check_hw_schema() -> None:
    missing = [name for name, _ in HW_FIELDS if not hasattr(fbHw, "Add" + accessor_name(name))]
    if missing:
        raise ExecutableError(
            f"the executable schema lacks TorqHw fields {missing}: add them to table Hw in "
            "contract/schemas/torq_executable.fbs and run build_tools/regen_schema.sh"
        )
