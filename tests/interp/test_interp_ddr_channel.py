"""On a mesh, every core's DDR transfers share the target's DDR bandwidth (one channel)."""

from __future__ import annotations

import numpy as np
import pytest
from interp_helpers import run_text, stream_text

from npucc.ir.isa_cost import copy_cycles
from npucc.target import Target, load_target
from npucc.target.cost import ddr_channel

N = 4096  # floats each core loads


def _loader(offset: int) -> str:
    """Load N floats of input x (from `offset`) into UB, store them to output y."""
    return f"""
    alloc UB[0x000000+{4 * N}] b=0
    MTE2 copy dst=UB[0x000000+{4 * N}] src=DDR[0x{offset:06x}+{4 * N}] dims=[{N}] dst_strides=[1] src_strides=[1] | set mte2>mte3#1
    MTE3 copy dst=DDR[0x{2 * 4 * N + offset:06x}+{4 * N}] src=UB[0x000000+{4 * N}] dims=[{N}] dst_strides=[1] src_strides=[1] | wait mte2>mte3#1
    """  # noqa: E501


def _run(target: Target, cores: list[tuple[int, int]]):
    """Each core copies its N floats of x to y; y comes out equal to x."""
    bodies = {core: _loader(4 * N * i) for i, core in enumerate(cores)}
    n = len(cores) * N
    tensors = [("input", "x", 0, (n,)), ("output", "y", 2 * 4 * N, (n,))]
    text = stream_text(tensors, "", target=target, ddr_size=4 * 4 * N, cores=bodies)
    x = np.arange(n, dtype=np.float32)
    res = run_text(text, inputs={"x": x})
    assert res.outputs["y"].tolist() == x.tolist()
    return res


def test_two_cores_loading_at_once_take_turns_on_the_ddr_channel():
    mesh = load_target("mesh8x8")  # DDR 64 B/cycle for the mesh, as each core's DMA path
    load = copy_cycles(mesh, "DDR", "UB", 4 * N)
    store = copy_cycles(mesh, "UB", "DDR", 4 * N)
    channel = 4 * N // mesh.mesh.ddr_bandwidth
    alone = _run(mesh, [(0, 0)])
    assert alone.makespan == load + store
    both = _run(mesh, [(0, 0), (5, 7)])
    first, second = both.core_makespan[(0, 0)], both.core_makespan[(5, 7)]
    # the channel takes, in turn: A's load, B's load (ready at 0 too), A's store (ready once
    # A's load finished, after B's load took the channel), B's store
    assert load < 2 * channel
    assert first == 2 * channel + store
    assert second == 3 * channel + store
    assert both.makespan == max(first, second)


def test_a_wider_ddr_channel_lets_transfers_overlap():
    mesh = load_target("mesh16x16")  # DDR 256 B/cycle for the mesh, 64 B/cycle per core
    both = _run(mesh, [(0, 0), (9, 9)])
    load = copy_cycles(mesh, "DDR", "UB", 4 * N)
    stagger = 4 * N // mesh.mesh.ddr_bandwidth
    assert both.core_makespan[(9, 9)] - both.core_makespan[(0, 0)] == stagger
    assert both.core_makespan[(0, 0)] == load + copy_cycles(mesh, "UB", "DDR", 4 * N)  # no wait


@pytest.mark.parametrize(("start", "free", "begin"), [(10, 0, 10), (10, 50, 50)])
def test_ddr_channel_formula(start: int, free: int, begin: int):
    mesh = load_target("mesh8x8")
    finish, after = ddr_channel(mesh, 640, 210, start, free)
    assert (finish, after) == (begin + 210, begin + 10)
    one = load_target("davinci-core")  # one core: its DMA paths are its own
    assert ddr_channel(one, 640, 210, start, free) == (start + 210, free)
