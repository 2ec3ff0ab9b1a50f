"""The one list timer (npucc.target.timing) on small hand-made DAGs."""

import pytest

from npucc.ir.isa import PIPES
from npucc.ir.replay import replay
from npucc.ir.schedule import Schedule
from npucc.ir.tiled import TileGraph
from npucc.target import load_target
from npucc.target.cost import TraceSpillModel
from npucc.target.timing import DdrChannel, TimingDag, in_order

CORE = load_target("davinci-core")
MESH = load_target("mesh8x8")


def test_in_order_pipes_serialise_and_pipe_less_events_take_no_time() -> None:
    # 0: load A (MTE2 30), 1: load B (MTE2 40), 2: vector on A (50), 3: event after 1 and 2
    cycles = [30, 40, 50, 99]
    pipes = ["MTE2", "MTE2", "VECTOR", None]
    preds = [(), (), (0,), (1, 2)]
    start, finish = in_order([0, 1, 2, 3], cycles, pipes, preds)
    assert start == [0, 30, 30, 80] and finish == [30, 70, 80, 80]


def test_in_order_release_floor_and_nodes_outside_the_order() -> None:
    cycles = [10, 5, 7]
    start, finish = in_order([1, 2], cycles, ["MTE2", "MTE2", "CUBE"], [(), (0,), (1,)], [0, 3, 0])
    assert (start, finish) == ([0, 3, 8], [0, 8, 15])  # node 0 is not run: finish 0


def test_in_order_continues_a_timing_given_in_pieces() -> None:
    cycles = [30, 40, 50, 99]
    pipes = ["MTE2", "MTE2", "VECTOR", None]
    preds = [(), (), (0,), (1, 2)]
    timed: tuple[list[int], list[int], dict] = ([0] * 4, [0] * 4, {})
    in_order([0, 2], cycles, pipes, preds, timed=timed)
    start, finish = in_order([1, 3], cycles, pipes, preds, timed=timed)
    assert (start, finish) == in_order([0, 2, 1, 3], cycles, pipes, preds)
    assert timed[2] == {"MTE2": 70, "VECTOR": 80}  # each pipe's last finish


def test_dag_latency_edges() -> None:
    dag = TimingDag()
    a = dag.node(10, (0, 1))
    b = dag.node(5, (1, 1))
    dag.edge(a, b, latency=7)  # a flag crossing the mesh
    start, finish = dag.times(CORE)
    assert start == [0, 17] and finish == [10, 22]


def test_dag_pipe_order_is_the_given_order_not_the_ids() -> None:
    dag = TimingDag()
    first, second = dag.node(4, (0, 0)), dag.node(6, (0, 0))
    dag.in_pipe_order([second, first])
    _, finish = dag.times(CORE)
    assert finish == [10, 6]


def test_dag_ddr_channel_contention_on_a_mesh() -> None:
    bandwidth = MESH.mesh.ddr_bandwidth
    nbytes = 8 * bandwidth  # holds the channel 8 cycles
    dag = TimingDag()
    x = dag.node(20, (0, 1), nbytes)
    y = dag.node(20, (1, 1), nbytes)  # another core: only the channel is shared
    _, finish = dag.times(MESH)
    assert finish[x] == 20 and finish[y] == 8 + 20
    _, alone = TimingDag([20], [nbytes], [(1, 1)], [[]], [0]).times(MESH)
    assert alone == [20]
    _, single_core = dag.times(CORE)  # no shared channel on one core
    assert single_core == [20, 20]


def test_dag_rejects_a_cycle() -> None:
    dag = TimingDag()
    a, b = dag.node(1, (0, 0)), dag.node(1, (0, 1))
    dag.edge(a, b)
    dag.edge(b, a)
    with pytest.raises(ValueError, match="cycle"):
        dag.times(CORE)


def test_channel_is_cost_ddr_channel() -> None:
    channel = DdrChannel(MESH)
    bandwidth = MESH.mesh.ddr_bandwidth
    assert channel.shared and not DdrChannel(CORE).shared
    assert channel.transfer(3 * bandwidth, 50, 10) == 60 and channel.free == 13
    assert channel.transfer(bandwidth, 5, 0) == 18 and channel.free == 14  # waited for it
    assert channel.transfer(0, 5, 0) == 5 and channel.free == 14  # no bytes: no wait


def _graph() -> TileGraph:
    g = TileGraph("t")
    a = g.add_buffer(64, "UB", "a").id
    b = g.add_buffer(64, "UB", "b").id
    nodes = [
        g.add_node("ALLOC", None, 0, (a,)),
        g.add_node("ALLOC", None, 0, (b,)),
        g.add_node("COPY_IN", "MTE2", 30, (a,)),
        g.add_node("COPY_IN", "MTE2", 40, (b,)),
        g.add_node("VEC", "VECTOR", 50, (a, b)),
        g.add_node("COPY_OUT", "MTE3", 9, (b,)),
        g.add_node("FREE", None, 0, (a,)),
        g.add_node("FREE", None, 0, (b,)),
    ]
    ids = [n.id for n in nodes]
    for u, v in [(0, 2), (1, 3), (2, 4), (3, 4), (4, 5), (4, 6), (5, 7)]:
        g.add_edge(ids[u], ids[v])
    return g


def test_engine_result_is_the_replay_result() -> None:
    g = _graph()
    order = [0, 1, 2, 3, 4, 5, 6, 7]
    r = replay(g, Schedule(order, {0: 0, 1: 64}), None, TraceSpillModel())
    cycles = [n.cycles for n in g.nodes]
    start, finish = in_order(order, cycles, [n.pipe for n in g.nodes], g.preds)
    assert (r.start, r.finish) == (start, finish)
    dag = TimingDag()
    for n in g.nodes:
        dag.node(n.cycles, None if n.pipe is None else (0, PIPES.index(n.pipe)))
    dag.in_pipe_order(order)
    for u, v in g.edges():
        dag.edge(u, v)
    assert dag.times(CORE) == (r.start, r.finish)
    assert r.makespan == max(finish) == 129


def test_a_block_of_edges_times_as_its_edges_one_by_one() -> None:
    g = _graph()
    order = [1, 0, 3, 2, 4, 6, 5, 7]  # the two loads swapped on MTE2
    cycles = [n.cycles for n in g.nodes]
    pipes = [None if n.pipe is None else (1, PIPES.index(n.pipe)) for n in g.nodes]
    one, bulk = TimingDag(), TimingDag()
    one.node(3, (0, 0), 100)  # a node before the block: the block's ids start at 1
    bulk.node(3, (0, 0), 100)
    for c, p in zip(cycles, pipes, strict=True):
        one.node(c, p, 64)
    for u, v in g.edges():
        one.edge(1 + u, 1 + v)
    one.in_pipe_order([1 + v for v in order])
    one.edge(0, 8, latency=5)
    assert bulk.nodes(cycles, pipes, [64] * len(cycles)) == 1
    bulk.block(1, g.succs, [len(p) for p in g.preds])
    bulk.in_pipe_order([1 + v for v in order])
    bulk.edge(0, 8, latency=5)
    assert bulk.indegree == one.indegree
    assert bulk.times(MESH) == one.times(MESH)
    assert bulk.times(CORE) == one.times(CORE)
