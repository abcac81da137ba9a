"""torq.contract: what the compiler and the runtime both rely on.

The compiler writes programs that the runtime runs; the facts both sides must
agree on live here, and the compiler imports nothing else from the runtime:

- `hw`          the hardware model (`TorqHw`, presets, `--torq-hw` specs)
- `ops`         the TorqHL op table: each NPU op defined once
- `program`     the NSS program model (tensors, LRAM buffers, commands, epilogues)
- `program_validator`  its semantic checks, run before anything runs a program
- `executable`  its FlatBuffers form (`schemas/`): format, writer, schema verifier, reader
- `timing`      the cycle model, shared by super tiling's cost and the simulator
- `measures`    DDR traffic and LRAM peak of a program
- `module_abi`  the `torq` VM module's entry points that a compiled .vmfb calls
"""
