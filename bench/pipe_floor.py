"""Benchmark: a lower bound on a conv net's one-core makespan that holds for any lowering.

Usage: python bench/pipe_floor.py [--model mobilenet_v2] [--formulation any|blockdiag]
       [--onchip] [--no-handoff] [--vector-only] [--until LAYER]

Every pipe of one core is in order, so a program takes at least its busiest pipe's cycles; each
pipe's least cycles are the least work it must do at the target's own rates (no latency, every
transfer and instruction perfectly packed, on-chip capacity unlimited). What a lowering may
choose is a linear program over fractions, solved for the least makespan T (scipy's HiGHS):
- a dense conv / gemm: its MACs on the cube; its input once L1 -> L0 (MTE1) and its weights once
  DDR -> L1 (MTE2) and L1 -> L0 (MTE1), or either straight DDR -> L0 (MTE2 at DDR_L0's rate; a
  computed input written to DDR first, on MTE3); its accumulators leave L0C on VECTOR (L0C -> UB
  or L1) or on MTE3 to DDR (read back on MTE2); its bias on the cube (a k = 1 mmad) or the
  vector unit; a fused residual on the cube (an identity mmad: the residual L1 -> L0A) or the
  vector unit;
- a fused activation: one vector op an output element in UB (float has no in-flight clip);
- a depthwise conv: a share v on the vector unit (one `mla` a tap and output element, its bias
  not counted; its input in UB, free where the producer left it there (`--no-handoff`: never),
  else L1 -> UB on MTE1) and 1 - v on the cube (input in L1, accumulators out of L0C on VECTOR
  or through DDR); `--vector-only`: v = 1; `blockdiag`: today's block-diagonal mmads (img2col
  of every tap L1 -> L0A, the cube's 8-channel blocks), `any`: the least any cube mapping needs
  (each input element once into L0, the model's MACs at full rate);
- a tensor in UB read from L1 (a cube consumer, the cube share of a depthwise): UB -> L1 on
  VECTOR, or UB -> DDR -> L1 on MTE3 and MTE2 (`--onchip`: no activation through DDR);
- other layers: their least vector elements (`LayerWork`), weights once, pure movement free.
MTE2 also reads every weight and graph input once, MTE3 writes the graph outputs once.
Prints T, each pipe's load at the optimum, and the choices taken (fractions above 0).
NOTE: written for conv nets (f32 tensors; conv, gemm, pools, element-wise): a matmul's second
computed operand, attention's operands and MACs and non-f32 constants are not counted, so on
the BERT encoder the floor (898,376, its memory bound) is below the roofline's compute bound
(909,312). On ResNet-50,
SqueezeNet 1.0 and Inception v1 it equals their compute bound (the cube binds).
"""

from __future__ import annotations

import argparse
import math

import numpy as np
from roofline import MODELS, TARGET
from scipy.optimize import linprog

from npucc.backend.lower.work import layer_work, macs
from npucc.compiler import LEVEL_PASSES, compile_until
from npucc.target import load_target

PIPES = ("MTE1", "MTE2", "MTE3", "CUBE", "VECTOR")


class Floor:
    """The linear program: fixed per-pipe cycles and, per variable, its per-pipe cycles."""

    def __init__(self) -> None:
        self.fixed = dict.fromkeys(PIPES, 0.0)
        self.cols: list[dict[str, float]] = []
        self.tags: list[str] = []

    def var(self, tag: str) -> int:
        """A new fraction in [0, 1]; its index."""
        self.cols.append(dict.fromkeys(PIPES, 0.0))
        self.tags.append(tag)
        return len(self.cols) - 1

    def add(self, pipe: str, cycles: float, var: int | None = None, sign: float = 1.0) -> None:
        """`cycles` on `pipe`: fixed, or times the variable (sign -1: times 1 - the variable)."""
        if var is None:
            self.fixed[pipe] += cycles
        elif sign > 0:
            self.cols[var][pipe] += cycles
        else:
            self.fixed[pipe] += cycles
            self.cols[var][pipe] -= cycles

    def either(self, tag: str, a: dict[str, float], b: dict[str, float]) -> int:
        """Work done a fraction x one way (`a`, pipe -> cycles) and 1 - x the other (`b`)."""
        x = self.var(tag)
        for pipe, c in a.items():
            self.add(pipe, c, x)
        for pipe, c in b.items():
            self.add(pipe, c, x, -1.0)
        return x

    def solve(self, extra: list[tuple[list[tuple[int, float]], float]]) -> tuple[float, np.ndarray]:
        """Least T with every pipe's load <= T and the extra rows (sum coef x <= rhs)."""
        n = len(self.cols)
        c = np.zeros(n + 1)
        c[-1] = 1.0
        rows, rhs = [], []
        for pipe in PIPES:
            rows.append([col[pipe] for col in self.cols] + [-1.0])
            rhs.append(-self.fixed[pipe])
        for terms, bound in extra:
            row = [0.0] * (n + 1)
            for i, coef in terms:
                row[i] += coef
            rows.append(row)
            rhs.append(bound)
        res = linprog(c, A_ub=rows, b_ub=rhs, bounds=[(0, 1)] * n + [(0, None)], method="highs")
        assert res.success, res.message
        return res.x[-1], res.x[:-1]

    def loads(self, x: np.ndarray) -> dict[str, float]:
        """Each pipe's cycles at the solution x."""
        return {p: self.fixed[p] + sum(col[p] * v for col, v in zip(self.cols, x, strict=True))
                for p in PIPES}  # fmt: skip


