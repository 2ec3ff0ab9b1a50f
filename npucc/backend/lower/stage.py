"""Constants staged on chip: a split loop's weights copied once from DDR into their homes.

`plan_onchip` keeps the constants of a split sub-batch loop's cube layers on chip when they fit
(`staged_key`). Before the first sub-batch reads one, each home core copies its chunk from DDR
through UB into its on-chip buffer, a piece at a time (`stage_piece`: two fit UB's tile share,
so one piece's load overlaps the previous one's store); the sub-batches then read it over the
NoC.
"""

from __future__ import annotations

from npucc.backend.hypercut.onchip_plan import stage_piece
from npucc.backend.lower.builder import MeshBuilder, TileBuilder
from npucc.ir.isa import Copy, DdrRef
from npucc.ir.onchip import OnChip


def stage_chunk(builder: TileBuilder, src: DdrRef, dst: DdrRef, elems: int) -> None:
    """Copy `elems` elements from DDR `src` to the on-chip `dst` on one core, through UB."""
    piece = stage_piece(builder.target)
    for p0 in range(0, elems, piece):
        n = min(piece, elems - p0)
        buf = builder.alloc("UB", n, f"{dst.key}.stage")
        builder.emit(Copy(buf, src.at(p0), (n,), (1,), (1,)))
        builder.emit(Copy(dst.at(p0), buf, (n,), (1,), (1,)))
        builder.free(buf)


def stage_const(
    mesh: MeshBuilder, src: DdrRef, key: str, elems: int, home: OnChip, cols: int
) -> list[tuple[int, int]]:
    """Stage `elems` elements of the constant at `src` into on-chip tensor `key`: each home
    core its chunk; the (core, BARRIER) closes its readers wait for."""
    for i, (r, c) in enumerate(home.homes):
        lo = i * home.chunk
        size = min(home.chunk, elems - lo)
        stage_chunk(mesh.builders[r * cols + c], src.at(lo), DdrRef(key, lo), size)
    return mesh.close_ddr(key, 0, elems)
