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
    """`LayerProfile.core_timing` of a core with its copies' cycles overridden, memoised.

    NOTE: keyed by the ids of the profiles: the caller keeps every profile it asks about
    alive for this object's life (`ExecCostModel._profiles`)."""

    # by the core's nodes' shape (pipes, predecessors, classes) and cycles
    _core: dict[tuple, LayerTiming] = field(default_factory=dict)
    # the same by (profile, cores, core, the overridden cycles)
    _core_of: dict[tuple, LayerTiming] = field(default_factory=dict)
    # (profile, cores, core) -> the cycles of the core's nodes `contracted` keeps (and a last
    # 0), where its copies' nodes (`CopyRows.nodes`) are among them and their shape's number
    _core_nodes: dict[tuple, tuple[np.ndarray, np.ndarray, int]] = field(default_factory=dict)
    # by number: the nodes `contracted` keeps, whether each runs on a pipe (`TimedShape.piped`)
    # and their shape, as `shape_timing` walks it
    _shapes: list[tuple[np.ndarray, np.ndarray, TimedShape]] = field(default_factory=list)
    _shape_ids: dict[tuple, int] = field(default_factory=dict)  # `CoreShare.key` -> its number
    # `profile_arrays` by the id of the profile
    _arrays: dict[int, ProfileArrays] = field(default_factory=dict)

    def timing(
        self, prof: LayerProfile, rows: CopyRows, core: int, over: np.ndarray
    ) -> LayerTiming:
        """`prof.core_timing` of core `core` of its `rows`' cores, its copies' cycles `over`'s
        (`noc_priced`'s; -1: its own), memoised by its nodes' shape and cycles, first by the
        profile, the core and its copies' cycles."""
        cores = len(rows.nodes)
        mine = over[rows.core_off[core] : rows.core_off[core + 1]]
        memo = (id(prof), cores, core, mine.tobytes())
        value = self._core_of.get(memo)
        if value is not None:
            return value
        local = self._core_nodes.get((id(prof), cores, core))
        if local is None:
            arrays = self._arrays.get(id(prof))
            if arrays is None:
                arrays = self._arrays[id(prof)] = profile_arrays(prof)
            local = core_cycles(
                arrays, cores, core, rows.nodes[core], self._shapes, self._shape_ids
            )
            self._core_nodes[(id(prof), cores, core)] = local
        own, copies, shape = local
        timed = own.copy()
        moved = mine >= 0
        timed[copies[moved]] = mine[moved]
        key = (shape, timed.tobytes())
        value = self._core.get(key)
        if value is None:
            value = self._core[key] = piped_timing(timed, self._shapes[shape][2])
        self._core_of[memo] = value
        return value