def build(  # noqa: ANN001
    graph, target, formulation: str, handoff: bool, until: int | None = None
) -> tuple[Floor, list]:
    """The program's fixed work and choices, and the extra rows tying a tensor's L1 need to its
    consumers; `handoff`: a depthwise's vector share may read its input where its producer left
    it in UB (else L1 -> UB on MTE1, the tensor all stored to L1); `until`: layers 0..until only
    (their last outputs stay on chip)."""
    layers = graph.layers if until is None else graph.layers[: until + 1]
    work = {w.name: w for w in layer_work(graph)}
    e = 4  # NOTE: f32 bytes an element
    lanes, cube = target.vector.width, target.cube.macs
    rate = {p: target.dma.path(p).bandwidth / e for p in
            ("DDR_L1", "DDR_L0", "L1_L0", "L1_UB", "UB_L1", "L0C_UB", "TIER_DDR")}  # fmt: skip
    f = Floor()
    t = graph.tensors
    size = {n: math.prod(v.shape) for n, v in t.items()}
    readers: dict[str, list] = {}
    for layer in layers:
        for i, n in enumerate(layer.inputs):
            if n and not graph.is_const(n):
                readers.setdefault(n, []).append((layer, i))

    def l0_feed(tag: str, n: float, var: int | None = None, computed: bool = False) -> None:
        """n elements into L0 (times 1 - var's share if given): L1 -> L0 on MTE1, or the
        fraction z straight DDR -> L0 on MTE2 (the extra over a DDR -> L1 read; a computed
        tensor also written to DDR on MTE3 and read in full)."""
        z = f.var(f"{tag}: into L0 " + ("via DDR" if computed else "from DDR"))
        if var is not None:
            extra.append(([(z, 1.0), (var, 1.0)], 1.0))
            f.add("MTE1", n / rate["L1_L0"], var, -1.0)
        else:
            f.add("MTE1", n / rate["L1_L0"])
        f.add("MTE1", -n / rate["L1_L0"], z)
        if computed:
            f.add("MTE2", n / rate["DDR_L0"], z)
            f.add("MTE3", n / rate["TIER_DDR"], z)
        else:
            f.add("MTE2", n * (1 / rate["DDR_L0"] - 1 / rate["DDR_L1"]), z)

    extra: list[tuple[list[tuple[int, float]], float]] = []
    for w in (work[layer.name] for layer in layers):
        f.add("MTE2", w.weights / rate["DDR_L1"])
        if w.weights:
            l0_feed(f"{w.name} weights", w.weights)
    for n in graph.inputs:
        f.add("MTE2", size[n] / rate["DDR_L1"])
    for n in graph.outputs if until is None else ():
        f.add("MTE3", size[n] / rate["TIER_DDR"])
    ddr = {"MTE3": 1 / rate["TIER_DDR"], "MTE2": 1 / rate["DDR_L1"]}
    dw_share: dict[str, int] = {}  # depthwise layer -> its vector share's variable
    in_ub: dict[str, float] = {}  # tensor -> left in UB by its producer (1) or not (0)
    for layer in layers:
        out = layer.outputs[0]
        o = size[out]
        if layer.op == "conv2d" and t[layer.inputs[1]].shape[1] == 1 and layer.attrs["group"] > 1:
            x = size[layer.inputs[0]]
            v = f.var(f"{layer.name}: vector share")
            dw_share[layer.name] = v
            f.add("VECTOR", 9 * o / lanes, v)
            f.add("VECTOR", o / lanes)  # the activation, every channel (the bias: none counted)
            ub = in_ub.get(layer.inputs[0], 0) if handoff else 0
            f.add("MTE1", x * (1 - ub) / rate["L1_UB"], v)
            if formulation == "blockdiag":
                l0_feed(layer.name, 9 * o, v, layer.inputs[0] in in_ub)
                f.add("CUBE", 9 * o * 8 / cube, v, -1.0)
            else:
                l0_feed(layer.name, x, v, layer.inputs[0] in in_ub)
                f.add("CUBE", 9 * o / cube, v, -1.0)
            # the cube share's accumulators out of L0C: a fraction y of the outputs via DDR
            y = f.var(f"{layer.name}: cube share out of L0C via DDR")
            extra.append(([(y, 1.0), (v, 1.0)], 1.0))
            f.add("VECTOR", o / rate["L0C_UB"], v, -1.0)
            f.add("VECTOR", -o / rate["L0C_UB"], y)
            for pipe, c in ddr_of(ddr, o).items():
                f.add(pipe, c, y)
            in_ub[out] = 1
        elif layer.op in ("conv2d", "gemm", "matmul"):
            f.add("CUBE", macs(graph, layer) / cube)
            l0_feed(layer.name, size[layer.inputs[0]], None, layer.inputs[0] in in_ub)
            act = bool(layer.attrs.get("act"))
            bias = len(layer.inputs) > 2 and bool(layer.inputs[2])
            res = len(layer.inputs) > 3 and bool(layer.inputs[3])
            if bias:
                f.either(f"{layer.name}: bias on VECTOR", {"VECTOR": o / lanes},
                         {"CUBE": o / (target.cube.m0 * target.cube.n0)})  # fmt: skip
            if res:
                c_out = t[out].shape[1]
                f.either(f"{layer.name}: residual on VECTOR", {"VECTOR": o / lanes},
                         {"CUBE": o * c_out / cube, "MTE1": o / rate["L1_L0"]})  # fmt: skip
            # out of L0C: on VECTOR, or to DDR (and back) on MTE3 and MTE2
            f.either(f"{layer.name}: out of L0C via DDR", ddr_of(ddr, o),
                     {"VECTOR": o / rate["L0C_UB"]})  # fmt: skip
            if act:
                f.add("VECTOR", o / lanes)
            in_ub[out] = 1 if act else 0
        else:
            vec = work[layer.name].vector
            f.add("VECTOR", vec / lanes)
            if vec:
                in_ub[out] = 1
    for name, ub in in_ub.items():
        if not ub or name not in readers:
            continue
        cube_reader = any(r.op in ("conv2d", "gemm", "matmul") and r.name not in dw_share
                          and i < 3 for r, i in readers[name])  # fmt: skip
        need = f.var(f"{name}: fraction wanted in L1")
        if cube_reader or not handoff:
            extra.append(([(need, -1.0)], -1.0))
        for r, _ in readers[name]:
            if r.name in dw_share:  # need >= 1 - v
                extra.append(([(need, -1.0), (dw_share[r.name], -1.0)], -1.0))
        # stored UB -> L1 on VECTOR, or through DDR: a fraction d of the need through DDR
        d = f.var(f"{name}: to L1 via DDR (share of the tensor)")
        extra.append(([(d, 1.0), (need, -1.0)], 0.0))
        f.add("VECTOR", size[name] / rate["UB_L1"], need)
        f.add("VECTOR", -size[name] / rate["UB_L1"], d)
        for pipe, c in ddr_of(ddr, size[name]).items():
            f.add(pipe, c, d)
    return f, extra


