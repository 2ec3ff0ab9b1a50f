"""Legalisation of the recurrent ONNX ops LSTM, GRU and RNN, unrolled over the static sequence.

One gemm projects the input of every step and direction at once (X·Wᵀ plus the biases); each
step then slices its rows of that projection, adds the recurrent h·Rᵀ with a gemm (none while
the state is still a zero initial state) and applies the gates element-wise. Y concatenates the
states of all steps, Y_h and Y_c the last ones. W, R, B and P must be constant; sequence_lens,
when given, constant and the full sequence length for every batch entry.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from npucc.frontend.graph_edit import const, node_error, onnx_op
from npucc.frontend.onnx_seq import Seq, attr, need_const
from npucc.ir.graph import Graph, Layer

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}  # blocks of W and R: LSTM i, o, f, c; GRU z, r, h
DEFAULT_ACTIVATIONS = {
    "LSTM": ("Sigmoid", "Tanh", "Tanh"),
    "GRU": ("Sigmoid", "Tanh"),
    "RNN": ("Tanh",),
}
ACTIVATIONS = {"sigmoid": "sigmoid", "tanh": "tanh", "relu": "relu"}  # ONNX name, lower case
_LIMITS = "constant; sequence_lens constant and the full length; activations Sigmoid, Tanh, Relu"
LIMITATIONS = {
    "LSTM": f"W, R, B and P {_LIMITS}",
    "GRU": f"W, R and B {_LIMITS}",
    "RNN": f"W, R and B {_LIMITS}",
}


@dataclass(slots=True)
class _Direction:
    """One direction of a recurrent node: its part of the projection and its activations."""

    s: Seq
    projection: str  # X·Wᵀ + biases: [S, B, D, G*H] (layout 0) or [B, S, D, G*H] (layout 1)
    index: int  # position among the directions
    reverse: bool
    layout: int
    steps: int
    batch: int
    hidden: int
    acts: tuple[str, ...]  # canonical ops of the activations f, g (, h)
    clip: float | None

    def order(self) -> range:
        """The time steps in processing order."""
        return range(self.steps - 1, -1, -1) if self.reverse else range(self.steps)

    def tmp(self, t: int, tag: str, width: int = 0) -> str:
        """A new [B, width] (default [B, H]) tensor of step t."""
        return self.s.tmp((self.batch, width or self.hidden), f"d{self.index}.t{t}.{tag}")

    def projected(self, t: int, first: int, count: int) -> str:
        """Columns [first, first + count) of step t's projection, as [B, count]."""
        shape = self.s.g.tensors[self.projection].shape
        step_axis = 1 if self.layout else 0
        starts, sizes = [0, 0, self.index, first], list(shape)
        starts[step_axis], sizes[step_axis], sizes[2], sizes[3] = t, 1, 1, count
        part = self.projection
        if tuple(sizes) != shape:
            tag = f"d{self.index}.t{t}.x{first}"
            part = self.s.add(
                "slice", [part], self.s.tmp(tuple(sizes), tag), starts=tuple(starts), steps=(1,) * 4
            )
        return self.s.add("reshape", [part], self.tmp(t, f"x{first}", count))

    def block(self, t: int, x: str, k: int, tag: str) -> str:
        """Gate block k ([B, H] columns k*H onwards) of a [B, n*H] tensor of step t."""
        if self.s.g.tensors[x].shape[1] == self.hidden:
            return x
        return self.s.add("slice", [x], self.tmp(t, tag), starts=(0, k * self.hidden), steps=(1, 1))

    def gemm(self, t: int, a: str, b: str, c: str, tag: str) -> str:
        """a @ b + c (no c when it is "")."""
        width = self.s.g.tensors[b].shape[1]
        out = self.tmp(t, tag, width)
        return self.s.add(
            "gemm", [a, b, c] if c else [a, b], out, trans_a=0, trans_b=0, alpha=1.0, beta=1.0
        )

    def recur(self, t: int, x: str, h: str, rt: str, tag: str) -> str:
        """x + h @ rt; just x while the state h is zero ("")."""
        return self.gemm(t, h, rt, x, tag) if h else x

    def activate(self, t: int, x: str, op: str, tag: str) -> str:
        """op(x), x clipped to [-clip, clip] first when the node has a clip."""
        shape = self.s.g.tensors[x].shape
        tag = f"d{self.index}.t{t}.{tag}"
        if self.clip is not None:
            clipped = self.s.tmp(shape, f"{tag}.clip")
            x = self.s.add("clip", [x], clipped, min=-self.clip, max=self.clip)
        return self.s.add(op, [x], self.s.tmp(shape, tag))

    def binary(self, t: int, op: str, a: str, b: str, tag: str) -> str:
        """An element-wise binary layer giving a [B, H] tensor (b may broadcast)."""
        return self.s.add(op, [a, b], self.tmp(t, tag))

    def const(self, data: np.ndarray, tag: str) -> str:
        """A constant of this direction."""
        return self.s.const(data, f"d{self.index}.{tag}")


