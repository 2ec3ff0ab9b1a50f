"""The per-core timings of a layer's profile with some of its copies made NoC transfers,
memoised (`ExecCostModel.noc_layer`'s: alike tiles and layers of one signature often get the
same NoC cycles, and they come back with other placements)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from npucc.backend.estimate.list_schedule import LayerTiming
from npucc.backend.estimate.profile import CopyRows, LayerProfile
from npucc.backend.estimate.share_timing import (
    ProfileArrays,
    TimedShape,
    core_cycles,
    piped_timing,
    profile_arrays,
)


@dataclass(slots=True)
class CoreTimes:
    """`LayerProfile.core_timing` of each core with its copies' cycles overridden, memoised.

    NOTE: keyed by the ids of the profiles: the caller keeps every profile it asks about
    alive for this object's life (`ExecCostModel._profiles`)."""

    # by the core's nodes' shape (pipes, predecessors, classes) and cycles
    _core: dict[tuple, LayerTiming] = field(default_factory=dict)
    # (profile, cores) -> its cores' `core_cycles` laid end to end: the cycles of the nodes
    # `contracted` keeps (and a last 0), where the copies' nodes (`CopyRows.nodes`, laid out
    # core by core) are among them, and per core where its nodes start, end and its shape
    _layouts: dict[tuple, tuple[np.ndarray, np.ndarray, list[tuple[int, int, int]]]] = field(
        default_factory=dict
    )
    # by number: the nodes `contracted` keeps, whether each runs on a pipe (`TimedShape.piped`)
    # and their shape, as `shape_timing` walks it
    _shapes: list[tuple[np.ndarray, np.ndarray, TimedShape]] = field(default_factory=list)
    _shape_ids: dict[tuple, int] = field(default_factory=dict)  # `CoreShare.key` -> its number
    # `profile_arrays` by the id of the profile
    _arrays: dict[int, ProfileArrays] = field(default_factory=dict)

    def timings(
        self, prof: LayerProfile, rows: CopyRows, over: np.ndarray
    ) -> tuple[LayerTiming, ...]:
        """`prof.core_timing` of each of its `rows`' cores, their copies' cycles `over`'s
        (`noc_priced`'s; -1: its own), each distinct timing once, in core order; memoised by
        a core's nodes' shape and cycles."""
        cores = len(rows.nodes)
        layout = self._layouts.get((id(prof), cores))
        if layout is None:
            layout = self._layouts[(id(prof), cores)] = self._layout(prof, rows)
        own, copies, spans = layout
        timed = own.copy()
        moved = over >= 0
        timed[copies[moved]] = over[moved]
        out: dict[LayerTiming, None] = {}
        for a, b, shape in spans:
            mine = timed[a:b]
            key = (shape, mine.tobytes())
            value = self._core.get(key)
            if value is None:
                value = self._core[key] = piped_timing(mine, self._shapes[shape][2])
            out[value] = None
        return tuple(out)

    def _layout(
        self, prof: LayerProfile, rows: CopyRows
    ) -> tuple[np.ndarray, np.ndarray, list[tuple[int, int, int]]]:
        """`_layouts`' entry of `prof` on its `rows`' cores."""
        arrays = self._arrays.get(id(prof))
        if arrays is None:
            arrays = self._arrays[id(prof)] = profile_arrays(prof)
        owns, copies, spans = [], [], []
        start = 0
        for core, copied in enumerate(rows.nodes):
            own, at, shape = core_cycles(
                arrays, len(rows.nodes), core, copied, self._shapes, self._shape_ids
            )
            owns.append(own)
            copies.append(at + start)
            spans.append((start, start + len(own), shape))
            start += len(own)
        return np.concatenate(owns), np.concatenate(copies), spans
