"""A core's share of a layer profile timed on in-order pipes: the profile's nodes as arrays
(`profile_arrays`), one core's tiles cut from them (`core_share`), the pipe-less nodes
contracted (`contracted`) and the longest paths walked (`timed_shape`, `piped_timing`; the rules
in `timing_kernel.longest_paths`). npucc.backend.estimate.profile's `LayerProfile` and
npucc.backend.estimate.exec_cost time profiles through these.
"""

from __future__ import annotations

from itertools import chain
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from npucc.backend.estimate import timing_kernel
from npucc.backend.estimate.list_schedule import LayerTiming
from npucc.ir.isa import PIPES

if TYPE_CHECKING:
    from npucc.backend.estimate.profile import LayerProfile


class ProfileArrays(NamedTuple):
    """A profile's nodes as arrays (`profile_arrays`): what `core_share` cuts a core's from."""

    cycles: np.ndarray  # per node: its cycles
    pipe: np.ndarray  # its pipe's index into PIPES (-1: none)
    klass: np.ndarray  # its classes' number in `table`
    table: tuple[int, ...]  # the distinct classes, in order of first use
    tile: np.ndarray  # its tile
    owner: np.ndarray  # per predecessor entry (node by node, in order): its node
    pred: np.ndarray  # and the predecessor


def profile_arrays(prof: LayerProfile) -> ProfileArrays:
    """`prof`'s nodes as `ProfileArrays`."""
    n = len(prof.pipe)
    table = tuple(dict.fromkeys(prof.classes))  # in order of first use
    numbers = {c: k for k, c in enumerate(table)}
    starts = (0, *prof.tiles[1:], n)
    lengths = [b - a for a, b in zip(starts, starts[1:], strict=False)]
    counts = list(map(len, prof.preds))
    return ProfileArrays(
        np.array(prof.cycles, np.int64),
        np.array([-1 if p is None else p for p in prof.pipe], np.int64),
        np.fromiter(map(numbers.__getitem__, prof.classes), np.int64, n),
        table,
        np.repeat(np.arange(len(lengths), dtype=np.int64), lengths),
        np.repeat(np.arange(n, dtype=np.int64), counts),
        np.fromiter(chain.from_iterable(prof.preds), np.int64, sum(counts)),
    )


class CoreShare(NamedTuple):
    """The nodes of the tiles one core runs (`core_share`), as `LayerProfile.core_nodes`'s."""

    nodes: np.ndarray  # their indices in the profile, in lowering order
    key: tuple  # their shape (pipes, predecessors among them, classes), exactly
    pipe: np.ndarray  # per node of theirs: its pipe (-1: none)
    klass: np.ndarray  # its classes' number in the profile's `table`
    pred_off: np.ndarray  # its predecessors among them, renumbered 0.. (CSR)
    pred_idx: np.ndarray


def core_share(arrays: ProfileArrays, cores: int, core: int) -> CoreShare:
    """`LayerProfile.core_nodes(cores, core)` from the profile's `arrays`: equal shapes have
    equal keys (the key holds the profile's class table, so some equal shapes do not)."""
    mine = arrays.tile % cores == core
    nodes = np.flatnonzero(mine)
    pos = np.full(len(mine), -1, np.int64)
    pos[nodes] = np.arange(len(nodes), dtype=np.int64)
    kept = mine[arrays.owner] & mine[arrays.pred]
    pred_idx = pos[arrays.pred[kept]]
    counts = np.bincount(pos[arrays.owner[kept]], minlength=len(nodes))
    pred_off = np.zeros(len(nodes) + 1, np.int64)
    np.cumsum(counts, out=pred_off[1:])
    pipe, klass = arrays.pipe[nodes], arrays.klass[nodes]
    key = (arrays.table, np.stack((pipe, klass, pred_off[1:])).tobytes(), pred_idx.tobytes())
    return CoreShare(nodes, key, pipe, klass, pred_off, pred_idx)