class _Gates:
    """The pre-activations [B, n*H] of one step's gates: each activation op is applied to all
    blocks at once (one layer, then a slice per gate), unless a peephole term comes first."""

    __slots__ = ("d", "t", "pre", "activated")

    def __init__(self, d: _Direction, t: int, pre: str) -> None:
        self.d, self.t, self.pre = d, t, pre
        self.activated: dict[str, str] = {}  # op -> op(pre)

    def gate(self, k: int, op: str, tag: str, peephole: str = "", cell: str = "") -> str:
        """op(block k), plus peephole ⊙ cell before the activation when both are given."""
        d, t = self.d, self.t
        if peephole and cell:
            x = d.block(t, self.pre, k, f"{tag}.pre")
            product = d.binary(t, "mul", cell, peephole, f"{tag}.p")
            return d.activate(t, d.binary(t, "add", x, product, f"{tag}.pp"), op, tag)
        if op not in self.activated:
            self.activated[op] = d.activate(t, self.pre, op, op)
        return d.block(t, self.activated[op], k, tag)


def _rnn_states(d: _Direction, r: np.ndarray, h: str) -> dict[int, str]:
    """The hidden state of each step of an RNN direction: f(x·Wᵀ + h·Rᵀ + b)."""
    rt = d.const(r.T, "rt")
    states = {}
    for t in d.order():
        pre = d.recur(t, d.projected(t, 0, d.hidden), h, rt, "pre")
        h = states[t] = d.activate(t, pre, d.acts[0], "h")
    return states


def _lstm_states(
    d: _Direction, r: np.ndarray, p: np.ndarray | None, input_forget: bool, h: str, c: str
) -> tuple[dict[int, str], str]:
    """The hidden state of each step of an LSTM direction, and the last cell state."""
    n = d.hidden
    rt = d.const(r.T, "rt")
    p_i, p_o, p_f = (
        d.const(p[k * n : (k + 1) * n], f"p{k}") if p is not None else "" for k in range(3)
    )
    f_op, g_op, h_op = d.acts
    states = {}
    for t in d.order():
        gates = _Gates(d, t, d.recur(t, d.projected(t, 0, 4 * n), h, rt, "pre"))
        i = gates.gate(0, f_op, "i", p_i, c)
        new_c = d.binary(t, "mul", i, gates.gate(3, g_op, "g"), "ig")
        if c:
            if input_forget:  # f = 1 - i
                minus_i = d.s.add("muls", [i], d.tmp(t, "-i"), scalar=-1.0)
                forget = d.s.add("adds", [minus_i], d.tmp(t, "f"), scalar=1.0)
            else:
                forget = gates.gate(2, f_op, "f", p_f, c)
            new_c = d.binary(t, "add", d.binary(t, "mul", forget, c, "fc"), new_c, "c")
        c = new_c
        out = gates.gate(1, f_op, "o", p_o, c)
        h = states[t] = d.binary(t, "mul", out, d.s.add(h_op, [c], d.tmp(t, "hc")), "h")
    return states, c


