"""Where a tensor kept on chip lives: its home cores, chunk size, place in their buffers and life.

A tensor's NOC addresses name it (they never overlap); its bytes lie in its homes' on-chip
buffers at byte `at` of each. Two tensors may share a home's bytes when their lives (`live`:
the first and last positions, in the program's layer order, at which they are accessed) are
disjoint: the verifier checks that, and the interpreter that every access of the earlier one
happens before every access of the later one (flags). Two one-slot handoffs of one sub-batch
loop may also share bytes while both live when their turns (`turn`: the first and last positions
of their accesses in the loop's first sub-batch) are disjoint: the bytes pass from one to the
other every sub-batch, and the interpreter checks that every access is ordered after every
earlier access of the other (flags). A tensor whose sub-batch slices are accessed at different
times (a sub-batch loop's whole input or output) may carry a life per home (`lives`: the first
and last positions at which that home's elements are accessed); then each home's bytes are
shared by that home's life, which the verifier and the interpreter check home by home.
"""

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
    at: int = 0  # byte offset of its chunk in each home's on-chip buffer
    live: tuple[int, int] = (0, 0)  # first and last layer positions accessing it
    turn: tuple[int, int] | None = None  # a one-slot handoff's positions in its loop's first pass
    lives: tuple[tuple[int, int], ...] | None = None  # per home, when not all `live`

    def life(self, home: int) -> tuple[int, int]:
        """The first and last positions at which home `home` (an index in `homes`) is accessed."""
        return self.live if self.lives is None else self.lives[home]

    def shares(self, other: OnChip, elem_bytes: int) -> bool:
        """Whether the two tensors share bytes of some home's buffer (whatever their lives)."""
        mine, theirs = chunk_bytes(self.chunk, elem_bytes), chunk_bytes(other.chunk, elem_bytes)
        if self.at >= other.at + theirs or other.at >= self.at + mine:
            return False
        return not set(self.homes).isdisjoint(other.homes)

    def meets(self, other: OnChip) -> bool:
        """Whether the two lives overlap."""
        return self.live[0] <= other.live[1] and other.live[0] <= self.live[1]

    def common(self, other: OnChip) -> list[tuple[int, int]]:
        """The homes both hold, as (index in self.homes, index in other.homes)."""
        theirs = {h: i for i, h in enumerate(other.homes)}
        return [(i, theirs[h]) for i, h in enumerate(self.homes) if h in theirs]

    def clashes(self, other: OnChip, elem_bytes: int) -> bool:
        """Whether the two hold the same bytes of a home while both live there (and do not
        take turns with them)."""
        if not self.shares(other, elem_bytes) or self.alternates(other):
            return False
        if self.lives is None and other.lives is None:
            return self.meets(other)
        for i, j in self.common(other):
            (a, b), (c, d) = self.life(i), other.life(j)
            if a <= d and c <= b:
                return True
        return False

    def precedes(self, other: OnChip) -> bool:
        """Whether on some home both hold this one's life ends before the other's starts."""
        if self.lives is None and other.lives is None:
            return self.live[1] < other.live[0]
        return any(self.life(i)[1] < other.life(j)[0] for i, j in self.common(other))

    def alternates(self, other: OnChip) -> bool:
        """Whether the two take turns with shared bytes (`turns_apart`)."""
        return turns_apart(self.turn, other.turn)

    def hops(self, core: tuple[int, int], lo: int, hi: int) -> int:
        """Mesh hops from `core` to the farthest home of elements [lo, hi)."""
        if hi <= lo:
            return 0
        first, last = lo // self.chunk, (hi - 1) // self.chunk
        y, x = core
        if first == last:  # NOTE: most copies lie in one chunk: no generator for them
            r, c = self.homes[first]
            return abs(r - y) + abs(c - x)
        return max(abs(r - y) + abs(c - x) for r, c in self.homes[first : last + 1])

    def text(self) -> str:
        """`homes=[r,c;r,c] chunk=N at=OFF live=A..B [turn=C..D] [lives=[A..B;...]]` (the
        stream's and the tiled text's form)."""
        homes = ";".join(f"{r},{c}" for r, c in self.homes)
        first, last = self.live
        text = f"homes=[{homes}] chunk={self.chunk} at={self.at} live={first}..{last}"
        if self.turn is not None:
            text += f" turn={self.turn[0]}..{self.turn[1]}"
        if self.lives is not None:
            text += " lives=[" + ";".join(f"{a}..{b}" for a, b in self.lives) + "]"
        return text


def turns_apart(a: tuple[int, int] | None, b: tuple[int, int] | None) -> bool:
    """Whether two one-slot handoffs may take turns with shared bytes while both live: both
    have turns, and they are disjoint."""
    return a is not None and b is not None and (a[1] < b[0] or b[1] < a[0])


def parse_onchip(tokens: Sequence[str]) -> OnChip:
    """Parse `homes=[r,c;...] chunk=N at=OFF live=A..B [turn=C..D] [lives=[A..B;...]]`
    (ValueError if malformed)."""
    tokens = list(tokens)
    lives = None
    if len(tokens) > 4 and tokens[-1].startswith("lives=["):
        lives = _lives(tokens.pop())
    first = tokens[0] if len(tokens) in (4, 5) else ""
    if not first.startswith("homes=[") or not first.endswith("]"):
        raise ValueError(
            "expected 'homes=[ROW,COL;...] chunk=N at=OFF live=A..B [turn=C..D] [lives=[A..B;...]]'"
        )
    homes = []
    for item in tokens[0][len("homes=[") : -1].split(";"):
        r, _, c = item.partition(",")
        if not r.isdigit() or not c.isdigit():
            raise ValueError(f"bad home '{item[:40]}'")
        homes.append((int(r), int(c)))
    key, _, value = tokens[1].partition("=")
    if key != "chunk" or not value.isdigit() or int(value) == 0:
        raise ValueError("expected chunk=N (N > 0)")
    key, _, at = tokens[2].partition("=")
    if key != "at" or not at.isdigit():
        raise ValueError("expected at=OFF")
    live = _interval(tokens[3], "live")
    turn = _interval(tokens[4], "turn") if len(tokens) == 5 else None
    if lives is not None:
        if len(lives) != len(homes):
            raise ValueError(f"lives: {len(lives)} intervals for {len(homes)} homes")
        if min(a for a, _ in lives) != live[0] or max(b for _, b in lives) != live[1]:
            raise ValueError("lives: their hull must be live")
    return OnChip(tuple(homes), int(value), at=int(at), live=live, turn=turn, lives=lives)


def _lives(token: str) -> tuple[tuple[int, int], ...]:
    """Parse `lives=[A..B;C..D;...]`, a life per home."""
    if not token.endswith("]"):
        raise ValueError("expected lives=[A..B;...]")
    items = token[len("lives=[") : -1].split(";")
    return tuple(_interval(f"lives={item}", "lives") for item in items)


def _interval(token: str, name: str) -> tuple[int, int]:
    """Parse `NAME=FIRST..LAST` (FIRST <= LAST)."""
    key, _, value = token.partition("=")
    first, _, last = value.partition("..")
    if key != name or not first.isdigit() or not last.isdigit() or int(last) < int(first):
        raise ValueError(f"expected {name}=FIRST..LAST (FIRST <= LAST)")
    return int(first), int(last)


def chunk_bytes(chunk: int, elem_bytes: int) -> int:
    """Bytes a home reserves for one chunk."""
    return -(-chunk * elem_bytes // CHUNK_ALIGN) * CHUNK_ALIGN
