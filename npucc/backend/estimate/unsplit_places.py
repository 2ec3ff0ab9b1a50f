"""An unsplit plan's on-chip placements layer by layer, memoised by what each step reads.

Unsplit, `plan_onchip` places each layer's outputs (in graph order, each tensor's life whole)
among the placements still live then only: what it places for layer i is a function of those,
of layer i's cores and of which of its outputs go through DDR. `UnsplitPlaces` numbers the
sets of live placements it meets (its states) and keeps each layer's step from a state: the
placements it adds, the tensors it keeps (with their `where_id`) and the state
after it. The beam's plans share most of their layers' steps (a child of a plan moves a few
layers' rectangles), so a plan's placements cost a lookup a layer.
"""

from __future__ import annotations

from collections.abc import Sequence

from npucc.backend.hypercut.onchip_plan import Placed, Whole, plan_onchip
from npucc.ir.graph import Graph
from npucc.ir.onchip import OnChip
from npucc.ir.plan import Rect
from npucc.target import Target

# a layer's step: the state after it, the placements it adds and the tensors it keeps (with
# their where ids), in `plan_onchip`'s order
_Step = tuple[int, tuple[Placed, ...], tuple[tuple[str, OnChip, int], ...]]


class UnsplitPlaces:
    """`plan_onchip`'s placements of unsplit plans of one graph and target, layer by layer."""

    __slots__ = (
        "_graph", "_target", "_consumers", "_whole", "_states", "_ids", "_steps", "_where",
        "_home_ids", "_home_numbers",
    )  # fmt: skip

    def __init__(
        self,
        graph: Graph,
        target: Target,
        consumers: dict[str, list[int] | None],
        whole: Whole,
    ) -> None:
        self._graph, self._target, self._consumers, self._whole = graph, target, consumers, whole
        self._states: list[tuple[Placed, ...]] = [()]  # by number: the placements live
        self._ids: dict[tuple[Placed, ...], int] = {(): 0}
        # (state, layer, its key: its rectangle and its outputs through DDR) -> its step
        self._steps: dict[tuple[int, int, object], _Step] = {}
        self._where: dict[tuple, int] = {}  # `where_id`
        # `where_id`'s homes: by the id of a homes tuple, the tuple (alive: the id stays its
        # own) and its number in `_home_numbers`
        self._home_ids: dict[int, tuple[tuple, int]] = {}
        self._home_numbers: dict[tuple, int] = {}

    def where_id(self, where: OnChip) -> int:
        """A number per distinct (homes, chunk, slot, slots) of an on-chip tensor: what its
        NoC copies depend on (not its offset or life).

        NOTE: its homes by the tuple's id first: `plan_onchip` shares one tuple per homes among
        its answers, and hashing up to 64 (row, col) pairs anew per plan and tensor cost more
        than the rest of the lookup."""
        homes = where.homes
        known = self._home_ids.get(id(homes))
        if known is None:
            known = self._home_ids[id(homes)] = (homes, number(self._home_numbers, homes))
        return number(self._where, (known[1], where.chunk, where.slot, where.slots))

    def step(self, state: int, index: int, key: object, r: Rect, offchip: frozenset[str]) -> _Step:
        """The step of layer `index` from `state` (0: none placed) on rectangle `r`, its outputs
        through DDR those of `offchip`; `key` names both (`ExecCostModel._unsplit_trace`'s)."""
        value = self._steps.get((state, index, key))
        if value is None:
            cores = r.indices(self._target.mesh.cols)
            value = self._steps[(state, index, key)] = self._place(state, index, cores, offchip)
        return value

    def _place(
        self, state: int, index: int, cores: tuple[int, ...], offchip: frozenset[str]
    ) -> _Step:
        """`step` anew: `plan_onchip` resumed at layer `index` with the live placements and
        only its cores given, so that it places its outputs alone."""
        live = list(self._states[state])
        before = len(live)
        cores_of: list[tuple[int, ...] | None] = [None] * len(self._graph.layers)
        cores_of[index] = cores
        kept = plan_onchip(
            self._graph, cores_of, self._target, offchip, consumers=self._consumers,
            resume=(live, {}, index), whole=self._whole,
        )  # fmt: skip
        after = tuple(p for p in live if p[3] > index)  # NOTE: those ending at it meet no later
        number = self._ids.get(after)
        if number is None:
            number = self._ids[after] = len(self._states)
            self._states.append(after)
        items = tuple((t, where, self.where_id(where)) for t, where in kept.items())
        return number, tuple(live[before:]), items


def placed_from(
    places: UnsplitPlaces,
    keys: Sequence[object],
    rect_of: dict[int, tuple[Rect, tuple[int, int, int, int]]],
    offchip: frozenset[str],
    states: list[int],
    placed: list[Placed],
    kept: dict[str, OnChip],
    ids: list[int],
) -> None:
    """An unsplit plan's placements from layer `len(states) - 1` on (its `keys` per layer,
    None for a view; `rect_of`: per layer its rectangle and corners), extending in place
    `states` (per layer the state it starts from, and the last's after), `placed`, `kept` and
    their where `ids`."""
    state, known = states[-1], places._steps.get
    for index in range(len(states) - 1, len(keys)):
        key = keys[index]
        if key is not None:
            step = known((state, index, key))  # NOTE: `step`'s memo, probed inline (cheaper)
            if step is None:
                step = places.step(state, index, key, rect_of[index][0], offchip)
            state, new, items = step
            placed += new
            for t, where, number in items:
                kept[t] = where
                ids.append(number)
        states.append(state)


def number(table: dict, key: tuple) -> int:
    """`key`'s number in `table`, the next one if it is new (0, 1, ... in order of first use)."""
    value = table.get(key)
    if value is None:
        value = table[key] = len(table)
    return value
