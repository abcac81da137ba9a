"""The footprint model of super tiling's size search: a tiling's LRAM footprint
predicted from tilings of the same shape already lowered, without tiling and
lowering it.

A probe of the search (`TileSearch.footprint`) tiles the root's slice, lowers
it to TorqHL and plans each tile body's LRAM (tile_schedule.plan_body): one
lowering and one allocation per size tried, about 10 ms. Tilings of one
*family* (the same dims tiled, the same loop order, the same reduction loops
tiled) differ in their sizes alone: a tile body has the same buffers with the
same live ranges, and each buffer's extent along each of its dims is an affine
function of the tile sizes (t rows of a slice; a conv's (t - 1) * stride +
kernel input rows). From two or more probes of a family the model fits these
functions and predicts another size's footprint by sizing the same buffer
requests from the predicted shapes (padded for their torq_hl roles,
vector_layout.roles_nbytes) and allocating them
(tile_schedule.one_set_footprint): no tiling, no lowering, no IR.

What it counts: the tile bodies inside every tile loop (full tiles). The last
tile of a peeled loop is smaller than a full one and is left out, as is a body
outside the loops (an op run once) and what a body keeps below a loop
(tile_schedule.kept_across), which the final probe still checks. It
predicts only when the fit reproduces every probe of the family
exactly, the point lies in the span of the probes (along the line of a 1-D
search's probes; a 2-D family needs three probes not on one line), and every
predicted extent is a positive integer; otherwise None. The search confirms
the size it chooses with a real probe, so a wrong prediction costs a probe,
never a tiling that does not fit (fit_search.largest_fitting_size).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from iree.compiler import ir

from ..ir_utils import element_type, mlir_dtype, static_shape
from ..lram_allocator import BufferRequest
from ..passes import PassOptions
from ..passes.assign_lram_addresses import plan_bodies
from ..patterns.row_gather import gather_index_bytes
from ..tile_schedule import enclosing_loops, one_set_footprint
from ..vector_layout import padded_value_nbytes, roles_nbytes, value_roles


@dataclass(frozen=True)
class BodyLayout:
    """A tile body's buffer requests as data: per value (request order) its live span, whether
    it stays resident, its dtype, rank and torq_hl roles (op, sorted attrs, role)."""
    spans: tuple[tuple[int, int], ...]
    resident: tuple[bool, ...]
    last: int  # the body's last event (resident buffers live 0..last)
    dtypes: tuple[str, ...]
    ranks: tuple[int, ...]
    roles: tuple[tuple, ...]

    def footprint(self, shapes: list[tuple[int, ...]], options: PassOptions) -> int:
        """The body's fit (`BodyPlan.footprint`) with its values of `shapes`."""
        hw = options.hw
        requests = [BufferRequest(i, roles_nbytes(shape, dtype, [(op, dict(attrs), role) for op, attrs, role in roles],
                                                  hw), start, end)
                    for i, (shape, dtype, roles, (start, end))
                    in enumerate(zip(shapes, self.dtypes, self.roles, self.spans))]
        resident = {i for i, r in enumerate(self.resident) if r}
        return one_set_footprint(requests, resident, self.last, hw.lram_alignment)


@dataclass(frozen=True)
class Measured:
    """A probe: the allocator's footprint of a lowered tiling, and what the model reads of it:
    its full-tile bodies (inside every tile loop), each a layout and its values' shapes; None
    when the model does not size some body (a gathered box also holds ids)."""
    footprint: int
    full: tuple[tuple[BodyLayout, tuple[tuple[int, ...], ...]], ...] | None