def ddr_of(ddr: dict[str, float], n: int) -> dict[str, float]:
    """A round trip of n elements through DDR: MTE3 and MTE2 cycles."""
    return {p: c * n for p, c in ddr.items()}


def main() -> int:
    """Solve the floor of one bench/roofline.py model and print it."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="mobilenet_v2", choices=sorted(MODELS))
    ap.add_argument("--formulation", default="any", choices=("any", "blockdiag"))
    ap.add_argument("--vector-only", action="store_true", help="the depthwise convs all on VECTOR")
    ap.add_argument("--no-handoff", action="store_true", help="no depthwise input read in UB")
    ap.add_argument("--onchip", action="store_true", help="no activation through DDR")
    ap.add_argument("--until", type=int, help="the floor of layers 0..UNTIL alone")
    args = ap.parse_args()
    graph = compile_until(MODELS[args.model](), LEVEL_PASSES["graph"])
    f, extra = build(graph, load_target(TARGET), args.formulation, not args.no_handoff, args.until)
    if args.vector_only:
        extra += [([(i, -1.0)], -1.0) for i, tag in enumerate(f.tags) if tag.endswith("share")]
    if args.onchip:
        extra += [([(i, 1.0)], 0.0) for i, tag in enumerate(f.tags) if "via DDR" in tag]
    best, x = f.solve(extra)
    print(f"floor T = {best:,.0f} cycles")
    for pipe, c in f.loads(x).items():
        print(f"  {pipe:7s} {c:12,.0f}")
    for i, tag in enumerate(f.tags):
        if x[i] > 1e-6 and ("share" in tag or "DDR" in tag or "VECTOR" in tag):
            print(f"  {tag}: {x[i]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
