"""Cascading on one core: chains of layers computed band of rows by band, intermediates in L1.

When the output of a conv, a windowed pool or an LRN is too large to stay in L1 (resident.py)
and only the next such layer reads it (as its image), the layers so linked can run as a
chain of bands (Vela's cascading): band b of the chain's last output needs a band of rows of
each earlier layer's output (a receptive field, its padding clipped at the image's edges; a
row-wise layer's own rows), and each band of the chain is a sub-chain of ordinary layers on
tensors of a few rows. Their intermediates are small and stay in L1 (resident tensors the
residency keeps first: `Cascades.bands`); the chain's inputs (its first layer's image, a
fused residual) are read as row bands of their DDR tensors and its output written as row
bands of its DDR tensor in place (`Cascades.views`, npucc.backend.lower.band_view), so the
intermediates never touch DDR. A chain's float dense convs may hold their weights and biases
in L1 across its bands (`Cascades.weights`: one DMA each, read in place by the blocked
product); otherwise every band fetches them again.

NOTE: the halo rows a 3x3 window needs from its producer's band are recomputed by that band,
not kept from the previous one. Keeping them would need a buffer whose rows rotate across
bands, which no lowering reads; recomputing costs the overlap's MACs, which `_gain` prices
(with a band of r rows a 3x3 stride-1 producer computes r + 2 rows), against the DDR bytes
the chain saves.

Which chains run cascaded, with how many rows a band and whether their weights are held is a
cost choice (`_gain`): per chain, band height and holding, the DDR cycles saved (the
intermediates' writes and reads, on two pipes that overlap) less those added (weights and
biases fetched again per band when not held, the input's halo rows read again), the
recomputed MACs on the cube (or, for a depthwise conv and a pool, the vector unit) and each
band's DMA latencies (target/cost.py's formulas); the band intermediates a layer holds (its
input's and its output's bands), with the held weights, must fit 1/CASCADE_SHARE of L1. A
run of linked layers is split into the chains of most total gain; `paying` then keeps those
that, as lowered, take fewer cycles than without cascading. The layers of no chain kept are
planned again within 1/WIDE_SHARE of L1 and judged alike.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from npucc.backend.lower.conv_geom import second_image
from npucc.backend.lower.resident import RESIDENT_SHARE
from npucc.ir.graph import Graph, Layer, Tensor
from npucc.ir.program import TiledProgram
from npucc.target import Target
from npucc.target.cost import cube_bound, ddr_bound, dma_cycles, vector_bound

# band intermediates hold at most 1/CASCADE_SHARE of L1 at any layer of a chain. NOTE: at 2
# they and a band's blocks (their share, TILE_SHARE) fill L1, so the chain is the model's L1+UB
# peak and DAN, overlapping layers within that peak (overlap_peak 1), overlaps nothing there;
# at 3 ResNet-50 runs 3,355,078 -> 3,298,503 cycles within a peak of 602,368 -> 565,248
# (docs/roofline.md, `r50peak2`)
CASCADE_SHARE = 3
# the layers of no chain that paid within 1/CASCADE_SHARE are planned again within
# 1/WIDE_SHARE of L1 (their bands then longer: fewer halo rows and band latencies); `paying`
# judges them as it judged the first (docs/roofline.md, `mbv2k`)
WIDE_SHARE = 2
POOLS = ("maxpool", "avgpool")
# layers whose output rows read the same input rows (a band of them is a layer of its kind)
ROWWISE = ("lrn",)
# DMAs a cascaded layer issues per band beyond its computation (input, weights, output)
BAND_DMAS = 3
# band heights tried for a link between layers on different units (`trials`, judged by `flow`)
TRIAL_ROWS = (2, 3, 4)

Rows = tuple[int, int]  # [first, one past the last) row


@dataclass(frozen=True, slots=True)
class Cascades:
    """A graph with its cascaded chains replaced by their bands' layers."""

    graph: Graph
    views: dict[str, tuple[str, int]]  # band tensor -> (DDR tensor, first row) it is rows of
    bands: frozenset[str]  # the band intermediates (kept in L1)
    origin: tuple[int, ...]  # per layer of `graph`: the index of its layer in the source graph
    weights: frozenset[str]  # weights and biases held in L1 across their layer's bands

    def wholes(self) -> frozenset[str]:
        """The tensors read or written through band views (they stay in DDR)."""
        return frozenset(whole for whole, _ in self.views.values())

    def outputs(self) -> frozenset[str]:
        """The chains' outputs (written band by band; no layer of `graph` produces them)."""
        return frozenset(w for w in self.wholes() if self.graph.producer(w) is None) - {
            *self.graph.inputs
        }