def share_lists(arrays: ProfileArrays, share: CoreShare) -> CoreShape:
    """`share`'s pipes, predecessors and classes as `LayerProfile.core_nodes` lists them."""
    off, idx = share.pred_off.tolist(), share.pred_idx.tolist()
    table = arrays.table
    return (
        [None if p < 0 else p for p in share.pipe.tolist()],
        [tuple(idx[a:b]) for a, b in zip(off, off[1:], strict=False)],
        [table[k] for k in share.klass.tolist()],
    )


def core_cycles(
    arrays: ProfileArrays, cores: int, core: int, copied: list[int], shapes: list, ids: dict
) -> tuple[np.ndarray, np.ndarray, int]:
    """Core `core` of `cores`'s share of a profile (its `arrays`) as `piped_timing` times it:
    its kept nodes' cycles (0 off a pipe, and on the last node of contracted ones), where its
    copies (`copied`: their nodes) are among them, and its shape's number in `shapes` (the
    nodes `contracted` keeps, whether each runs on a pipe, its `TimedShape`), by its
    `CoreShare.key` in `ids` (both read and filled in)."""
    share = core_share(arrays, cores, core)
    shape = ids.setdefault(share.key, len(shapes))
    if shape == len(shapes):
        classes = [arrays.table[k] for k in share.klass.tolist()]
        value = _contracted(share.pipe, share.pred_off, share.pred_idx, classes)
        keep, kept = value or (list(range(len(share.nodes))), share_lists(arrays, share))
        walked = timed_shape(*kept)
        shapes.append((np.array(keep, np.int64), np.array(walked.piped), walked))
    keep, piped, _ = shapes[shape]
    kept_nodes = share.nodes[keep]
    base = np.zeros(len(piped), np.int64)
    base[: len(keep)] = arrays.cycles[kept_nodes] * piped[: len(keep)]
    # NOTE: a copy runs on a pipe: none is contracted (and the kept nodes are sorted)
    return base, np.searchsorted(kept_nodes, np.array(copied, np.int64)), shape


MTE2 = PIPES.index("MTE2")
CoreShape = tuple[list[int | None], list[tuple[int, ...]], list[int]]  # pipes, preds, classes


class TimedShape(NamedTuple):
    """A core's nodes as `shape_timing` walks them (what their timing depends on but cycles):
    the arrays of `timing_kernel.longest_paths`.

    NOTE: with scratch arrays of its own, which every timing of the shape overwrites (a
    process times one at a time)."""

    piped: list[bool]  # whether each node runs on a pipe (takes its cycles)
    wait_off: np.ndarray  # per node: its earlier predecessors and its pipe's previous (CSR)
    wait_idx: np.ndarray
    bit_off: np.ndarray  # per node: the release classes it belongs to (CSR)
    bit_idx: np.ndarray
    last_mte2: int  # the last MTE2 node (-1: none)
    scratch: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]  # dur, finish, path, tail


def timed_shape(
    pipe: list[int | None], preds: list[tuple[int, ...]], classes: list[int]
) -> TimedShape:
    """`core_timing`'s shape of nodes 0.. (their pipes, predecessors and classes): a node
    waits for its predecessors and the previous node on its pipe (a later predecessor
    finishes at 0 then, so it never delays it)."""
    last: dict[int, int] = {}  # each pipe's node so far
    wait_off, wait_idx = [0], []
    for v, (ps, p) in enumerate(zip(preds, pipe, strict=True)):
        wait_idx += [u for u in ps if u < v]
        if p is not None:
            if p in last:
                wait_idx.append(last[p])
            last[p] = v
        wait_off.append(len(wait_idx))
    bit_off, bit_idx = [0], []
    set_bits: dict[int, list[int]] = {}  # the set bits of each distinct classes (a few a core)
    for c in classes:
        mine = set_bits.get(c)
        if mine is None:
            mine = set_bits[c] = [k for k in range(c.bit_length()) if c >> k & 1]
        bit_idx += mine
        bit_off.append(len(bit_idx))
    n, bits = len(pipe), max(bit_idx, default=-1) + 1
    return TimedShape(
        [p is not None for p in pipe],
        np.array(wait_off, np.int64),
        np.array(wait_idx, np.int64),
        np.array(bit_off, np.int64),
        np.array(bit_idx, np.int64),
        last.get(MTE2, -1),
        (np.zeros(n, np.int64), np.zeros(n, np.int64), np.zeros(n, np.int64),
         np.zeros(bits, np.int64)),
    )  # fmt: skip


