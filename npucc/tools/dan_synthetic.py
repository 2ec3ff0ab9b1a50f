"""Deterministic synthetic operator-level traces shaped like tiled matmul/conv kernels.

Tiles come in groups that share an L1 weight buffer. Each tile loads an L1 input, moves slices
to L0A/L0B, multiplies into L0C, drains to UB, runs vector work and stores the result; some
tiles accumulate into the previous tile's output. Ids follow a phase-major lowering order (all
loads of a group, then all moves, ...), which keeps many L1 buffers live at once: the order the
schedulers have to improve on.
"""

from __future__ import annotations

import random

from npucc.ir.tiled import TileGraph


def synthetic_graph(nodes: int, seed: int = 0, group: int = 8) -> TileGraph:
    """A random tiled-kernel DAG of about `nodes` nodes (at least one tile group)."""
    rng = random.Random(seed)
    graph = TileGraph(f"synthetic{nodes}_{seed}")
    tiles = group * max(1, round(nodes / (17 * group + 3)))  # 17 nodes a tile, 3 a group
    prev_out: int | None = None  # node of the previous tile's vector op
    for g0 in range(0, tiles, group):
        count = min(group, tiles - g0)
        w = graph.add_buffer(rng.choice((512, 768, 1024)), "L1", f"w{g0}")
        wa = graph.add_node("ALLOC", None, 0, (w.id,)).id
        wl = graph.add_node("COPY_IN", "MTE2", w.size // 4 + 60, (w.id,)).id
        graph.add_edge(wa, wl)
        ins: list[tuple[int, int]] = []  # (buffer, load node)
        for _ in range(count):
            b = graph.add_buffer(rng.choice((256, 384, 512)), "L1")
            a = graph.add_node("ALLOC", None, 0, (b.id,)).id
            load = graph.add_node("COPY_IN", "MTE2", b.size // 4 + 60, (b.id,)).id
            graph.add_edge(a, load)
            ins.append((b.id, load))
        cubes: list[tuple[int, int]] = []  # (L0C buffer, matmul node)
        wmoves: list[int] = []
        for in_buf, load in ins:
            l0 = []
            for tier, src, src_node in (("L0A", in_buf, load), ("L0B", w.id, wl)):
                buf = graph.add_buffer(rng.choice((64, 128)), tier)
                a = graph.add_node("ALLOC", None, 0, (buf.id,)).id
                mv = graph.add_node("MOVE", "MTE1", buf.size // 8 + 20, (src, buf.id)).id
                graph.add_edge(a, mv)
                graph.add_edge(src_node, mv)
                l0.append((buf.id, mv))
            wmoves.append(l0[1][1])
            c = graph.add_buffer(rng.choice((128, 256)), "L0C")
            ca = graph.add_node("ALLOC", None, 0, (c.id,)).id
            mm = graph.add_node("MATMUL", "CUBE", rng.randint(80, 320), (l0[0][0], l0[1][0], c.id))
            for node in (ca, l0[0][1], l0[1][1]):
                graph.add_edge(node, mm.id)
            for l0_buf, _ in l0:
                graph.add_edge(mm.id, graph.add_node("FREE", None, 0, (l0_buf,)).id)
            graph.add_edge(l0[0][1], graph.add_node("FREE", None, 0, (in_buf,)).id)
            cubes.append((c.id, mm.id))
        for acc_buf, mm_node in cubes:
            u = graph.add_buffer(rng.choice((128, 256)), "UB")
            ua = graph.add_node("ALLOC", None, 0, (u.id,)).id
            fx = graph.add_node("FIXPIPE", "FIXP", u.size // 8 + 10, (acc_buf, u.id)).id
            for node in (ua, mm_node):
                graph.add_edge(node, fx)
            graph.add_edge(fx, graph.add_node("FREE", None, 0, (acc_buf,)).id)
            vec = graph.add_node("VADD", "VECTOR", rng.randint(30, 160), (u.id,)).id
            graph.add_edge(fx, vec)
            if prev_out is not None and rng.random() < 0.3:
                graph.add_edge(prev_out, vec)
            prev_out = vec
            st = graph.add_node("COPY_OUT", "MTE3", u.size // 4 + 60, (u.id,)).id
            graph.add_edge(vec, st)
            graph.add_edge(st, graph.add_node("FREE", None, 0, (u.id,)).id)
        wf = graph.add_node("FREE", None, 0, (w.id,)).id
        for mv in wmoves:
            graph.add_edge(mv, wf)
    return graph
