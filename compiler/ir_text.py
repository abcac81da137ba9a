"""IR printed for hashing: the same text for the same computation whatever the
names its constants' blobs were given and wherever it came from in the model.

`canonical_text` is what the dispatch cache hashes (every byte of every
constant in the text counts; compiler/dispatch_cache.py takes the values of a
function's constant arguments out first, and asks for those the compile
read); `structure_text` leaves the blobs' bytes out, for what is a
function of shapes and types alone (super tiling's choices, which dispatches
one worker should compile one after the other)."""

from __future__ import annotations

import re

from iree.compiler import ir

# A constant's blob name in printed IR, and one resource (bare or quoted name) in the
# resource section at the end.
_RESOURCE_USE = re.compile(r"dense_resource<([^>]+)>")
_SYM_NAME = re.compile(r'sym_name = "(?:[^"\\]|\\.)*"')
_RESOURCE_ENTRY = re.compile(r'^\s*("(?:[^"\\]|\\.)*"|[^\s:]+): "(0x[0-9A-Fa-f]*)",?\s*$', re.M)


def _parts(op: ir.Operation, blobs: bool = True) -> tuple[str, dict[str, int], str, str]:
    """(body with blobs renamed by first use, the renaming, the section mark, the resource
    section: empty unless `blobs`)."""
    text = op.get_asm(print_generic_op_form=True, large_resource_limit=None if blobs else 0)
    body, mark, resources = text.partition("{-#")
    order: dict[str, int] = {}
    body = _RESOURCE_USE.sub(lambda m: f"dense_resource<r{order.setdefault(m.group(1), len(order))}>", body)
    return body, order, mark, resources


def canonical_text(module: ir.Module) -> str:
    """`module` printed without locations, its blobs named by their order of first use
    (unused ones keep their names) and listed in that order: a parse names a blob after
    its first holder, uniqued in the context (`_5` or `_21` after the same name,
    depending on what the context parsed before), so the names differ between two
    compiles of one model (one from IREE's front end, one from the front-end cache)
    while the blobs' bytes do not. A resource entry of another form stays in the text
    as printed: it may cost a miss, never a false hit."""
    body, order, mark, resources = _parts(module.operation)
    entries = sorted((f"r{order[n]:09d}" if n in order else n, blob)
                     for n, blob in _RESOURCE_ENTRY.findall(resources))
    return body + mark + _RESOURCE_ENTRY.sub("", resources) + "".join(f"\n{n}: {b}" for n, b in entries)


def structure_text(op: ir.Operation) -> str:
    """`op` printed without locations, symbol names (a dispatch function's says where it
    sits in the model; nothing in one refers to another symbol) and its blobs' bytes
    (blobs named by first use): two layers of a model, which differ only in their
    weights, print the same. Inline constants (`dense<...>`, scalars) stay in the text."""
    return _SYM_NAME.sub('sym_name = ""', _parts(op, blobs=False)[0])
