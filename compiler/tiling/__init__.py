"""Super tiling's parts outside the pass (passes/super_tiling.py): `roots`,
`transform` (tiling on the IR), `cost` (the cost oracle), `search` (default and
traffic strategies) and `seed` (the seed strategy)."""
