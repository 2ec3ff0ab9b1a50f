"""Codegen's instruction lines: operands resolved at a node of the schedule and printed, those
of one form (`npucc.ir.instr_form`: alike but for their addresses) from one cached template.

A line's text is its form's template (`instr_template`, behind the line's head) filled with its
operands' byte addresses. Each instruction class gets one generated function (as
`InstrFields.own_key`) that places every operand, builds the form key and fills the template
in one frame: no Python call per operand (MobileNet v2: ~15,000 instruction lines, ~500
forms).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from npucc.codegen.ddr_layout import DdrLayout
from npucc.ir.instr_form import InstrFields, instr_fields
from npucc.ir.instr_text import instr_template
from npucc.ir.isa import DDR, NOC, BufRef, DdrRef, Instr, MemRef
from npucc.ir.isa_cost import instr_energy, operand_bytes
from npucc.ir.replay import Replay
from npucc.ir.stream_text import line_head
from npucc.target import Target

# (text, energy) of an instruction at a node on a pipe (`Any`: of the renderer's own class)
Render = Callable[[Any, int, str], tuple[str, float]]
# a form: its line's template (a %-format of the operands' addresses), each operand's element
# bytes (field order), then its picojoules
Form = tuple[Any, ...]


def place(
    ref: object, node: int, replay: Replay, layout: DdrLayout, tier_of: Callable[[int], str]
) -> tuple[str, int, int] | None:
    """Where operand `ref` is at `node` of the schedule: its tier, the byte address of its
    buffer or tensor and its element offset there (None: not a BufRef or DdrRef).

    NOTE: the rule's one home; `_RENDER` inlines it (a buffer's offset is `Replay.offset_at`'s,
    read from a list where the buffer never moves)."""
    if isinstance(ref, BufRef):
        return tier_of(ref.buf), replay.offset_at(node, ref.buf), ref.off
    if isinstance(ref, DdrRef):
        if ref.key in layout.noc:
            return NOC, layout.noc[ref.key], ref.off
        return DDR, layout.addr[ref.key], ref.off
    return None


def resolve(
    instr: Instr,
    node: int,
    replay: Replay,
    layout: DdrLayout,
    target: Target,
    tier_of: Callable[[int], str],
) -> Instr:
    """Replace BufRef/DdrRef operands by MemRefs at this node's point of the schedule."""
    resolved: dict[str, MemRef] = {}
    for name, ref in instr.operands().items():
        placed = place(ref, node, replay, layout, tier_of)
        if placed is not None:
            tier, base, off = placed
            resolved[name] = MemRef(tier, base + off * operand_bytes(target, instr, name))
    return instr.with_operands(**resolved)


# one operand: its tier tK, base address aK and element offset fK (`place`, inlined)
_OPERAND = """\
        r = i.{name}
        if isinstance(r, BufRef):
            b = r.buf
            t{k} = tiers[b]
            a{k} = offs[b]
            if a{k} is None:
                a{k} = offset_at(v, b)
            f{k} = r.off
        elif isinstance(r, DdrRef):
            t{k}, a{k} = places[r.key]
            f{k} = r.off
        else:
            t{k} = r.tier
            a{k} = r.addr
            f{k} = 0
"""
_RENDER = """\
def bind(tiers, offs, offset_at, places, forms_get, new_form):
    def render(i, v, p):
{operands}\
        key = (p, {key})
        form = forms_get(key)
        if form is None:
            form = new_form(i, v, p, key)
        text, {sizes}, pj = form
        return text % ({addrs},), pj
    return render
"""
_BINDERS: dict[type[Instr], Callable[..., Render]] = {}


def _binder(cls: type[Instr], fields: InstrFields) -> Callable[..., Render]:
    """The generated function that makes `cls`'s renderer for one core (made once a class)."""
    found = _BINDERS.get(cls)
    if found is None:
        names = fields.names
        ks = range(len(names))
        source = _RENDER.format(
            operands="".join(_OPERAND.format(name=n, k=k) for k, n in enumerate(names)),
            key=fields.key_source([f"t{k}" for k in ks]),
            sizes=", ".join(f"s{k}" for k in ks),
            addrs=", ".join(f"a{k} + f{k} * s{k}" for k in ks),
        )
        env: dict[str, Any] = {"cls": cls, "E": (), "BufRef": BufRef, "DdrRef": DdrRef}
        exec(source, env)  # noqa: S102  (plain functions)
        found = _BINDERS[cls] = env["bind"]
    return found


class Printer:
    """Prints the resolved instructions of one program (its cores share the forms)."""

    def __init__(self, target: Target, layout: DdrLayout) -> None:
        self.target = target
        self.layout = layout
        self.forms: dict[tuple[Any, ...], Form] = {}
        # a DDR tensor's (tier, address): on chip (NOC) if it is there, else in DDR (`place`)
        places = {key: (DDR, addr) for key, addr in layout.addr.items()}
        places.update((key, (NOC, addr)) for key, addr in layout.noc.items())
        self.places = places

    def core(self, replay: Replay, tiers: list[str]) -> CorePrinter:
        """The printer of one core's lines (`tiers`: its buffers' tiers)."""
        return CorePrinter(self, replay, tiers)


class CorePrinter:
    """Prints one core's instructions: one generated renderer per instruction class."""

    def __init__(self, printer: Printer, replay: Replay, tiers: list[str]) -> None:
        self.printer = printer
        self.replay = replay
        self.tiers = tiers
        homes = replay.homes
        offsets = replay.offsets
        # NOTE: a buffer's offset throughout (`Replay.offset_at`), None where a spill moves it
        self.offs = [None if b in homes else offsets[b] for b in range(len(tiers))]
        self.renders: dict[type, Render] = {}  # by instruction class

    def render(self, cls: type[Instr]) -> Render:
        """The renderer of instructions of `cls`: (line text but its flags, picojoules) of one
        at a node on a pipe."""
        found = self.renders.get(cls)
        if found is None:
            fields = instr_fields(cls)
            printer = self.printer
            bind = _binder(cls, fields)
            found = self.renders[cls] = bind(self.tiers, self.offs, self.replay.offset_at,
                                             printer.places, printer.forms.get,
                                             self._new_form(fields))  # fmt: skip
        return found

    def _new_form(self, fields: InstrFields) -> Callable[[Instr, int, str, Any], Form]:
        """The function that makes and keeps the form of an instruction at a node."""
        printer = self.printer
        target, layout, forms = printer.target, printer.layout, printer.forms
        replay, tier_of = self.replay, self.tiers.__getitem__

        def new_form(instr: Instr, node: int, pipe: str, key: Any) -> Form:
            resolved = resolve(instr, node, replay, layout, target, tier_of)
            sizes = [operand_bytes(target, resolved, n) for n in fields.names]
            # NOTE: a pipe name has no `%` (PIPES); escaped all the same
            text = line_head(pipe.replace("%", "%%"), instr_template(resolved, target))
            form = forms[key] = (text, *sizes, instr_energy(target, resolved))
            return form

        return new_form