def _gru_states(
    d: _Direction, r: np.ndarray, rb_h: np.ndarray | None, linear_before_reset: bool, h: str
) -> dict[int, str]:
    """The hidden state of each step of a GRU direction."""
    n = d.hidden
    rt_zr, rt_h = d.const(r[: 2 * n].T, "rt_zr"), d.const(r[2 * n :].T, "rt_h")
    reset_bias = d.const(rb_h, "rb_h") if rb_h is not None else ""
    f_op, g_op = d.acts
    states = {}
    for t in d.order():
        gates = _Gates(d, t, d.recur(t, d.projected(t, 0, 2 * n), h, rt_zr, "pre_zr"))
        pre_h = d.projected(t, 2 * n, n)
        z = gates.gate(0, f_op, "z")
        if h or (linear_before_reset and reset_bias):
            reset = gates.gate(1, f_op, "r")
            if linear_before_reset:  # x·Whᵀ + r ⊙ (h·Rhᵀ + Rbh)
                linear = d.gemm(t, h, rt_h, reset_bias, "h_lin") if h else reset_bias
                gated = d.binary(t, "mul", reset, linear, "rh")
                pre_h = d.binary(t, "add", pre_h, gated, "pre_h")
            else:  # x·Whᵀ + (r ⊙ h)·Rhᵀ
                pre_h = d.gemm(t, d.binary(t, "mul", reset, h, "rh"), rt_h, pre_h, "pre_h")
        cand = d.activate(t, pre_h, g_op, "hh")
        if h:  # (1 - z) ⊙ hh + z ⊙ h = hh + z ⊙ (h - hh)
            step = d.binary(t, "mul", z, d.binary(t, "sub", h, cand, "dh"), "zdh")
            h = d.binary(t, "add", cand, step, "h")
        else:
            h = d.binary(t, "sub", cand, d.binary(t, "mul", z, cand, "zh"), "h")
        states[t] = h
    return states


def _constant_input(g: Graph, layer: Layer, name: str, what: str) -> np.ndarray | None:
    """The data of optional constant input `name` as float32 (None when absent)."""
    return np.asarray(need_const(g, layer, name, what), np.float32) if name else None


def _check_sequence_lens(g: Graph, layer: Layer, name: str, steps: int) -> None:
    """sequence_lens, when given, must be constant and `steps` for every batch entry."""
    if not name or 0 in g.tensors[name].shape:
        return
    if not g.is_const(name):
        raise node_error(layer, "sequence_lens must be constant")
    if np.any(const(g, name) != steps):
        raise node_error(
            layer, f"sequence_lens must be the sequence length {steps} for every batch entry"
        )


def _activations(layer: Layer, kind: str, directions: int) -> list[tuple[str, ...]]:
    """The canonical activation ops of each direction."""
    defaults = DEFAULT_ACTIVATIONS[kind]
    names = tuple(attr(layer, "activations", defaults * directions))
    if len(names) != len(defaults) * directions:
        raise node_error(layer, f"{len(names)} activations for {directions} direction(s)")
    unknown = sorted({a for a in names if a.lower() not in ACTIVATIONS})
    if unknown:
        raise node_error(layer, f"activation {', '.join(unknown)} is not supported")
    ops = tuple(ACTIVATIONS[a.lower()] for a in names)
    k = len(defaults)
    return [ops[d * k : (d + 1) * k] for d in range(directions)]


def _initial_state(d: _Direction, g: Graph, name: str, tag: str) -> str:
    """Direction d's [B, H] part of initial_h or initial_c ("" when absent or all zeros)."""
    if not name:
        return ""
    shape = g.tensors[name].shape  # [D, B, H] (layout 0) or [B, D, H]
    axis = 1 if d.layout else 0
    if g.is_const(name):
        data = np.take(const(g, name), d.index, axis=axis)
        return d.const(data, tag) if np.any(data) else ""
    part = name
    if shape[axis] > 1:
        starts = [0, 0, 0]
        starts[axis] = d.index
        sizes = list(shape)
        sizes[axis] = 1
        out = d.s.tmp(tuple(sizes), f"d{d.index}.{tag}")
        part = d.s.add("slice", [name], out, starts=tuple(starts), steps=(1, 1, 1))
    return d.s.add("reshape", [part], d.s.tmp((d.batch, d.hidden), f"d{d.index}.{tag}"))


def _stack(s: Seq, states: list[str], axis: int, out: str) -> None:
    """out = the [B, H] states concatenated along axis 0 (rows) or 1 (columns), reshaped."""
    if len(states) == 1:
        s.add("reshape", states, out)
        return
    b, h = s.g.tensors[states[0]].shape
    shape = (b * len(states), h) if axis == 0 else (b, h * len(states))
    s.add("reshape", [s.add("concat", states, s.tmp(shape, "stack"), axis=axis)], out)


