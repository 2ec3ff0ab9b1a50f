"""The lowering's write gates on on-chip tensors, as the estimate links a plan's runs.

The lowering (`npucc.backend.lower._Parts`) makes the writes of an on-chip tensor wait for
earlier layers: a handoff's slice in a slot used before waits for the layers that read the
slot's previous slice; any other first write (a whole tensor, a slot's first use) waits for
the layers that wrote or read the tensors whose bytes it reuses (`OnChip.precedes` and
`OnChip.shares`); a one-slot handoff taking turns with another waits for the reads of the
other's last slice (`OnChip.alternates`). In a pipelined step the layers waited for, though
earlier in lowering order, may end long after the writer's inputs are ready (a stage's last
sub-batch, held back by its consumer's slot gates). `Gates` follows the lowering's order of
runs and answers, per run, the runs its writes wait for; `ExecCostModel._linked` adds them to
the run's inputs (the estimate's writes of a run follow its reads).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from npucc.backend.hypercut.onchip_plan import Placed, Whole, staged_key
from npucc.ir.onchip import OnChip, chunk_bytes


def gate_keys(
    inputs: Sequence[str], lookups: tuple[tuple[int, str], ...], n: int, loop: int
) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """Of a layer's operands a plan may keep on chip (`ExecCostModel._lookups`: position in
    its inputs then outputs, and key), on one of n sub-batches of loop `loop`: every key, its
    outputs' and, split, its non-const inputs' (the slices it reads)."""
    ins = len(inputs)
    consts = {staged_key(t, loop) for t in inputs if t}
    every = tuple(dict.fromkeys(key for _, key in lookups))
    outs = tuple(dict.fromkeys(key for o, key in lookups if o >= ins))
    reads = [key for o, key in lookups if o < ins and n > 1 and key not in consts]
    return every, outs, tuple(dict.fromkeys(reads))


class Tenants:
    """`Gates`' waits of unsplit plans, found from their placements: per layer, the earlier
    tensors whose bytes its outputs may take after their lives, and of the layers that wrote
    or read each (which `Gates` waits for) those not behind every one of its data inputs.

    NOTE: a run's end is no earlier than the release of each of its data inputs, which waits
    for the end of the input's writer plus its flag, and a flag's hops obey the triangle
    inequality (the farthest core of a box from a first core): the end of an ancestor along
    every data input plus its flag never exceeds what each input already waits for, so
    leaving it out prices the same (most of what `Gates` waits for at batch 1: ResNet's chain
    of dead tensors)."""

    __slots__ = ("_behind", "_touched", "_of")

    def __init__(
        self,
        origin: Sequence[tuple[int | None, ...]],
        datas: Sequence[tuple[int, ...]],
        whole: Whole,
    ) -> None:
        # per layer, as bits, its ancestors along data edges (`behind`: those along every one
        # of its data inputs; none if one is a graph input)
        ancestors: list[int] = []
        behind: list[int] = []
        for srcs, data in zip(origin, datas, strict=True):
            bits, common = 0, -1
            for c in data:
                p = srcs[c - 1]
                mine = 0 if p is None else ancestors[p] | 1 << p
                bits |= mine
                common &= mine
            ancestors.append(bits)
            behind.append(common if data else 0)
        self._behind = behind
        # per tensor a plan may keep: its producer, last reader and the layers touching it
        self._touched = [
            (t, j, last, (j, *readers))
            for j, mine in enumerate(whole)
            for t, _, readers, last in mine
        ]
        self._of: dict[int, tuple[tuple[str, tuple[int, ...]], ...]] = {}

    def of(self, layer: int) -> tuple[tuple[str, tuple[int, ...]], ...]:
        """The tensors dead before `layer` with layers touching them not behind all its data
        inputs (those layers)."""
        value = self._of.get(layer)
        if value is None:
            mine = self._behind[layer]
            value = self._of[layer] = tuple(
                (t, rest)
                for t, _, last, by in self._touched
                if last < layer and (rest := tuple(j for j in by if not mine >> j & 1))
            )
        return value

    def waits(
        self, placed: Sequence[Placed], names: Iterable[str], start: int
    ) -> dict[int, set[int]]:
        """Of an unsplit plan's `plan_onchip` placements (of tensors `names`, in order) from
        `start` on: per layer whose outputs take bytes of earlier tensors after their lives on
        some home (`Gates._reused`'s rule), the layers it waits for (`of`'s)."""
        out: dict[int, set[int]] = {}
        at: dict[str, int] | None = None
        for k in range(start, len(placed)):
            lo, hi, first, _, mine, _, _ = placed[k]
            dead = self.of(first)  # NOTE: an unsplit life starts at its producer
            if not dead:
                continue
            if at is None:
                at = {t: i for i, t in enumerate(names)}
            for t, rest in dead:
                i = at.get(t)
                if i is not None:
                    a, b, _, _, theirs, _, _ = placed[i]
                    if mine & theirs and a < hi and lo < b:
                        out.setdefault(first, set()).update(rest)
        return out


class Gates:
    """Who touched and who read each on-chip tensor so far, run by run in lowering order."""

    __slots__ = ("onchip", "elem_bytes", "touched", "read", "_before", "_ranges")

    def __init__(self, onchip: dict[str, OnChip], elem_bytes: int) -> None:
        self.onchip = onchip
        self.elem_bytes = elem_bytes
        # NOTE: per key, the last run of each layer that touched it (a layer's runs share its
        # cores, so its last one ends last); `read` the same per (handoff key, sub-batch)
        self.touched: dict[str, dict[int, int]] = {}
        self.read: dict[tuple[str, int], dict[int, int]] = {}
        self._before: dict[str, tuple[str, ...]] = {}  # key -> the keys whose bytes it reuses
        # each on-chip key, where it lives, its byte range and its homes (built when asked)
        self._ranges: list[tuple[str, OnChip, int, int, set[tuple[int, int]]]] | None = None

    def waits(self, keys: Sequence[str], j: int, n: int) -> set[int]:
        """The runs that the writes of output `keys` (of sub-batch j of n) wait for."""
        out: set[int] = set()
        onchip = self.onchip
        for key in keys:
            home = onchip[key]
            if n > 1 and home.slot and j >= home.slots:
                out.update(self.read.get((key, j - home.slots), {}).values())
            else:
                for other in self._reused(key, home):
                    out.update(self.touched.get(other, {}).values())
            if n > 1 and home.turn is not None:
                out.update(self._turns(key, home, j))
        return out

    def note(
        self, run: int, layer: int, keys: Sequence[str], slices: Sequence[str], j: int
    ) -> None:
        """Run `run` of `layer` accessed the on-chip `keys`, of which it read sub-batch j's
        slice of `slices`."""
        touched, read = self.touched, self.read
        for key in keys:
            touched.setdefault(key, {})[layer] = run
        for key in slices:
            read.setdefault((key, j), {})[layer] = run

    def gate(
        self, run: int, layer: int, keys: tuple[tuple[str, ...], ...], j: int, n: int
    ) -> set[int]:
        """The runs that run `run` of `layer` (sub-batch j of n) waits for, its `gate_keys`
        kept on chip; then note its on-chip accesses."""
        every, outs, slices = ([key for key in ks if key in self.onchip] for ks in keys)
        waits = self.waits(outs, j, n) if outs else set()
        self.note(run, layer, every, slices, j)
        return waits

    def _reused(self, key: str, home: OnChip) -> tuple[str, ...]:
        """The on-chip tensors whose bytes `key` takes on some home after their lives."""
        value = self._before.get(key)
        if value is None:
            eb = self.elem_bytes
            if self._ranges is None:
                self._ranges = [
                    (other, was, was.at, was.at + chunk_bytes(was.chunk, eb), set(was.homes))
                    for other, was in self.onchip.items()
                ]
            lo, hi = home.at, home.at + chunk_bytes(home.chunk, eb)
            # NOTE: `was.shares(home)` as its byte ranges (cheap) and its homes, lives between
            value = self._before[key] = tuple(
                other
                for other, was, a, b, homes in self._ranges
                if a < hi and lo < b and was.precedes(home) and not homes.isdisjoint(home.homes)
            )
        return value

    def _turns(self, key: str, home: OnChip, j: int) -> list[int]:
        """The reads a one-slot handoff's slice j waits for in the bytes it takes turns with."""
        assert home.turn is not None
        out: list[int] = []
        for other, was in self.onchip.items():
            if other == key or was.turn is None or not was.meets(home):
                continue
            if was.alternates(home) and was.shares(home, self.elem_bytes):
                at = j if was.turn < home.turn else j - 1
                out += self.read.get((other, at), {}).values()
        return out
