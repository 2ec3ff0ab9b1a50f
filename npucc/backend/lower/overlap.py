"""The overlap trials of a one-core lowering: link after link (a conv into a vector layer), the
program with the link cascaded too at each band height it may take, kept if shorter; a link's
trials priced at once in forked workers (npucc.parallel)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from npucc.backend.lower.cascade import Cascades, Chains, band_graph
from npucc.backend.lower.context import ReservedFitError
from npucc.backend.lower.resume import Mark, Resume, Splice, SpliceMiss, Timed
from npucc.ir.graph import Graph
from npucc.ir.program import TiledProgram
from npucc.parallel import fork_map, forks
from npucc.target import Target

# the one-core lowering of a banded graph, from the mark its `Resume` gives (ReservedFitError:
# a tile does not fit beside the band intermediates)
Lower = Callable[[Cascades, Resume], TiledProgram]
# a trial's span and its lowering: the banded graph, its program, its marks, its splice
_Lowered = tuple[int, tuple[Cascades, TiledProgram, Resume, Splice]]


def overlapped(
    lower: Lower,
    graph: Graph,
    target: Target,
    kept: tuple[Chains, dict[int, Mark]],
    program: TiledProgram,
    tried: list[tuple[int, list[int]]],
    jobs: int = 1,
) -> TiledProgram:
    """`program` (`graph` lowered with `chains`, its marks `marks`: `kept`) or, trial after
    trial (`tried`, of `trials`), that with a conv into a vector layer cascaded too, at the
    band height of shortest `flow`, if it is shorter (`jobs`: worker processes for a link's
    trials).

    A lowering records its state before every source layer from the one feeding its link's
    conv (npucc.backend.lower.resume): the trials of a link start from the program kept so
    far's mark, or the link's first trial's, when the layers before it lower alike, and stop
    where their state meets the kept program's before a later layer (`Splice`): they are
    priced with its tail, and the link's pick, if one is shorter, then lowers on from there.
    NOTE: a trial's lowering that is not kept goes before the next is made (a mark it leaves
    keeps only its prefix), and the lowering without cascades is not held here: whole tiled
    programs, four of them were alive at once.
    """
    if not tried:
        return program
    chains, marks = kept  # marks: source layer -> the kept program's mark before it
    timed = timed_run(program, marks)
    best = timed.span
    for first, heights in tried:
        record = frozenset(range(first - 1, len(graph.layers)))
        trial = _Trial(lower, graph, target, chains, marks, timed, first, record)
        pick, won = chains, None
        # NOTE: trials priced at once (they all start from the kept mark) lower here only the
        # pick, that of the first shortest span below `best`
        spans = _spans(trial, heights, jobs) if first - 1 in marks else None
        for rows in heights if spans is None else _pick(spans, best):
            if trial.rows != rows:
                trial.made = None  # NOTE: not held while the pick is lowered again
            lowered = trial.made if trial.rows == rows else trial(rows)
            trial.made = None
            if lowered is None:
                continue
            span, (cascades, banded, resume, splice) = lowered
            del lowered
            if span < best:
                best, pick = span, trial.chosen(rows)
                won = cascades, banded, resume.made, splice.met
            elif first - 1 in resume.made and first - 1 not in marks:
                marks[first - 1] = resume.made[first - 1]
                marks[first - 1].detach()
            del cascades, banded, resume, splice
        del trial
        if won is not None:
            cascades, program, marks, met = won
            del won
            if met is not None:  # a spliced trial: its lowering goes on where it stopped
                resume = Resume(record, met[2])
                program = lower(cascades, resume)
                marks = {**marks, **resume.made}
                del resume
            del cascades, met
            timed = timed_run(program, marks)
            if timed.span != best:
                raise AssertionError(f"a trial priced at {best} lowers to {timed.span}")
        chains = pick
        marks = {source: mark for source, mark in marks.items() if source >= first}
    return program


def timed_run(program: TiledProgram, marks: dict[int, Mark]) -> Timed:
    """The one-core `program`'s graph run, when first read (its pipes' free times kept at its
    `marks`)."""
    graph = program.cores[0].graph
    return Timed(graph, [m.nodes[0] for m in marks.values() if m.graphs[0] is graph])


@dataclass(slots=True)
class _Trial:
    """The overlap trials of link `first` against the kept program (`chains`, `marks`, its run
    `timed`; `record`: the source layers whose marks a trial records): a call lowers one."""

    lower: Lower
    graph: Graph
    target: Target
    chains: Chains
    marks: dict[int, Mark]
    timed: Timed
    first: int
    record: frozenset[int]
    rows: int = 0  # the band height whose lowering this process keeps (`_spans`)
    made: _Lowered | None = None  # that lowering, once made

    def chosen(self, rows: int) -> Chains:
        """The kept chains and the link at band height `rows`."""
        return {**self.chains, self.first: (self.first + 2, rows, False)}

    def __call__(self, rows: int) -> _Lowered | None:
        """The trial at band height `rows`: its span (`Splice.flow`) and its lowering (None: a
        tile does not fit)."""
        first, timed = self.first, self.timed
        splice = Splice(self.marks, timed, first)
        resume = Resume(self.record, self.marks.get(first - 1), splice=splice)
        try:
            cascades = band_graph(self.graph, self.chosen(rows), self.target)
            banded = self.lower(cascades, resume)
        except ReservedFitError:
            return None
        try:
            span = splice.flow(banded.cores[0].graph)
        except SpliceMiss:  # the kept tail reads what the mark does not map: lower it whole
            del banded
            splice = Splice({}, timed, first)
            resume = Resume(self.record, self.marks.get(first - 1), splice=splice)
            banded = self.lower(cascades, resume)
            span = splice.flow(banded.cores[0].graph)
        return span, (cascades, banded, resume, splice)

    def priced(self, rows: int) -> int | None:
        """The span of the trial at band height `rows` (None: a tile does not fit); the
        lowering of `self.rows` kept (`made`)."""
        lowered = self(rows)
        if rows == self.rows:
            self.made = lowered
        return None if lowered is None else lowered[0]


def _pick(spans: dict[int, int | None], best: int) -> list[int]:
    """The band height of the first shortest of `spans` if it is below `best` (none else)."""
    fits = [(span, rows) for rows, span in spans.items() if span is not None]
    span, rows = min(fits, key=lambda fit: fit[0], default=(best, 0))
    return [rows] if span < best else []


def _spans(trial: _Trial, heights: list[int], jobs: int) -> dict[int, int | None] | None:
    """The spans of the link's trials at `heights`, priced at once by forked workers and this
    process, which keeps the lowering of the last height (`trial.made`); None when `jobs`
    does not fork.

    NOTE: every trial starts from the kept program's mark before the link, and one trial
    reads nothing another made but the memo's entries (pure functions of their keys): a
    worker's span is the one this process would find. A picked height a worker priced is
    lowered again here; the last height (the tallest bands: VGG-19's pick at 3 of its 4
    links) is the one kept from this process.
    """
    if not forks(jobs, len(heights)):
        return None
    trial.rows = heights[-1]
    found = fork_map(trial.priced, heights, jobs, here=len(heights) - 1)
    return dict(zip(heights, found, strict=True))