def _elem_bytes(target: Target) -> int:
    return target.tier_bytes("L1")


def _windowed(layer: Layer) -> bool:
    """Whether `layer` is a conv, a windowed pool or a row-wise layer whose bands are layers of
    its own kind (not a pool whose ceil_mode adds rows its divisor treats apart)."""
    if layer.op in ("conv2d", *ROWWISE):
        return True
    return layer.op in POOLS and not any(layer.attrs.get("ceil_pads", ()))


def _kernel(graph: Graph, layer: Layer) -> tuple[int, int]:
    """A conv's or a pool's window: (rows, columns); a row-wise layer's (1, 1)."""
    if layer.op in ROWWISE:
        return 1, 1
    if layer.op == "conv2d":
        kh, kw = graph.tensors[layer.inputs[1]].shape[2:]
        return kh, kw
    kh, kw = layer.attrs["kernel"]
    return kh, kw


def _linked(graph: Graph, a: Layer, b: Layer, target: Target) -> bool:
    """Whether `b` reads `a`'s output as its image, alone, and that output is too large to stay
    resident (a link of a chain; both convs or windowed pools)."""
    if not (_windowed(a) and _windowed(b)) or len(a.outputs) != 1:
        return False
    if second_image(a) or second_image(b):  # its bands would need the second image's too
        return False
    out = a.outputs[0]
    if out in graph.outputs or graph.users(out) != [b] or b.inputs.index(out) != 0:
        return False
    if b.inputs.count(out) != 1 or len(graph.tensors[out].shape) != 4:
        return False
    nbytes = math.prod(graph.tensors[out].shape) * _elem_bytes(target)
    return nbytes > target.memory.capacity("L1") // RESIDENT_SHARE


RowGeometry = tuple[int, int, int, int, int] | None  # what `_in_rows` reads of a layer


def _row_geometry(graph: Graph, layer: Layer) -> RowGeometry:
    """A conv's or pool's row stride, row dilation, kernel rows, top padding and input rows
    (None: a row-wise layer, whose bands read the same rows)."""
    if layer.op in ROWWISE:
        return None
    a = layer.attrs
    sh, dh = a.get("strides", (1, 1))[0], a.get("dilations", (1, 1))[0]
    pt = a.get("pads", (0, 0, 0, 0))[0]
    return sh, dh, _kernel(graph, layer)[0], pt, graph.tensors[layer.inputs[0]].shape[2]


def _in_rows(geometry: RowGeometry, rows: Rows) -> tuple[Rows, int, int]:
    """The input rows a layer's output `rows` read (its `_row_geometry`), and the band's top
    and bottom padding."""
    if geometry is None:
        return rows, 0, 0
    sh, dh, kh, pt, h = geometry
    first = rows[0] * sh - pt
    last = (rows[1] - 1) * sh - pt + (kh - 1) * dh + 1
    lo, hi = max(first, 0), min(last, h)
    return (lo, hi), lo - first, last - hi


def _band_rows(geometries: list[RowGeometry], rows: Rows) -> list[tuple[Rows, int, int]]:
    """Per layer of a chain (of these `_row_geometry`s), the output rows band `rows` of its last
    output needs, and that layer's top and bottom padding (its input rows: the previous
    entry's, or the chain's input's in the last element of the result)."""
    out: list[tuple[Rows, int, int]] = [(rows, 0, 0)] * len(geometries)
    need = rows
    for k in range(len(geometries) - 1, -1, -1):
        window, top, bottom = _in_rows(geometries[k], need)
        out[k] = (need, top, bottom)
        need = window
    return [*out, (need, 0, 0)]


def _row_elems(graph: Graph, name: str) -> int:
    """Elements of one row of every plane of 4-D tensor `name`."""
    n, c, _, w = graph.tensors[name].shape
    return n * c * w