def core_timing(
    duration: list[int], pipe: list[int | None], preds: list[tuple[int, ...]], classes: list[int]
) -> LayerTiming:
    """Cold duration and per-class tails of one core's nodes 0.. (their cycles, pipes,
    predecessors among them and classes).

    The nodes keep the lowering order: the per-core scheduler runs a layer's loads in about
    that order (it prefers a ready load to a new ALLOC), so a const load behind an input load
    waits for it. A class's tail is how long the nodes run after its nodes are released last
    (after every other node could finish): on in-order pipes a node's finish is the latest
    release plus the longest path from there (an earlier predecessor or the pipe's previous
    node before it; a pipe-less node takes no time), so the tail is the longest path from
    any node of the class to the end, found for every class at once by one backward pass.
    """
    return shape_timing(duration, timed_shape(pipe, preds, classes))


def shape_timing(duration: list[int], shape: TimedShape) -> LayerTiming:
    """`core_timing` of nodes of `shape` taking `duration` cycles each."""
    piped = [d if on else 0 for d, on in zip(duration, shape.piped, strict=True)]
    return piped_timing(np.array(piped, np.int64), shape)


def piped_timing(cycles: np.ndarray, shape: TimedShape) -> LayerTiming:
    """`shape_timing` of `cycles` (int64) that are already 0 on every node without a pipe."""
    _, wait_off, wait_idx, bit_off, bit_idx, last_mte2, scratch = shape
    cold, mte2 = timing_kernel.longest_paths(
        cycles, wait_off, wait_idx, bit_off, bit_idx, last_mte2, *scratch
    )
    cold, mte2 = int(cold), int(mte2)  # NOTE: numpy's scalars where the kernel is not built
    tails = tuple((k, t) for k, t in enumerate(scratch[3].tolist()) if t >= 0)
    return LayerTiming(cold, cold - mte2 if mte2 else cold, tails)


def contracted(
    pipe: list[int | None], preds: list[tuple[int, ...]], classes: list[int]
) -> tuple[list[int], CoreShape]:
    """The nodes 0.. of a core (pipes, predecessors, classes) with the pipe-less nodes that
    join no two nodes to two others contracted away, as `core_timing` times them alike: which
    nodes stay (in order) and their shape, plus a last pipe-less node of no cycles holding the
    classes of the contracted nodes that reach no node (`timing_kernel.contract` states the
    rule; a core with a predecessor not earlier than its node stays as it is).

    A contracted node takes no time: each successor waits for its predecessors instead, and
    takes its classes (its tail is its successors' longest); with no successor its tail is 0.
    NOTE: on light ResNet-50 mesh8x8 the timed nodes drop from 2.88 M to 1.24 M.
    """
    counts = [len(ps) for ps in preds]
    off = np.zeros(len(pipe) + 1, np.int64)
    np.cumsum(counts, out=off[1:])
    value = _contracted(
        np.array([-1 if p is None else p for p in pipe], np.int64),
        off,
        np.fromiter(chain.from_iterable(preds), np.int64, sum(counts)),
        classes,
    )
    return value or (list(range(len(pipe))), (list(pipe), list(preds), list(classes)))


def _contracted(
    pipe: np.ndarray, pred_off: np.ndarray, pred_idx: np.ndarray, classes: list[int]
) -> tuple[list[int], CoreShape] | None:
    """`contracted` of nodes 0.. given as arrays (pipes, -1 none; predecessors, CSR) and their
    classes; None when a predecessor is not earlier than its node."""
    value = timing_kernel.contract(pipe, pred_off, pred_idx, classes)
    if not value:
        return None
    keep, preds, masks, zero = value
    shape: CoreShape = ([None if p < 0 else p for p in pipe[keep].tolist()], preds, masks)
    if zero:
        shape[0].append(None)
        shape[1].append(())
        shape[2].append(zero)
    return keep, shape
