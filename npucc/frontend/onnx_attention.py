"""Legalisation of the ONNX Attention op (opset 23) onto the canonical `attention` layer."""

from __future__ import annotations

import math

import numpy as np

from npucc.frontend.graph_edit import const, node_error
from npucc.frontend.onnx_seq import Seq, attr
from npucc.ir.graph import Graph, Layer, row_major_strides


def _heads_4d(s: Seq, x: str, heads: int, tag: str) -> str:
    """A [B, S, H*D] tensor as [B, H, S, D] (reshape + transpose layers); 4-D passes through."""
    shape = s.g.tensors[x].shape
    if len(shape) == 4:
        return x
    b, n, hd = shape
    r = s.add("reshape", [x], s.tmp((b, n, heads, hd // heads), f"{tag}.split"))
    return s.add(
        "transpose", [r], s.tmp((b, heads, n, hd // heads), f"{tag}.heads"), perm=(0, 2, 1, 3)
    )


def _grouped(strides: tuple[int, ...], groups: int, shared: bool) -> tuple[int, ...]:
    """[B, H, S, D] strides as [B, Hkv, G, S, D]: K/V repeat over G (stride 0)."""
    sb, sh, ss, sd = strides
    return (sb, sh, 0, ss, sd) if shared else (sb, groups * sh, sh, ss, sd)


def _grouped_mask(shape: tuple[int, ...], groups: int) -> tuple[int, ...]:
    """A mask shape broadcastable to [B, H, Sq, Sk] as [B, Hkv, G, Sq, Sk] (h = kv * G + g)."""
    full = (1,) * (4 - len(shape)) + tuple(shape)
    heads = (full[1] // groups, groups) if full[1] > 1 else (1, 1)
    return (full[0], *heads, *full[2:])


def _attention_bias(g: Graph, layer: Layer, mask: str, sq: int, sk: int, past: int) -> np.ndarray:
    """The constant additive bias: the (padded) mask plus the causal frontier."""
    bias = np.zeros((sq, sk), np.float32)
    if mask:
        m = const(g, mask)
        if m.dtype == bool:
            m = np.where(m, 0.0, -np.inf)
        pad = sk - m.shape[-1]
        if pad > 0:
            m = np.pad(m, [(0, 0)] * (m.ndim - 1) + [(0, pad)], constant_values=-np.inf)
        bias = bias + m.astype(np.float32)
    if int(attr(layer, "is_causal", 0)):
        allowed = np.arange(sk)[None, :] <= np.arange(sq)[:, None] + past
        bias = bias + np.where(allowed, 0.0, -np.inf).astype(np.float32)
    if np.any(np.all(np.isneginf(bias), axis=-1)):
        raise node_error(layer, "fully masked query rows are not supported")
    return bias


def attention(g: Graph, layer: Layer) -> list[Layer]:
    """The ONNX Attention op (opset 23+) as the fused `attention` layer.

    Supports 3-D and 4-D inputs, grouped-query heads (K/V read with a zero head-group stride),
    a past KV cache (concatenated; present outputs), a constant or float mask and is_causal.
    """
    ins = [*layer.inputs, *[""] * 7][:7]
    q, k, v, mask, past_k, past_v, nonpad = ins
    if nonpad or float(attr(layer, "softcap", 0.0)) or len(layer.outputs) > 3:
        raise node_error(layer, "softcap, nonpad_kv_seqlen and qk_matmul_output are not supported")
    if any(int(attr(layer, k_, -1)) >= 0 for k_ in ("left_window_size", "right_window_size")):
        raise node_error(layer, "sliding windows are not supported")
    s = Seq(g, layer)
    rank3 = len(g.tensors[q].shape) == 3
    hq = int(attr(layer, "q_num_heads", 0)) if rank3 else g.tensors[q].shape[1]
    hkv = int(attr(layer, "kv_num_heads", 0)) if rank3 else g.tensors[k].shape[1]
    k4, v4 = _heads_4d(s, k, hkv, "k"), _heads_4d(s, v, hkv, "v")
    past = g.tensors[past_k].shape[2] if past_k else 0
    outs = [*layer.outputs, "", ""][:3]
    for i, (cur, old) in enumerate(((k4, past_k), (v4, past_v)), start=1):
        if old:
            shape = g.tensors[old].shape
            cat = (*shape[:2], shape[2] + g.tensors[cur].shape[2], shape[3])
            cur = s.add("concat", [old, cur], outs[i] or s.tmp(cat, "present"), axis=2)
        elif outs[i]:
            s.add("copy", [cur], outs[i])
        if i == 1:
            k4 = cur
        else:
            v4 = cur
    b, _, sk, d = g.tensors[k4].shape
    dv = g.tensors[v4].shape[3]
    qshape = g.tensors[q].shape
    sq = qshape[1] if rank3 else qshape[2]
    groups = hq // hkv
    q_st: tuple[int, ...]
    if rank3:
        q_st = (sq * hq * d, d, hq * d, 1)
    else:
        q_st = row_major_strides(qshape)
    attrs = {
        "scale": float(attr(layer, "scale", 1.0 / math.sqrt(d))),
        "q_strides": _grouped(q_st, groups, False),
        "k_strides": _grouped(row_major_strides(g.tensors[k4].shape), groups, True),
        "v_strides": _grouped(row_major_strides(g.tensors[v4].shape), groups, True),
    }
    inputs = [q, k4, v4]
    if mask and not g.is_const(mask):
        mshape = g.tensors[mask].shape
        if int(attr(layer, "is_causal", 0)) or mshape[-1] != sk or g.tensors[mask].dtype != "f32":
            raise node_error(layer, "a run-time mask must be float, full length and not causal")
        inputs.append(s.add("reshape", [mask], s.tmp(_grouped_mask(mshape, groups), "mask")))
    elif mask or int(attr(layer, "is_causal", 0)):
        bias = _attention_bias(g, layer, mask, sq, sk, past)
        inputs.append(s.const(bias.reshape(_grouped_mask(bias.shape, groups)), "bias"))
    out5 = s.add("attention", inputs, s.tmp((b, hkv, groups, sq, dv), "heads"), **attrs)
    if rank3:
        o4 = s.add("reshape", [out5], s.tmp((b, hq, sq, dv), "o4"))
        t = s.add("transpose", [o4], s.tmp((b, sq, hq, dv), "merge"), perm=(0, 2, 1, 3))
        s.add("reshape", [t], s.y)
    else:
        s.add("reshape", [out5], s.y)
    return s.done()