def _held(graph: Graph, chain: list[Layer], target: Target) -> tuple[frozenset[str], int]:
    """The weights and biases of `chain` a cascade can hold in L1 across its bands (a float
    dense conv's, whose blocked product reads them in place), and their L1 bytes."""
    eb, align = _elem_bytes(target), target.memory.alignment
    names = {
        name
        for layer in chain
        if layer.op == "conv2d" and layer.attrs.get("group", 1) == 1 and "qzp" not in layer.attrs
        for name in layer.inputs[1:3]
        if name
    }
    nbytes = sum(-(-math.prod(graph.tensors[n].shape) * eb // align) * align for n in names)
    return frozenset(names), nbytes


Band = list[tuple[Rows, int, int]]  # `_band_rows`'


def _bands(graph: Graph, chain: list[Layer], r: int) -> list[Band]:
    """`_band_rows` of each band of `r` rows of `chain`'s last output, top to bottom."""
    oh = graph.tensors[chain[-1].outputs[0]].shape[2]
    geometries = [_row_geometry(graph, layer) for layer in chain]
    return [_band_rows(geometries, (y0, min(y0 + r, oh))) for y0 in range(0, oh, r)]


def _gain(
    graph: Graph,
    chain: list[Layer],
    r: int,
    target: Target,
    hold: bool,
    share: int = CASCADE_SHARE,
    bands: list[Band] | None = None,
) -> int | None:
    """Cycles saved by cascading `chain` with bands of `r` rows of its last output (None: the
    bands' intermediates, with the weights if `hold` holds them (`_held`; else they are
    fetched again per band), do not fit 1/`share` of L1, or a band reads no input row);
    `bands`: its `_bands`, if known."""
    room = target.memory.capacity("L1") // share
    need, gain, _ = _priced(graph, chain, r, target, hold, room, bands)
    return gain if need <= room else None


Price = tuple[int, int | None, bool]  # `_priced`'s


def _priced(
    graph: Graph,
    chain: list[Layer],
    r: int,
    target: Target,
    hold: bool,
    room: int,
    bands: list[Band] | None = None,
) -> Price:
    """`_gain` of `room` L1 bytes: the L1 bytes the bands need at most (a layer's input and
    output bands, aligned, with the held weights), the gain (None: a band reads no input row)
    and whether both are known (False: the bands passed `room` at the bytes given, the rest
    not priced)."""
    eb, align = _elem_bytes(target), target.memory.alignment
    held, held_bytes = _held(graph, chain, target) if hold else (frozenset(), 0)
    bands = _bands(graph, chain, r) if bands is None else bands
    computed = [0] * len(chain)
    x_rows = 0
    last = len(chain) - 1
    # a row of each layer's input (inside the chain: all but the first's) and output (all but
    # the last's), in bytes
    in_row = [_row_elems(graph, layer.inputs[0]) * eb if k else 0 for k, layer in enumerate(chain)]
    out_row = [_row_elems(graph, chain[k].outputs[0]) * eb for k in range(last)]
    need, empty = held_bytes, False
    for band in bands:
        for k in range(len(chain)):
            (lo, hi), _, _ = band[k]
            computed[k] += hi - lo
            live = held_bytes
            if k > 0:
                lo, hi = band[k - 1][0]
                live += -(-(hi - lo) * in_row[k] // align) * align
            if k < last:
                lo, hi = band[k][0]
                live += -(-(hi - lo) * out_row[k] // align) * align
            if live > need:
                need = live
                if need > room:
                    return need, None, False
        lo, hi = band[-1][0]
        empty = empty or hi <= lo
        x_rows += hi - lo
    if empty:
        return need, None, True
    # each intermediate written once and read once, on two pipes that overlap (ddr_bound)
    saved = sum(math.prod(graph.tensors[a.outputs[0]].shape) for a in chain[:-1]) * eb
    x = chain[0].inputs[0]
    extra = (x_rows - graph.tensors[x].shape[2]) * _row_elems(graph, x) * eb
    macs = vec = 0
    for k, layer in enumerate(chain):
        weights = sum(
            math.prod(graph.tensors[n].shape) for n in layer.inputs[1:3] if n and n not in held
        )
        extra += weights * eb * (len(bands) - 1)
        out = graph.tensors[layer.outputs[0]].shape
        kh, kw = _kernel(graph, layer)
        cin = 1  # a pool: one input element a tap
        if layer.op == "conv2d":
            cin = graph.tensors[layer.inputs[0]].shape[1] // layer.attrs.get("group", 1)
        row_macs = _row_elems(graph, layer.outputs[0]) * cin * kh * kw
        over = (computed[k] - out[2]) * row_macs
        if layer.op != "conv2d" or layer.attrs.get("group", 1) > 1:  # on the vector unit
            vec += over
        else:
            macs += over
    latency = dma_cycles(target, "DDR_L1", 0) * BAND_DMAS * len(chain) * (len(bands) - 1)
    cost = ddr_bound(target, extra, 0) + cube_bound(target, macs) + vector_bound(target, vec)
    return need, ddr_bound(target, saved, saved) - cost - latency, True


# (a chain's first layer, its layers, band rows, weights held) -> `_priced`: one graph's, for
# every L1 share (`plan_chains` under CASCADE_SHARE, then WIDE_SHARE)
Priced = dict[tuple[str, int, int, bool], Price]


def _best(
    graph: Graph, chain: list[Layer], target: Target, share: int, priced: Priced
) -> tuple[int, bool, int]:
    """The band height and weight holding of most gain for `chain` within 1/`share` of L1, and
    that gain (0, False, 0: none gains); `priced`: the chains of `graph` priced so far (one
    priced but in part under a smaller share is priced again, if it may fit)."""
    oh = graph.tensors[chain[-1].outputs[0]].shape[2]
    room = target.memory.capacity("L1") // share
    best = (0, False, 0)
    known: dict[int, list[Band]] = {}  # each band height's bands, for both holds
    for hold in (False, True) if _held(graph, chain, target)[0] else (False,):
        for r in range(1, oh):
            key = (chain[0].name, len(chain), r, hold)
            found = priced.get(key)
            if found is None or not found[2] and found[0] <= room:
                bands = known.get(r)
                if bands is None:
                    bands = known[r] = _bands(graph, chain, r)
                found = priced[key] = _priced(graph, chain, r, target, hold, room, bands)
            need, gain, _ = found
            if need <= room and gain is not None and gain > best[2]:
                best = (r, hold, gain)
    return best


def _split(
    graph: Graph, run: list[Layer], target: Target, share: int, priced: Priced
) -> list[tuple[int, int, int, bool]]:
    """The chains (first, one past the last, band rows, weights held) of `run` (linked
    layers) of most total gain within 1/`share` of L1 (`priced`: `_best`'s)."""
    m = len(run)
    score = [0] * (m + 1)
    # (chain start, rows, weights held) of the chain ending here
    choice: list[tuple[int, int, bool] | None] = [None] * (m + 1)
    for t in range(1, m + 1):
        score[t], choice[t] = score[t - 1], None
        for s in range(t - 1):
            rows, hold, gain = _best(graph, run[s:t], target, share, priced)
            if rows and score[s] + gain > score[t]:
                score[t], choice[t] = score[s] + gain, (s, rows, hold)
    chains = []
    t = m
    while t > 0:
        c = choice[t]
        if c is None:
            t -= 1
            continue
        chains.append((c[0], t, c[1], c[2]))
        t = c[0]
    return chains[::-1]


# first layer -> (one past the last layer, band rows, weights held in L1 across the bands)
Chains = dict[int, tuple[int, int, bool]]


def plan_chains(
    graph: Graph,
    target: Target,
    share: int = CASCADE_SHARE,
    taken: Chains | None = None,
    priced: Priced | None = None,
) -> Chains:
    """The chains of `graph` worth cascading on one core within 1/`share` of L1, by `_gain`,
    of layers in none of `taken` (`priced`: the chains of `graph` priced by an earlier call,
    under any share; filled in)."""
    priced = {} if priced is None else priced
    layers = graph.layers
    skip = {k for first, (end, _, _) in (taken or {}).items() for k in range(first, end)}
    chains: Chains = {}
    i = 0
    while i < len(layers) - 1:
        j = i
        while (
            j + 1 < len(layers)
            and not {j, j + 1} & skip
            and _linked(graph, layers[j], layers[j + 1], target)
        ):
            j += 1
        for s, t, rows, hold in _split(graph, list(layers[i : j + 1]), target, share, priced):
            chains[i + s] = (i + t, rows, hold)
        i = j + 1
    return chains


def _unit(layer: Layer) -> str:
    """The unit that computes `layer`: the cube (a dense conv) or the vector unit."""
    dense = layer.op == "conv2d" and layer.attrs.get("group", 1) == 1
    return "CUBE" if dense else "VECTOR"


def busiest_pipes(program: TiledProgram) -> dict[int, str]:
    """Per layer lowered in `program`, the pipe its core 0 nodes occupy longest."""
    busy: dict[int, dict[str, int]] = {}
    for node in program.cores[0].graph.nodes:
        if node.pipe is not None:
            pipes = busy.setdefault(node.layer, {})
            pipes[node.pipe] = pipes.get(node.pipe, 0) + node.cycles
    return {layer: max(sorted(pipes), key=pipes.__getitem__) for layer, pipes in busy.items()}


def links(graph: Graph, chains: Chains, target: Target) -> list[tuple[int, list[int]]]:
    """Per link of a dense conv to a layer of the vector unit, neither in `chains`: its first
    layer and the band heights of TRIAL_ROWS that make two bands or more and fit (weights
    fetched again per band)."""
    layers = graph.layers
    taken = {k for first, (end, _, _) in chains.items() for k in range(first, end)}
    out = []
    for i in range(len(layers) - 1):
        a, b = layers[i], layers[i + 1]
        if i in taken or i + 1 in taken or (_unit(a), _unit(b)) != ("CUBE", "VECTOR"):
            continue
        if not _linked(graph, a, b, target):
            continue
        oh = graph.tensors[b.outputs[0]].shape[2]
        rows = [
            r for r in TRIAL_ROWS if r < oh and _gain(graph, [a, b], r, target, False) is not None
        ]
        if rows:
            out.append((i, rows))
    return out


def trials(
    graph: Graph, chains: Chains, target: Target, bound: dict[int, str]
) -> list[tuple[int, list[int]]]:
    """The `links` whose conv is bound on the cube by `bound` (`busiest_pipes` of `graph`
    lowered without cascades) and whose other layer is not (while one band's second layer
    runs, the next band's conv can, which `_gain` does not credit)."""
    return [
        (i, rows)
        for i, rows in links(graph, chains, target)
        if bound.get(i) == "CUBE" and bound.get(i + 1) != "CUBE"
    ]


def band_graph(graph: Graph, chains: Chains, target: Target) -> Cascades:
    """`graph` with each chain of `chains` replaced by its bands' layers."""
    layers = graph.layers
    out = Graph(graph.name, graph.opset)
    for tensor in graph.tensors.values():
        out.add_tensor(tensor)
    out.inputs, out.outputs = list(graph.inputs), list(graph.outputs)
    views: dict[str, tuple[str, int]] = {}
    bands: set[str] = set()
    origin: list[int] = []
    weights: frozenset[str] = frozenset()
    i = 0
    while i < len(layers):
        if i not in chains:
            out.add_layer(dataclasses.replace(layers[i]))
            origin.append(i)
            i += 1
            continue
        end, r, hold = chains[i]
        chain = list(layers[i:end])
        if hold:
            weights |= _held(graph, chain, target)[0]
        for b, rows in enumerate(_bands(graph, chain, r)):
            image = _band(out, graph, chain[0].inputs[0], rows[-1][0])
            views[image] = (chain[0].inputs[0], rows[-1][0][0])
            for k, layer in enumerate(chain):
                (o0, o1), top, bottom = rows[k]
                tag = f"rows{o0}-{o1}" if k == len(chain) - 1 else f"band{b}"
                name = _band(out, graph, layer.outputs[0], (o0, o1), tag)
                if k == len(chain) - 1:
                    views[name] = (layer.outputs[0], o0)
                else:
                    bands.add(name)
                inputs = [image, *layer.inputs[1:]]
                if len(inputs) > 3 and inputs[3]:  # a fused residual: rows of the output's
                    inputs[3] = _band(out, graph, layer.inputs[3], (o0, o1))
                    views[inputs[3]] = (layer.inputs[3], o0)
                attrs = dict(layer.attrs)
                if layer.op not in ROWWISE:
                    pads = list(layer.attrs.get("pads", (0, 0, 0, 0)))
                    pads[0], pads[2] = top, bottom
                    attrs["pads"] = pads
                band = Layer(f"{layer.name}.band{b}", layer.op, inputs, [name], attrs, layer.src)
                out.add_layer(band)
                origin.append(i + k)
                image = name
        i = end
    return Cascades(out, views, frozenset(bands), tuple(origin), weights)


def _band(out: Graph, graph: Graph, name: str, rows: Rows, tag: str = "") -> str:
    """Add the tensor `name`.`tag` (default: rows{first}-{last}) of rows `rows` of 4-D tensor
    `name` to `out` (once); its name."""
    t = graph.tensors[name]
    n, c, _, w = t.shape
    band = f"{name}.{tag or f'rows{rows[0]}-{rows[1]}'}"
    if band not in out.tensors:
        shape = (n, c, rows[1] - rows[0], w)
        out.add_tensor(Tensor(band, shape, t.dtype, None, t.quant))
    return band


def layer_spans(program: TiledProgram) -> list[tuple[int, int]]:
    """Per run of consecutive nodes of one source layer, in lowering order (a layer, or a
    band of it): that layer and the run's cycles, the larger of its busiest pipe's and its
    longest chain of dependent nodes (the DMA latencies a short band cannot hide).

    NOTE: one list of finish times: a predecessor is in the node's run when it is at or after
    the run's first node (one after the node is not yet timed, 0, as if absent).
    """
    graph = program.cores[0].graph
    preds = graph.preds
    finish = [0] * len(graph.nodes)
    spans: list[tuple[int, int]] = []
    layer, first, longest = 0, 0, 0
    busy: dict[str, int] = {}
    for i, node in enumerate(graph.nodes):
        if i == 0 or node.layer != layer:
            if i:
                spans.append((layer, max(*busy.values(), longest, 0)))
            layer, first, longest, busy = node.layer, i, 0, {}
        cycles = node.cycles
        if node.pipe is not None:
            busy[node.pipe] = busy.get(node.pipe, 0) + cycles
        start = 0
        for p in preds[i]:
            if p >= first and finish[p] > start:
                start = finish[p]
        finish[i] = end = start + cycles
        if end > longest:
            longest = end
    if graph.nodes:
        spans.append((layer, max(*busy.values(), longest, 0)))
    return spans


def paying(chains: Chains, before: list[tuple[int, int]], after: list[tuple[int, int]]) -> Chains:
    """The chains whose bands, as lowered with them (`after`: that program's `layer_spans`),
    take fewer cycles than their layers in the program without cascades (`before`: its
    `layer_spans`), each layer or band timed by
    its busiest pipe or its longest dependent chain; none if they all do but the whole
    program does not (a chain's image and output stay in DDR, which may cost other layers
    resident inputs or a concat folded in place).

    NOTE: the lowering goes layer after layer (band after band), and a layer's first DMAs
    wait for the previous one's last writes: the sum over layers of each one's busiest pipe
    is within 2 % of the makespan on MobileNet v2 (1,161,537 against 1,178,791 cycles); the
    longest dependent chain counts too where it is longer (short bands: Inception v1's stem
    cascaded sums 1,646,396 by busiest pipes against 1,663,823 without, but 1,712,020
    against 1,692,609 with the chains, as its makespans, 1,768,291 against 1,732,356). A
    chain moves work between pipes (DDR reads and writes off MTE2 and MTE3; the band
    intermediates' stores into L1 onto VECTOR, their reads onto MTE1; the halo's MACs onto
    the cube or, for a depthwise conv, the vector unit) and adds the bands' latencies, so
    whether it pays is measured on both lowerings, not guessed.
    """
    kept: Chains = {}
    for first, (end, *_) in chains.items():
        old = sum(c for layer, c in before if first <= layer < end)
        new = sum(c for layer, c in after if first <= layer < end)
        if new < old:
            kept[first] = chains[first]
    if kept == chains and sum(c for _, c in after) >= sum(c for _, c in before):
        return {}
    return kept
