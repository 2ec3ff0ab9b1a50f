"""CompileOptions: every option of a compile, typed; the CLI and `npucc.compile` build one."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from npucc.target import Target

# the mesh plan searches (the hypercut pass's methods; here so the CLI lists them cheaply)
SEARCHES = ("hypercut", "sa", "layer-sequential", "layer-pipelined")
# the plans HyperCut's final descent starts from: the beam's best complete plan, and the
# layer-sequential and layer-pipelined plans as its plan space represents them
Start = Literal["beam", "layer-sequential", "layer-pipelined"]
STARTS: tuple[Start, ...] = ("beam", "layer-sequential", "layer-pipelined")
# --precision: a target precision (npucc.target.PRECISIONS) or auto (int8 for a quantized
# model, the target's own precision otherwise)
PRECISION_CHOICES = ("fp32", "fp16", "int8", "auto")


@dataclass(frozen=True, slots=True)
class CompileOptions:
    """What a compile is told; the pipeline's passes take their fields from it.

    NOTE: this is the only place compile options live: `npucc.compiler.pipeline` copies them
    into the pass instances' dataclass fields, and the pass manager takes the print and dump
    options. Nothing else reads them.
    """

    target: str | os.PathLike[str] | Target = "davinci-core"  # preset name, TOML path or Target
    schedule: str = "dan"  # per-core scheduler (schedule pass)
    input_shapes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)  # import-onnx
    batch: int | None = None  # fixes the symbolic batch dimension of every other input
    search: str = "hypercut"  # mesh plan search (hypercut pass)
    beam_width: int = 256  # HyperCut's beam (hypercut pass)
    seed: int = 0  # the plan search's seed (hypercut pass)
    fallback: str = "error"  # what npucc cannot lower: "error" refuses it, "host" runs it there
    precision: str | None = None  # PRECISION_CHOICES; None: the target's own precision
    # one core: DAN's live L1+UB bytes within this multiple of its memory plan's peak while it
    # overlaps layers (schedule pass); inf: only the plan's addresses bound them
    overlap_peak: float = 1.0
    # stats["peak_floor"]: lower bounds on the L1+UB peak of every order of each core's DAG
    # (schedule pass; ~1 CPU s on ResNet-50, so only when asked)
    peak_floor: bool = False
    # worker processes for independent work (each core's schedule, a search round's prices);
    # None: npucc.parallel.default_jobs() ($NPUCC_JOBS, else the CPUs this process may use).
    # NOTE: the output is the same bytes whatever the number
    jobs: int | None = None
    debug_map: str | os.PathLike[str] | None = None  # write the ONNX node -> stream map here
    print_before: frozenset[str] = frozenset()  # pass names: print the IR before them
    print_after: frozenset[str] = frozenset()  # pass names: print the IR after them
    print_after_all: bool = False
    dump_dir: str | os.PathLike[str] | None = None  # the IR after each pass, one file each
    on_pass: Callable[[str], None] | None = None  # called with each pass's name before it runs
