"""Graph IR text in, tiled IR text out: each op family's lowering checked FileCheck style.

Each case is a one-layer graph in the graph IR's text form; `lower-tiles` lowers it for
davinci-core and LLVM-FileCheck patterns (the `filecheck` package) pin the structure the
lowering promises: which pipe moves what between which tiers, in which order, with which
access pattern. Numbers that only a cost change would move (cycles) are matched loosely.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from npucc.backend.lower import LowerTiles
from npucc.backend.planner import single_core_plan
from npucc.ir.graph_text import graph_from_text
from npucc.ir.plan import PlannedGraph
from npucc.passes import CompileContext
from npucc.target import load_target

Z = "0" * 64  # sha256 of elided constant data (the parser makes zero-filled stand-ins)


def lower_text(*lines: str) -> str:
    """The tiled IR text of a graph made of `lines`, lowered for davinci-core."""
    text = 'graph "t" opset=13 {\n' + "".join(f"  {line}\n" for line in lines) + "}\n"
    graph = graph_from_text(text)
    planned = PlannedGraph(graph, single_core_plan(graph))
    program = LowerTiles().run(planned, CompileContext(TARGET))
    return program.to_text()


def filecheck(output: str, checks: str, tmp_path) -> None:
    """Run FileCheck's `checks` on `output`; fail with its diagnostics."""
    check_file = tmp_path / "checks.txt"
    check_file.write_text(checks)
    result = subprocess.run(
        [sys.executable, "-m", "filecheck", str(check_file)],
        input=output,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


TARGET = load_target("davinci-core")

CONV = (
    'input %"x" : f32[1,4,8,8]',
    f'const %"w" : f32[8,4,3,3] sha256={Z}',
    f'const %"b" : f32[8] sha256={Z}',
    '%"y" = conv2d(%"x", %"w", %"b") {act = "relu", dilations = [1, 1], group = 1, '
    'pads = [1, 1, 1, 1], strides = [1, 1]} : f32[1,8,8,8] loc("c")',
    'output %"y"',
)
CONV_CHECKS = """
CHECK: ddr const "w" f32[8,4,3,3]
CHECK: buffer b{{[0-9]+}} L0C 2048 "c.acc"
CHECK: COPY_IN MTE2 {{.*}} src=@"w"+0 dims=[36,8] dst_strides=[8,1] src_strides=[1,36]
CHECK: COPY_IN MTE2 {{.*}} src=@"b"+0 dims=[8]
CHECK: COPY_IN MTE2 {{.*}} src=@"x"+0 dims=[4,8,8]
CHECK: IMG2COL MTE1 {{.*}} c=4 h=8 w=8 kh=3 kw=3 sh=1 sw=1 dh=1 dw=1 pt=1 pl=1 oh=8 ow=8
CHECK: MOVE MTE1 {{.*}} dims=[36,8] dst_strides=[8,1] src_strides=[8,1]
CHECK: MMAD CUBE {{.*}} m=64 n=8 k=36 acc=0
CHECK: MOVE VECTOR {{.*}} dims=[512]
CHECK: MOVE MTE1 {{.*}} dims=[8]
CHECK-NEXT: VEC_ADD VECTOR {{.*}} dims=[64,8] {{.*}} b_strides=[0,1]
CHECK: VEC_RELU VECTOR
CHECK-NEXT: COPY_OUT MTE3 {{.*}} dst=@"y"+0 {{.*}} dims=[8,8,8]
CHECK-SAME: dst_strides=[64,8,1] src_strides=[1,64,8]
CHECK: BARRIER - 0 [] <-
"""

GEMM = (
    'input %"x" : f32[4,32]',
    f'const %"w" : f32[16,32] sha256={Z}',
    f'const %"b" : f32[16] sha256={Z}',
    '%"y" = gemm(%"x", %"w", %"b") {alpha = 1.0, beta = 1.0, trans_a = 0, trans_b = 1} '
    ': f32[4,16] loc("fc")',
    'output %"y"',
)
GEMM_CHECKS = """
CHECK: COPY_IN MTE2 {{.*}} src=@"w"+0 dims=[32,16] dst_strides=[16,1] src_strides=[1,32]
CHECK: COPY_IN MTE2 {{.*}} src=@"x"+0 dims=[4,32]
CHECK: MOVE MTE1 {{.*}} dims=[4,32]
CHECK: MOVE MTE1 {{.*}} dims=[32,16]
CHECK: MMAD CUBE {{.*}} m=4 n=16 k=32 acc=0
CHECK: COPY_IN MTE2 {{.*}} src=@"b"+0 dims=[1,16] dst_strides=[16,1] src_strides=[0,1]
CHECK-NEXT: VEC_ADD VECTOR {{.*}} dims=[4,16]
CHECK-NOT: VEC_RELU
CHECK: COPY_OUT MTE3 {{.*}} dst=@"y"+0
"""

MATMUL = (
    'input %"a" : f32[2,8,16]',
    'input %"b" : f32[2,16,8]',
    '%"y" = matmul(%"a", %"b") : f32[2,8,8] loc("mm")',
    'output %"y"',
)
MATMUL_CHECKS = """
CHECK: COPY_IN MTE2 {{.*}} src=@"b"+0 dims=[16,8]
CHECK: COPY_IN MTE2 {{.*}} src=@"a"+0 dims=[8,16]
CHECK: MMAD CUBE {{.*}} m=8 n=8 k=16 acc=0
CHECK: COPY_OUT MTE3 {{.*}} dst=@"y"+0 {{.*}} dims=[8,8]
CHECK: COPY_IN MTE2 {{.*}} src=@"b"+128 dims=[16,8]
CHECK: COPY_IN MTE2 {{.*}} src=@"a"+128 dims=[8,16]
CHECK: MMAD CUBE {{.*}} m=8 n=8 k=16 acc=0
CHECK: COPY_OUT MTE3 {{.*}} dst=@"y"+64 {{.*}} dims=[8,8]
CHECK-NOT: MMAD
"""

ADD = (
    'input %"a" : f32[1,4,8,8]',
    'input %"b" : f32[1,4,1,1]',
    '%"y" = add(%"a", %"b") {act = "relu"} : f32[1,4,8,8] loc("add")',
    'output %"y"',
)
ADD_CHECKS = """
CHECK: COPY_IN MTE2 {{.*}} src=@"b"+0 dims=[4]
CHECK: COPY_IN MTE2 {{.*}} src=@"a"+0 dims=[4,64]
CHECK-NEXT: VEC_ADD VECTOR {{.*}} dims=[4,64] dst_strides=[64,1] a_strides=[64,1] b_strides=[1,0]
CHECK-NEXT: VEC_RELU VECTOR {{.*}} dims=[256]
CHECK-NEXT: COPY_OUT MTE3 {{.*}} dst=@"y"+0
CHECK-NOT: CUBE
"""

MAXPOOL = (
    'input %"x" : f32[1,4,8,8]',
    '%"y" = maxpool(%"x") {count_include_pad = 0, dilations = [1, 1], kernel = [2, 2], '
    'pads = [0, 0, 0, 0], strides = [2, 2]} : f32[1,4,4,4] loc("p")',
    'output %"y"',
)
MAXPOOL_CHECKS = """
CHECK: buffer b0 UB 1024 "p.win"
CHECK: COPY_IN MTE2 {{.*}} src=@"x"+0 dims=[4,8,8]
CHECK: VEC_MAX VECTOR {{.*}} vreduce op=max {{.*}} dims=[4,4,4,2,2]
CHECK-SAME: dst_strides=[16,4,1] src_strides=[64,16,2,8,1] nred=2
CHECK: COPY_OUT MTE3 {{.*}} dims=[4,4,4]
"""

SOFTMAX = (
    'input %"x" : f32[4,32]',
    '%"y" = softmax(%"x") {axis = 1} : f32[4,32] loc("s")',
    'output %"y"',
)
SOFTMAX_CHECKS = """
CHECK: COPY_IN MTE2 {{.*}} src=@"x"+0
CHECK-NEXT: VEC_MAX VECTOR {{.*}} nred=1
CHECK-NEXT: VEC_SUB VECTOR
CHECK-NEXT: VEC_EXP VECTOR
CHECK-NEXT: VEC_SUM VECTOR {{.*}} nred=1
CHECK-NEXT: VEC_RECIP VECTOR {{.*}} dims=[4]
CHECK-NEXT: VEC_MUL VECTOR
CHECK-NEXT: COPY_OUT MTE3 {{.*}} dst=@"y"+0
"""

LAYERNORM = (
    'input %"x" : f32[1,8,32]',
    f'const %"g" : f32[32] sha256={Z}',
    f'const %"be" : f32[32] sha256={Z}',
    '%"y" = layernorm(%"x", %"g", %"be") {axis = 2, epsilon = 1e-05} : f32[1,8,32] loc("ln")',
    'output %"y"',
)
LAYERNORM_CHECKS = """
CHECK: COPY_IN MTE2 {{.*}} src=@"g"+0 dims=[32]
CHECK: COPY_IN MTE2 {{.*}} src=@"be"+0 dims=[32]
CHECK: COPY_IN MTE2 {{.*}} src=@"x"+0 dims=[256]
CHECK: VEC_SUM VECTOR {{.*}} dims=[8,32] {{.*}} nred=1
CHECK-NEXT: VEC_MULS VECTOR {{.*}} scalars=[0.03125]
CHECK-NEXT: VEC_SUB VECTOR {{.*}} b_strides=[1,0]
CHECK-NEXT: VEC_SQUARE VECTOR
CHECK-NEXT: VEC_SUM VECTOR
CHECK: COPY_OUT MTE3 {{.*}} dst=@"y"+0
CHECK-NOT: CUBE
"""

CONCAT = (
    'input %"a" : f32[1,2,4,4]',
    'input %"b" : f32[1,3,4,4]',
    '%"y" = concat(%"a", %"b") {axis = 1} : f32[1,5,4,4] loc("cat")',
    'output %"y"',
)
CONCAT_CHECKS = """
CHECK: COPY_IN MTE2 {{.*}} src=@"a"+0 dims=[32]
CHECK-NEXT: COPY_OUT MTE3 {{.*}} dst=@"y"+0 {{.*}} dims=[32]
CHECK: COPY_IN MTE2 {{.*}} src=@"b"+0 dims=[48]
CHECK-NEXT: COPY_OUT MTE3 {{.*}} dst=@"y"+32 {{.*}} dims=[48]
CHECK: BARRIER - 0 [] <- [%2,%6]
"""

RESHAPE = (
    'input %"x" : f32[1,4,4,4]',
    '%"r" = reshape(%"x") : f32[1,64] loc("flat")',
    '%"y" = relu(%"r") : f32[1,64] loc("relu")',
    'output %"y"',
)
RESHAPE_CHECKS = """
CHECK-NOT: ddr temp "r"
CHECK: alias "r" = "x"
CHECK: nodes=6 buffers=1
CHECK: COPY_IN MTE2 {{.*}} src=@"x"+0 dims=[64]
CHECK-NEXT: VEC_RELU VECTOR
CHECK-NEXT: COPY_OUT MTE3 {{.*}} dst=@"y"+0
"""

ATTENTION = (
    'input %"q" : f32[1,2,16,8]',
    'input %"k" : f32[1,2,16,8]',
    'input %"v" : f32[1,2,16,8]',
    '%"y" = attention(%"q", %"k", %"v") {k_strides = [256, 128, 8, 1], '
    "q_strides = [256, 128, 8, 1], scale = 0.35, v_strides = [256, 128, 8, 1]} "
    ': f32[1,2,16,8] loc("att")',
    'output %"y"',
)
ATTENTION_CHECKS = """
CHECK: COPY_IN MTE2 {{.*}} src=@"q"+0 dims=[16,8]
CHECK: VEC_FILL VECTOR {{.*}} value=-inf
CHECK-NEXT: VEC_FILL VECTOR {{.*}} value=0.0
CHECK-NEXT: VEC_FILL VECTOR {{.*}} value=0.0
CHECK: COPY_IN MTE2 {{.*}} src=@"k"+0 dims=[8,16] dst_strides=[16,1] src_strides=[1,8]
CHECK: MMAD CUBE {{.*}} m=16 n=16 k=8 acc=0
CHECK: VEC_EXP VECTOR
CHECK: COPY_IN MTE2 {{.*}} src=@"v"+0
CHECK: MMAD CUBE
CHECK: COPY_OUT MTE3 {{.*}} dst=@"y"+0
CHECK: COPY_IN MTE2 {{.*}} src=@"q"+128
CHECK: COPY_OUT MTE3 {{.*}} dst=@"y"+128
CHECK-NOT: dst=@"s
"""

CASES = {
    "conv2d": (CONV, CONV_CHECKS),
    "gemm": (GEMM, GEMM_CHECKS),
    "matmul": (MATMUL, MATMUL_CHECKS),
    "eltwise": (ADD, ADD_CHECKS),
    "pool": (MAXPOOL, MAXPOOL_CHECKS),
    "softmax": (SOFTMAX, SOFTMAX_CHECKS),
    "layernorm": (LAYERNORM, LAYERNORM_CHECKS),
    "concat": (CONCAT, CONCAT_CHECKS),
    "reshape-view": (RESHAPE, RESHAPE_CHECKS),
    "attention": (ATTENTION, ATTENTION_CHECKS),
}


@pytest.mark.parametrize("name", CASES)
def test_lowering_text(name: str, tmp_path) -> None:
    lines, checks = CASES[name]
    filecheck(lower_text(*lines), checks, tmp_path)


def test_a_wrong_pattern_fails(tmp_path) -> None:
    """The harness can fail: a conv lowered without its im2col step is caught."""
    with pytest.raises(AssertionError, match="Couldn't match"):
        filecheck(lower_text(*CONV), "CHECK: MMAD\nCHECK: IMG2COL\n", tmp_path)