def measure(func: ir.Operation, options: PassOptions) -> Measured:
    """The footprint of lowered tiling `func` (assign_lram_addresses.lram_footprint) and its
    bodies' layouts, from one planning pass."""
    facts: dict = {}
    modelled = True

    def nbytes(v: ir.Value) -> int:
        nonlocal modelled
        if gather_index_bytes(v):  # a gathered box also holds its ids
            modelled = False
            return padded_value_nbytes(v, options.hw)
        if v not in facts:
            roles = value_roles(v)
            # Distinct roles: a value hoisted out of a peeled loop is read alike by both tiles' ops.
            facts[v] = (static_shape(v.type), mlir_dtype(element_type(v.type)),
                        tuple(sorted({(op, tuple(sorted(attrs.items())), role) for op, attrs, role in roles})))
            facts[v] += (roles_nbytes(facts[v][0], facts[v][1], roles, options.hw),)
        return facts[v][3]

    plans = plan_bodies(func, options, nbytes)
    footprint = max((p.footprint for _, p in plans), default=0)
    if not modelled or not plans:
        return Measured(footprint, None)
    bodies = []
    for block, plan in plans:
        values = [facts[r.key] for r in plan.requests]
        layout = BodyLayout(tuple((r.start, r.end) for r in plan.requests),
                            tuple(r.key in plan.resident for r in plan.requests), len(plan.events) - 1,
                            tuple(f[1] for f in values), tuple(len(f[0]) for f in values),
                            tuple(f[2] for f in values))
        bodies.append((len(enclosing_loops(block)), (layout, tuple(f[0] for f in values))))
    depth = max(d for d, _ in bodies)
    return Measured(footprint, tuple(b for d, b in bodies if d == depth))


class FootprintModel:
    """The probes of one family (points: the sizes of its tiled dims) and what they predict."""

    def __init__(self, options: PassOptions):
        self.options = options
        self.probes: list[tuple[tuple[int, ...], Measured]] = []
        self._fit: tuple | None = None  # the fit of the probes (`_fit_probes`), () when none

    def add(self, point: tuple[int, ...], measured: Measured) -> None:
        if measured.full is not None:
            self.probes.append((point, measured))
            self._fit = None

    def predict(self, point: tuple[int, ...]) -> int | None:
        """The footprint of the family's tiling at `point`, or None where the model does not know."""
        fit = self._fitted()
        if fit is None:
            return None
        layouts, coeffs, span_rank, a = fit
        x = np.array([1.0, *point])
        if np.linalg.matrix_rank(np.vstack([a, x])) != span_rank:
            return None  # off the probes' span: a size of a dim they never varied
        flat = x @ coeffs
        extents = np.rint(flat)
        if np.any(np.abs(flat - extents) > 1e-6) or np.any(extents < 1):
            return None
        footprint, it = 0, iter(extents.astype(int).tolist())
        for layout in layouts:
            shapes = [tuple(next(it) for _ in range(n)) for n in layout.ranks]
            footprint = max(footprint, layout.footprint(shapes, self.options))
        return footprint

    def _fitted(self):
        if self._fit is None:
            self._fit = self._fit_probes() or ()
        return self._fit or None

    def _fit_probes(self):
        """The affine fit of the full tiles' extents over the probes whose full-tile bodies
        have the latest probe's layouts: (those layouts, coefficients, rank of the probes'
        span, their points' matrix); None without two such probes or an exact fit."""
        if not self.probes:
            return None
        layouts = _layouts(self.probes[-1][1])
        group = [(p, m) for p, m in self.probes if _layouts(m) == layouts]
        if len(group) < 2:
            return None
        a = np.array([[1.0, *p] for p, _ in group])
        y = np.array([[e for _, shapes in m.full for shape in shapes for e in shape] for _, m in group], dtype=float)
        coeffs = np.linalg.lstsq(a, y, rcond=None)[0]
        if y.size and np.max(np.abs(a @ coeffs - y)) > 1e-6:
            return None  # not affine in the tile sizes
        return layouts, coeffs, np.linalg.matrix_rank(a), a


def _layouts(m: Measured) -> tuple[BodyLayout, ...]:
    """The full-tile bodies' layouts: what two probes must share to be fitted together."""
    return tuple(layout for layout, _ in m.full)