def _project(s: Seq, x: str, w: np.ndarray, b: np.ndarray | None, reset_bias_apart: bool) -> str:
    """X·Wᵀ + biases of every step and direction in one gemm, viewed as [S, B, D, G*H] (layout
    0) or [B, S, D, G*H]; with `reset_bias_apart` (GRU linear_before_reset) Rbh is left out."""
    lead = s.g.tensors[x].shape[:2]
    directions, width, size = w.shape
    rows = s.add("reshape", [x], s.tmp((lead[0] * lead[1], size), "rows"))
    inputs = [rows, s.const(w.reshape(directions * width, size).T, "wt")]
    if b is not None:
        w_bias, r_bias = b[:, :width], b[:, width:].copy()
        if reset_bias_apart:
            r_bias[:, 2 * width // 3 :] = 0  # the h block of z, r, h
        inputs.append(s.const((w_bias + r_bias).reshape(-1), "bias"))
    out = s.tmp((lead[0] * lead[1], directions * width), "xw")
    flat = s.add("gemm", inputs, out, trans_a=0, trans_b=0, alpha=1.0, beta=1.0)
    return s.add("reshape", [flat], s.tmp((*lead, directions, width), "proj"))


def recurrent(g: Graph, layer: Layer) -> list[Layer]:
    """LSTM, GRU or RNN unrolled over the sequence (see the module docstring)."""
    kind = onnx_op(layer)
    ins = [*layer.inputs, *[""] * 8][:8]
    x, w_name, r_name, b_name, lens, init_h, init_c, p_name = ins
    w, r, b = (_constant_input(g, layer, t, "W, R and B") for t in (w_name, r_name, b_name))
    if w is None or r is None:
        raise node_error(layer, "W and R are required")
    p = _constant_input(g, layer, p_name, "P") if kind == "LSTM" else None
    x_shape = g.tensors[x].shape
    if len(x_shape) != 3:
        raise node_error(layer, f"X must have rank 3, not {len(x_shape)}")
    layout = int(attr(layer, "layout", 0))
    steps, batch = (x_shape[1], x_shape[0]) if layout else x_shape[:2]
    _check_sequence_lens(g, layer, lens, steps)
    direction = str(attr(layer, "direction", "forward"))
    if direction not in ("forward", "reverse", "bidirectional"):
        raise node_error(layer, f"unknown direction {direction!r}")
    directions = 2 if direction == "bidirectional" else 1
    hidden = int(attr(layer, "hidden_size", r.shape[-1]))
    expected = (directions, GATES[kind] * hidden, hidden)
    if w.shape[:2] != expected[:2] or r.shape != expected:
        raise node_error(layer, f"W {w.shape} and R {r.shape} do not fit [D, G*H, ...] {expected}")
    acts = _activations(layer, kind, directions)
    clip = float(layer.attrs["clip"]) if "clip" in layer.attrs else None
    linear_before_reset = kind == "GRU" and bool(attr(layer, "linear_before_reset", 0))
    input_forget = kind == "LSTM" and bool(attr(layer, "input_forget", 0))
    s = Seq(g, layer)
    projection = _project(s, x, w, b, linear_before_reset)
    all_states: list[dict[int, str]] = []
    finals_h, finals_c = [], []
    for index in range(directions):
        d = _Direction(
            s,
            projection,
            index,
            reverse=direction == "reverse" or index == 1,
            layout=layout,
            steps=steps,
            batch=batch,
            hidden=hidden,
            acts=acts[index],
            clip=clip,
        )
        h0 = _initial_state(d, g, init_h, "h0")
        if kind == "LSTM":
            c0 = _initial_state(d, g, init_c, "c0")
            peep = p[index] if p is not None and np.any(p[index]) else None
            states, last_c = _lstm_states(d, r[index], peep, input_forget, h0, c0)
            finals_c.append(last_c)
        elif kind == "GRU":
            rb_h = None
            if b is not None and linear_before_reset and np.any(b[index, 5 * hidden :]):
                rb_h = b[index, 5 * hidden :]
            states = _gru_states(d, r[index], rb_h, linear_before_reset, h0)
        else:
            states = _rnn_states(d, r[index], h0)
        all_states.append(states)
        finals_h.append(states[d.order()[-1]])
    outs = [*layer.outputs, "", ""][:3]
    if outs[0]:  # Y: [S, D, B, H] or [B, S, D, H]
        ordered = [all_states[k][t] for t in range(steps) for k in range(directions)]
        _stack(s, ordered, layout, outs[0])
    for out, finals in zip(outs[1:], (finals_h, finals_c), strict=True):
        if out:  # Y_h, Y_c: [D, B, H] or [B, D, H]
            _stack(s, finals, layout, out)
    return s.done()
