"""TiledProgram.verify: every buffer allocated and freed once, edges forward, known layers."""

from __future__ import annotations

import pytest

from npucc.ir.program import Core, LayerWork, TiledProgram
from npucc.ir.tiled import TileGraph
from npucc.target import load_target


def _program() -> tuple[TiledProgram, TileGraph]:
    program = TiledProgram("p", load_target("davinci-core"))
    graph = TileGraph("core0_0")
    program.cores.append(Core(0, 0, graph))
    buf = graph.add_buffer(64, "UB")
    graph.add_node("ALLOC", None, 0, (buf.id,))
    graph.add_node("BARRIER", None, 0, (), layer=0)
    graph.add_node("FREE", None, 0, (buf.id,))
    graph.add_edge(0, 1)
    graph.add_edge(0, 2)
    program.layers = [LayerWork("l0", "conv", 0, 0)]
    return program, graph


def test_a_well_formed_program_verifies() -> None:
    _program()[0].verify()


def test_a_backward_edge_is_named() -> None:
    program, graph = _program()
    graph.add_edge(2, 1)
    graph.add_edge(1, 0)
    with pytest.raises(ValueError, match="edge 1->0 goes back"):
        program.verify()


def test_an_unknown_layer_and_a_missing_free_are_refused() -> None:
    program, graph = _program()
    graph.nodes[1].layer = 1
    with pytest.raises(ValueError, match="unknown layer"):
        program.verify()
    graph.nodes[1].layer = -2
    with pytest.raises(ValueError, match="unknown layer"):
        program.verify()
    graph.nodes[1].layer = -1
    graph.add_buffer(64, "UB")
    with pytest.raises(ValueError, match="lacks its ALLOC or FREE"):
        program.verify()
