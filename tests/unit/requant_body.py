"""The requantization body of a one-generic MLIR function, for tests of the f32 chain's users."""

from iree.compiler import ir


def parsed_body(text: str, ctx: ir.Context):
    """(the module, the body's ops but the yield, the value yielded, the block's arguments) of
    the only linalg.generic of the first function in `text`; keep the module alive while the
    ops are used."""
    module = ir.Module.parse(text, ctx)
    generic = [op.operation for op in module.body.operations[0].regions[0].blocks[0].operations
               if op.operation.name == "linalg.generic"][0]
    ops = [o.operation for o in generic.regions[0].blocks[0].operations]
    return module, ops[:-1], ops[-2].results[0], generic.regions[0].blocks[0].arguments
