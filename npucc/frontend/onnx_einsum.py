"""Legalisation of ONNX Einsum as transposes, reshapes and batched matmuls."""

from __future__ import annotations

import math
import re

from npucc.frontend.graph_edit import node_error
from npucc.frontend.onnx_seq import Seq, attr
from npucc.ir.graph import Graph, Layer


def _einsum_terms(layer: Layer, ranks: list[int]) -> tuple[list[str], str]:
    """Each operand's subscripts and the output's, with '...' spelled out as letters of its
    own (aligned from the right, as ONNX broadcasts them) and an implicit output made explicit."""
    equation = str(attr(layer, "equation", "")).replace(" ", "")
    lhs, arrow, rhs = equation.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise node_error(layer, f"equation '{equation}' names {len(terms)} operands")
    letters = set(equation) - set(".,->")
    spare = (c for c in map(chr, range(0x100, 0x200)) if c not in letters)
    ellipsis = "".join(next(spare) for _ in range(max(ranks, default=0)))
    ell_rank = 0
    out_terms = []
    for term, rank in zip(terms, ranks, strict=True):
        if "..." in term:
            n = rank - (len(term) - 3)
            ell_rank = max(ell_rank, n)
            term = term.replace("...", ellipsis[len(ellipsis) - n :] if n else "")
        if len(term) != rank or not all(c.isalpha() or ord(c) >= 0x100 for c in term):
            raise node_error(layer, f"subscripts '{term}' do not fit an operand of rank {rank}")
        out_terms.append(term)
    if arrow:
        out = rhs.replace("...", ellipsis[len(ellipsis) - ell_rank :])
    else:  # implicit: the broadcast dims, then the letters used once, in alphabetical order
        counts = "".join(out_terms)
        once = sorted(c for c in set(counts) if counts.count(c) == 1 and ord(c) < 0x100)
        out = ellipsis[len(ellipsis) - ell_rank :] + "".join(once)
    return out_terms, out


def einsum(g: Graph, layer: Layer) -> list[Layer]:
    """Einsum as transposes, sums and batched matmuls, contracting the operands left to right:
    per pair, the shared letters still needed are batch dims, the other shared ones are summed
    by the matmul, the rest are its rows and columns."""
    ins = list(layer.inputs)
    shapes = [g.tensors[t].shape for t in ins]
    terms, out = _einsum_terms(layer, [len(sh) for sh in shapes])
    size: dict[str, int] = {}
    for term, shape in zip(terms, shapes, strict=True):
        if len(set(term)) != len(term):
            shown = re.sub("[\u0100-\u01ff]+", "...", term)
            raise node_error(
                layer, f"repeated subscript in '{shown}' (a diagonal) is not supported"
            )
        for c, d in zip(term, shape, strict=True):
            if size.setdefault(c, d) != d:
                raise node_error(layer, f"subscript '{c}' has sizes {size[c]} and {d}")
    if set(out) - set(size) or len(set(out)) != len(out):
        raise node_error(layer, f"output subscripts '{out}' are not a set of input subscripts")
    s = Seq(g, layer)

    def sum_out(x: str, term: str, keep: set[str]) -> tuple[str, str]:
        """Sum the axes of `x` whose letters nothing later needs."""
        axes = tuple(k for k, c in enumerate(term) if c not in keep)
        if not axes:
            return x, term
        kept = "".join(c for c in term if c in keep)
        full = tuple(1 if c not in keep else size[c] for c in term)
        r = s.add("reduce", [x], s.tmp(full, "sum"), op="sum", axes=axes)
        return s.add("reshape", [r], s.tmp(tuple(size[c] for c in kept), "summed")), kept

    def arrange(x: str, term: str, order: str) -> str:
        """`x` with its axes in the order of `order` (a permutation of `term`)."""
        if order == term:
            return x
        perm = tuple(term.index(c) for c in order)
        return s.add("transpose", [x], s.tmp(tuple(size[c] for c in order), "t"), perm=perm)

    def needed(k: int) -> set[str]:
        """Letters the output or operands after the k-th still use."""
        return set(out).union(*(set(t) for t in terms[k + 1 :]))

    acc, acc_term = sum_out(ins[0], terms[0], needed(0))
    for k in range(1, len(ins)):
        keep = needed(k)
        b, b_term = sum_out(ins[k], terms[k], keep | set(acc_term))
        acc, acc_term = sum_out(acc, acc_term, keep | set(b_term))
        batch = "".join(c for c in acc_term if c in b_term and c in keep)
        summed = "".join(c for c in acc_term if c in b_term and c not in keep)
        left = "".join(c for c in acc_term if c not in b_term)
        right = "".join(c for c in b_term if c not in acc_term)
        n_batch, n_left, n_sum, n_right = (
            math.prod(size[c] for c in part) for part in (batch, left, summed, right)
        )
        a3 = s.add(
            "reshape",
            [arrange(acc, acc_term, batch + left + summed)],
            s.tmp((n_batch, n_left, n_sum), "lhs"),
        )
        b3 = s.add(
            "reshape",
            [arrange(b, b_term, batch + summed + right)],
            s.tmp((n_batch, n_sum, n_right), "rhs"),
        )
        product = s.add("matmul", [a3, b3], s.tmp((n_batch, n_left, n_right), "mm"))
        acc_term = batch + left + right
        acc = s.add("reshape", [product], s.tmp(tuple(size[c] for c in acc_term), "prod"))
    acc, acc_term = sum_out(acc, acc_term, set(out))
    s.add("reshape", [arrange(acc, acc_term, out)], s.y)
    return s.done()
