"""Which tensors a mesh plan keeps on chip, and where: the NoC handoff.

A tensor that is not a graph output and fits the on-chip buffer (`[mesh] onchip_buffer`
bytes per core) of its producer's rectangle while it lives, however many steps later its
consumers run (unlike the SET-aligned model, which keeps next-step tensors only), is kept
on chip: split into equal chunks, chunk i on the i-th core of the producer's rectangle
(row-major). Producer tiles write it and consumer tiles read it over the NoC. A tensor is live
from its producer's first part to its last reader's last part in the lowering's order
(`spans`); each is placed first come first served at the lowest byte offset that is free on
all its homes among the tensors live at the same time (interval colouring per home), so a
home's bytes serve one tensor after another. The lowering makes the first writes of a tensor
wait for the readers of those it reuses bytes of. Both the lowering and the
execution-faithful estimate call `plan_onchip`, so they agree, but for the lives home by home
below, which only the lowering asks for.

Inside a split sub-batch loop (npucc.backend.lower.subbatch), a tensor that only the loop's
own layers read is a handoff per sub-batch: it holds `slots` sub-batches, slice j in slot
j mod slots, whatever the steps between producer and readers — one in a loop of several
steps when every reader, or a layer of the loop that reads what it writes, runs on all the
producer's cores (they finish with slice j before writing j + 1), else two (double
buffers), or in a pipelined step one more than the most stages a reader lies behind its
producer (the slices it still waits to read), at most the sub-batch count; the lowering
makes the producer's slice j wait until the readers of slice j − slots are done. Two one-slot
handoffs of a loop whose turns (the positions of their producer and last reader in the loop's
first sub-batch) do not overlap may take the same bytes although both live the whole loop:
the bytes pass from one to the other every sub-batch, and the lowering makes each slice's
writes wait for the readers of the other's last slice there (`OnChip.alternates`).

A tensor held whole whose producer or readers run on sub-batches (a loop's whole input, read
slice by slice, or its whole output, written so) lives home by home (`slice_lives`, given the
`positions` of each layer's parts): slice j of n (elements [j·E/n, (j+1)·E/n)) lives from the
part that writes it to the last part that reads it, and each home's life is the hull of its
slices' (`OnChip.lives`). A home's bytes are then free for another tensor once its own slices
are read: a loop's input can pass its bytes to its output sub-batch by sub-batch. A tensor
is placed by those lives only when the whole lives leave it no room: where it fits anyway it
takes the offset it would take without them, so the program keeps the same bytes and waits
there and gains only tensors kept on chip that would not fit (placing everything by the
lives moved tensors into bytes that die late on some homes, adding waits: GoogLeNet b8
mesh8x8 1.7 % slower on the same plan, docs/cost-model.md, meshb12). The lowering makes the
writes of a tensor wait for the readers of those whose life ends before its own on some home
they share (`OnChip.precedes`). The estimate places without `positions` (each tensor's life
whole): priced with these lives the search rated the room they free above what execution
gets from it (meshb11), so the lowering gets that room as a gain on the plan chosen.

The weights of a split loop's cube layers (the constants of `STAGED_OPS`) are kept on chip
for its sub-batches when they fit the room the tensors above left: the lowering stages each
once from DDR into chunks on the layer's rectangle, or on the nearest cores as well when the
rectangle has no room (`staged_key`: one on-chip copy per loop), and every sub-batch reads it
over the NoC instead of fetching it from DDR again: live from the loop's first part that reads
it to its last.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import lru_cache

from npucc.ir.graph import Graph
from npucc.ir.graph_schema import HOST_OP, VIEW_OPS
from npucc.ir.onchip import OnChip, chunk_bytes, turns_apart
from npucc.target import Target

# ops that read their inputs from DDR only: `gather`'s table, a host segment's operands
NO_NOC_READERS = ("take", HOST_OP)
# ops whose lowerings read their constants only by copies into a core tier (weights, bias)
STAGED_OPS = frozenset({"conv2d", "gemm", "matmul"})


# homes grouped by life: (homes as bits, first, last) each
_Segments = tuple[tuple[int, int, int], ...]
# a placement: at, end, first, last, homes as a bit per core, turn (a one-slot handoff's first
# and last positions in its loop's first sub-batch, else None), the homes by life when not all
# (first, last) (`_segments`)
Placed = tuple[int, int, int, int, int, tuple[int, int] | None, _Segments]
# per layer, (tensor, elements, readers, last reader) of each output it may keep on chip
# (`whole_tensors`)
Whole = tuple[tuple[tuple[str, int, tuple[int, ...], int], ...], ...]


def staged_key(name: str, loop: int) -> str:
    """The key of the on-chip copy of constant `name` that sub-batch loop `loop` reads."""
    return f"{name}@chip{loop}"


def stage_piece(target: Target) -> int:
    """Elements per staging copy (DDR -> UB -> on chip): a quarter of UB, so two pieces in
    flight fill its tile share."""
    return target.memory.capacity("UB") // target.tier_bytes("UB") // 4


def tensor_consumers(graph: Graph) -> dict[str, list[int] | None]:
    """Per tensor of the graph, the non-view layers reading it or a view of it (None: a view
    of it is a graph output)."""
    readers: dict[str, list[int]] = {}
    for j, layer in enumerate(graph.layers):
        for t in layer.inputs:
            if t:
                readers.setdefault(t, []).append(j)
    outputs = set(graph.outputs)

    def consumers(t: str) -> list[int] | None:
        found: list[int] = []
        for j in readers.get(t, []):
            layer = graph.layers[j]
            if layer.op in VIEW_OPS:
                if layer.outputs[0] in outputs:
                    return None
                more = consumers(layer.outputs[0])
                if more is None:
                    return None
                found += more
            else:
                found.append(j)
        return found

    return {t: consumers(t) for t in graph.tensors}


def plan_onchip(
    graph: Graph,
    cores_of: Sequence[tuple[int, ...] | None],
    target: Target,
    offchip: frozenset[str] = frozenset(),
    loops: Sequence[tuple[int, int, int]] | None = None,
    spans: Sequence[tuple[int, int]] | None = None,
    consumers: dict[str, list[int] | None] | None = None,
    resume: tuple[list[Placed], dict[str, OnChip], int] | None = None,
    positions: Sequence[tuple[int, ...]] | None = None,
    whole: Whole | None = None,
) -> dict[str, OnChip]:
    """The tensors kept on chip (layer i runs on the row-major core indices `cores_of[i]`;
    None for a view op), none of `offchip`. `loops[i]`: layer i's
    sub-batch loop, its sub-batch count (1: not split) and its stage in a pipelined step (-1:
    none); `spans[i]`: the first and last positions of its parts in the lowering's order
    (default: i); `consumers`: the graph's `tensor_consumers`, if known; `resume`: the
    placements and the tensors kept of the outputs of the layers before a layer index, as
    this function made them, to go on from that layer (both extended in place);
    `positions[i]`: the positions of layer i's parts, by sub-batch (`slice_lives`; default or
    None: none split); `whole`: the graph's `whole_tensors`, if known. Empty on one core or
    without a buffer."""
    budget = target.mesh.onchip_budget
    if budget <= 0 or target.cores <= 1:
        return {}
    cols = target.mesh.cols
    eb = target.elem_bytes
    if consumers is None:
        consumers = tensor_consumers(graph)
    if whole is None:
        whole = whole_tensors(graph, consumers)
    span = spans or _identity(len(graph.layers))
    placed, kept, start = resume or ([], {}, 0)

    def keep(
        key: str,
        held: int,
        cores: tuple[int, ...],
        life: tuple[int, int],
        slot: int = 0,
        slots: int = 1,
        least: int = 1,
        turn: tuple[int, int] | None = None,
        sliced: Sequence[tuple[int, int]] = (),
        among: list[Placed] | None = None,
    ) -> bool:
        """Keep `held` elements of `key`, live over `life` (its equal slices over `sliced`, if
        given), in chunks (of at least `least`) on `cores` at the lowest offset their buffers
        have free then on each home; whether it is kept. `among`: the placements whose lives
        may meet `life` (default: all), extended with it as `placed` is."""
        if held == 0:
            return False
        chunk, where, mine, need = _fit(cores, held, least, cols, eb)
        lo, hi = life
        lives = _home_lives(sliced, held, chunk, len(where)) if sliced else None
        segments = _segments(cores, lives) if lives is not None else ()
        if turn is None:  # NOTE: no turns to take: by each tensor's whole life, among `among`
            pool = placed if among is None else among
            busy = [(p[0], p[1]) for p in pool if p[2] <= hi and lo <= p[3] and mine & p[4]]
            busy.sort()
            at = _lowest(busy, need)
        else:
            at = _lowest_by(placed, need, mine, life, turn, segments, False)
        # NOTE: by the lives home by home only where the whole lives leave no room
        if at + need > budget and positions:
            at = _lowest_by(placed, need, mine, life, turn, segments, True)
        if at + need > budget:
            return False
        placed.append((at, at + need, lo, hi, mine, turn, segments))
        if among is not None:
            among.append(placed[-1])
        kept[key] = _onchip(where, chunk, slot, slots, at, life, turn, lives)
        return True

    def stage(key: str, held: int, cores: tuple[int, ...], life: tuple[int, int]) -> None:
        """Keep a constant on the layer's cores, else on twice, four times ... as many of the
        nearest cores (`_nearby`), in chunks of at least a staging piece."""
        near = _nearby(cores, target.mesh.rows, cols)
        count = len(cores)
        piece = stage_piece(target)  # NOTE: at least one staging copy per home
        while not keep(key, held, near[:count], life, least=piece) and count < len(near):
            count = min(2 * count, len(near))

    def later(j: int) -> set[int]:
        """Layer j and the layers of its sub-batch loop reading what it writes, transitively."""
        seen, todo = {j}, [j]
        while todo:
            for t in graph.layers[todo.pop()].outputs:
                for k in consumers.get(t) or ():
                    if k not in seen and loops is not None and loops[k][0] == loops[j][0]:
                        seen.add(k)
                        todo.append(k)
        return seen

    if loops is None and spans is None and positions is None:
        # NOTE: no split: every tensor held whole over its graph-order life, whatever the plan;
        # a tensor's life starts at its producer, so one that ended before layer i meets
        # none of layer i's or a later layer's: each is looked at only while it lives
        live = [p for p in placed if p[3] >= start]
        for i in range(start, len(graph.layers)):
            cores = cores_of[i]
            if cores is not None:
                live = [p for p in live if p[3] >= i]
                for t, elems, _, last in whole[i]:
                    if t not in offchip:
                        keep(t, elems, cores, (i, last), among=live)
        return kept
    for i in range(start, len(graph.layers)):
        cores = cores_of[i]
        if cores is None:
            continue
        for t, elems, found, _ in whole[i]:
            if t in offchip:
                continue
            slot, slots = _handoff(i, found, elems, loops, cores_of, later)
            life = (span[i][0], max(span[j][1] for j in found))
            turn = (span[i][0], max(span[j][0] for j in found)) if slot and slots == 1 else None
            sliced = slice_lives(graph, t, i, found, positions) if positions and not slot else ()
            held = slot * slots if slot else elems
            keep(t, held, cores, life, slot, slots, turn=turn, sliced=sliced)
    weights: dict[str, tuple[str, tuple[int, ...], int, int]] = {}  # key -> (const, cores, life)
    for i, layer in enumerate(graph.layers if loops is not None else ()):
        cores = cores_of[i]
        if loops is None or cores is None or loops[i][1] == 1 or layer.op not in STAGED_OPS:
            continue
        for t in layer.inputs:
            key = staged_key(t, loops[i][0]) if t and graph.is_const(t) else ""
            if key and key not in offchip:
                was = weights.get(key, (t, cores, span[i][0], span[i][1]))
                weights[key] = (t, was[1], min(was[2], span[i][0]), max(was[3], span[i][1]))
    for key, (t, cores, first, last) in weights.items():  # in the room the tensors left
        stage(key, math.prod(graph.tensors[t].shape), cores, (first, last))
    return kept


def _lowest_by(
    placed: list[Placed],
    need: int,
    mine: int,
    life: tuple[int, int],
    turn: tuple[int, int] | None,
    segments: _Segments,
    by_home: bool,
) -> int:
    """The lowest offset with `need` bytes free on every home of `mine` while a tensor lives
    there (over `life`, its homes by life `segments` if any; `turn`: its handoff's, if any),
    among `placed` (`by_home`: by their lives home by home, else by each one's whole life)."""
    lo, hi = life
    busy = sorted(
        [
            (at, end)
            for at, end, first, last, theirs, other, parts in placed
            if first <= hi
            and lo <= last
            and mine & theirs
            and not turns_apart(turn, other)
            and (
                not (by_home and (segments or parts))
                or _overlap(segments or ((mine, lo, hi),), parts or ((theirs, first, last),))
            )
        ]
    )
    return _lowest(busy, need)


def _lowest(busy: list[tuple[int, int]], need: int) -> int:
    """The lowest offset with `need` bytes free of every byte range of `busy` (sorted)."""
    at = 0
    for start, end in busy:
        if start >= at + need:
            break
        at = max(at, end)
    return at


def whole_tensors(graph: Graph, consumers: dict[str, list[int] | None]) -> Whole:
    """Per layer, the outputs `plan_onchip` may keep on chip, with their elements, readers and
    last reader (none of a view, a host segment -- it writes DDR only --, a graph output or a
    tensor a NO_NOC_READERS op reads); `consumers`: the graph's `tensor_consumers`."""
    outputs = set(graph.outputs)
    out = []
    for layer in graph.layers:
        mine = []
        if layer.op not in VIEW_OPS and layer.op != HOST_OP:
            for t in layer.outputs:
                found = consumers[t] if t not in outputs else None
                if found and not any(graph.layers[j].op in NO_NOC_READERS for j in found):
                    mine.append((t, math.prod(graph.tensors[t].shape), tuple(found), max(found)))
        out.append(tuple(mine))
    return tuple(out)


def slice_lives(
    graph: Graph,
    tensor: str,
    producer: int,
    readers: Sequence[int],
    positions: Sequence[tuple[int, ...]],
) -> tuple[tuple[int, int], ...]:
    """The first and last positions at which each of the n equal slices of `tensor` (its
    leading rows) is accessed, when its producer or a reader runs on n sub-batches (the others
    on divisors of n, each reading it directly); () when all its slices live alike."""
    counts = [len(positions[k]) for k in (producer, *readers)]
    n = max(counts)
    if n == 1 or any(n % m for m in counts):
        return ()
    if any(tensor not in graph.layers[j].inputs for j in readers):
        return ()
    born = positions[producer]
    lives = tuple(
        (
            born[j * len(born) // n],
            max(positions[k][j * len(positions[k]) // n] for k in readers),
        )
        for j in range(n)
    )
    return () if len(set(lives)) == 1 else lives


def _home_lives(
    sliced: Sequence[tuple[int, int]], held: int, chunk: int, homes: int
) -> tuple[tuple[int, int], ...] | None:
    """Each home's life: the hull of the lives of the slices its chunk holds elements of (None
    when every home lives alike)."""
    n = len(sliced)
    lives = []
    for h in range(homes):
        lo, hi = h * chunk, min((h + 1) * chunk, held) - 1
        mine = sliced[lo * n // held : hi * n // held + 1]
        lives.append((min(a for a, _ in mine), max(b for _, b in mine)))
    return None if len(set(lives)) == 1 else tuple(lives)


def _segments(cores: tuple[int, ...], lives: Sequence[tuple[int, int]]) -> _Segments:
    """Homes (`cores[i]` holding chunk i) grouped by life: (homes as bits, first, last) each."""
    by: dict[tuple[int, int], int] = {}
    for core, life in zip(cores, lives, strict=False):
        by[life] = by.get(life, 0) | 1 << core
    return tuple((mask, first, last) for (first, last), mask in by.items())


def _overlap(a: _Segments, b: _Segments) -> bool:
    """Whether some home of both lives in both at once."""
    return any(m & n and f <= y and x <= g for m, f, g in a for n, x, y in b)


@lru_cache(maxsize=16)
def _identity(layers: int) -> tuple[tuple[int, int], ...]:
    """`plan_onchip`'s default spans: layer i at position i."""
    return tuple((i, i) for i in range(layers))


@lru_cache(maxsize=65536)
def _fit(
    cores: tuple[int, ...], held: int, least: int, cols: int, eb: int
) -> tuple[int, tuple[tuple[int, int], ...], int, int]:
    """`held` elements in chunks of at least `least` on `cores` (`elem_bytes` eb, a mesh
    `cols` wide): the chunk, its homes as (row, col) and as a bit per core (`_homes`), and
    the bytes each home reserves."""
    chunk = min(held, max(-(-held // len(cores)), least))
    where, mine = _homes(cores, -(-held // chunk), cols)
    return chunk, where, mine, chunk_bytes(chunk, eb)


@lru_cache(maxsize=65536)
def _homes(
    cores: tuple[int, ...], count: int, cols: int
) -> tuple[tuple[tuple[int, int], ...], int]:
    """The first `count` of the row-major core indices `cores` as (row, col) and as a bit per
    core."""
    homes = cores[:count]
    mask = 0
    for c in homes:
        mask |= 1 << c
    return tuple((c // cols, c % cols) for c in homes), mask


# NOTE: `_onchip`'s answers by the id of their homes tuple (each answer holds its tuple, so the
# id stays its own) and their other fields; emptied when full
_MADE: dict[tuple, OnChip] = {}
_MADE_MAX = 1 << 16


def _onchip(
    homes: tuple[tuple[int, int], ...],
    chunk: int,
    slot: int,
    slots: int,
    at: int,
    live: tuple[int, int],
    turn: tuple[int, int] | None,
    lives: tuple[tuple[int, int], ...] | None,
) -> OnChip:
    """`OnChip(...)` of these fields, one object per distinct fields while it is kept: the
    placements repeat from plan to plan (light ResNet-50 mesh8x8's search: 224,321 made, 4,594
    distinct), and a frozen dataclass sets each of its eight fields by `object.__setattr__`
    (hashing `homes`, up to 64 pairs, would cost as much: it is looked up by its id)."""
    key = (id(homes), chunk, slot, slots, at, live, turn, lives)
    made = _MADE.get(key)
    if made is None:
        if len(_MADE) >= _MADE_MAX:
            _MADE.clear()
        made = _MADE[key] = OnChip(homes, chunk, slot, slots, at, live, turn, lives)
    return made


@lru_cache(maxsize=4096)
def _nearby(cores: tuple[int, ...], rows: int, cols: int) -> tuple[int, ...]:
    """`cores`, then every other core of the mesh by its hops to the nearest of them."""
    inside = set(cores)

    def hops(c: int) -> int:
        return min(abs(c // cols - d // cols) + abs(c % cols - d % cols) for d in cores)

    others = sorted((c for c in range(rows * cols) if c not in inside), key=lambda c: (hops(c), c))
    return (*cores, *others)


def _handoff(
    producer: int,
    readers: Sequence[int],
    elems: int,
    loops: Sequence[tuple[int, int, int]] | None,
    cores_of: Sequence[tuple[int, ...] | None],
    later: Callable[[int], set[int]],
) -> tuple[int, int]:
    """(elements per sub-batch, sub-batches held) of a handoff inside a split loop, or (0, 1)
    for a tensor held whole. A loop of several steps holds one sub-batch when each reader,
    or a layer of the loop reading what it writes (`later`), runs on all the producer's
    cores: those cores finish with slice j before they write slice j + 1, so a second slot
    would overlap nothing."""
    if loops is None:
        return 0, 1
    loop, n, stage = loops[producer]
    if n == 1 or any(loops[j][0] != loop for j in readers):
        return 0, 1
    mine = set(cores_of[producer] or ())
    if stage < 0 and all(any(mine <= set(cores_of[k] or ()) for k in later(j)) for j in readers):
        return elems // n, 1
    behind = max((loops[j][2] - stage for j in readers), default=1) if stage >= 0 else 1
    return elems // n, min(n, max(2, behind + 1))
