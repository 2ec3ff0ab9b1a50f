"""Where a tensor kept on chip lives: its home cores and chunk size (the NOC address space)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

CHUNK_ALIGN = 64  # bytes: each home reserves its chunk rounded up to this


@dataclass(frozen=True, slots=True)
class OnChip:
    """Where an on-chip tensor lives: `chunk` elements on each home core in turn."""

    homes: tuple[tuple[int, int], ...]  # (row, col) of the core holding chunk i
    chunk: int  # elements per home (the last home may hold fewer)
    # NOTE: lowering only (the stream sees addresses): a handoff inside a sub-batch loop holds
    # `slots` sub-batches of `slot` elements each, slice j in slot j mod slots (0: it all)
    slot: int = 0
    slots: int = 1

    def hops(self, core: tuple[int, int], lo: int, hi: int) -> int:
        """Mesh hops from `core` to the farthest home of elements [lo, hi)."""
        if hi <= lo:
            return 0
        first, last = lo // self.chunk, (hi - 1) // self.chunk
        return max(abs(r - core[0]) + abs(c - core[1]) for r, c in self.homes[first : last + 1])

    def text(self) -> str:
        """`homes=[r,c;r,c] chunk=N` (the stream's and the tiled text's form)."""
        homes = ";".join(f"{r},{c}" for r, c in self.homes)
        return f"homes=[{homes}] chunk={self.chunk}"


def parse_onchip(tokens: Sequence[str]) -> OnChip:
    """Parse `homes=[r,c;...] chunk=N` (ValueError if malformed)."""
    if len(tokens) != 2 or not tokens[0].startswith("homes=[") or not tokens[0].endswith("]"):
        raise ValueError("expected 'homes=[ROW,COL;...] chunk=N'")
    homes = []
    for item in tokens[0][len("homes=[") : -1].split(";"):
        r, _, c = item.partition(",")
        if not r.isdigit() or not c.isdigit():
            raise ValueError(f"bad home '{item[:40]}'")
        homes.append((int(r), int(c)))
    key, _, value = tokens[1].partition("=")
    if key != "chunk" or not value.isdigit() or int(value) == 0:
        raise ValueError("expected chunk=N (N > 0)")
    return OnChip(tuple(homes), int(value))


def chunk_bytes(chunk: int, elem_bytes: int) -> int:
    """Bytes a home reserves for one chunk."""
    return -(-chunk * elem_bytes // CHUNK_ALIGN) * CHUNK_ALIGN
