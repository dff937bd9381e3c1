"""``ktrace.whatif``: a capture's timeline replayed with a change (ktrace/analysis/replay/), for ``ktrace whatif``
and library users; re-exported by ktrace.api."""

from __future__ import annotations

from pathlib import Path

from .core.errors import InputError
from .inputs import buffer_options, is_trace, open_input

__all__ = ["whatif"]


def whatif(source, change=None, *, fix=None, thresholds=None, wait_phases=(), **decode_options):
    """What a change would make of a capture's wall: the timeline replayed with it (docs/analysis-schema.md,
    "Cause model and replay"). source: a profiler buffer path (or bytes, an array, a Decoded); change: a
    ``ktrace.Change`` (None: the timeline as measured); fix: a warning's number in ``analyze``'s report (1 is the
    first), a list of them, or "all": the change that removes that warning's cause, the one its stake replays
    (thresholds: ``analyze``'s, default its defaults). Returns a ``WhatIf`` (ns; with ``fix``, its ``fix`` names
    the warnings, their stakes and what cut a stake below the saving); wait_phases: phases nested in the lanes'
    work to read as timed waits (released by the lane they wait for) beside those named as waits (``mma_wait``),
    not with ``fix`` (analyze's stakes read those alone). Raises InputError for a trace (the replay
    reads the buffer's slices), a phase the capture lacks, or a warning number the report does not have."""
    from .analysis.figures.numpy.stream import numpy_figures
    from .analysis.replay.replay import timeline_of
    from .analysis.replay.whatif import Change, whatif as _whatif

    if isinstance(source, (str, Path)) and is_trace(source):
        raise InputError(f"{source}: read as a trace; whatif replays a profiler buffer's slices: give the buffer (.bin)")
    if fix is not None and change is not None:
        raise InputError("whatif: give a change or a warning to fix (fix=N), not both")
    buffer_options([source], decode_options)
    with open_input(source, need="decoder", **decode_options) as inp:
        d = inp.decoded if inp.decoded is not None else inp.decoder.decode()
        name = inp.name
    block = getattr(change, "block", None)
    if block is not None and not 0 <= block < d.launch.num_blocks:
        raise InputError(f"--block {block}: {name} has {d.launch.num_blocks:,} blocks, 0 to {d.launch.num_blocks - 1:,}")
    late = [b for b, _ in getattr(change, "block_speedup", ()) if not 0 <= int(b) < d.launch.num_blocks]
    if late:
        raise InputError(f"--block-speedup {late[0]}=...: {name} has {d.launch.num_blocks:,} blocks, 0 to "
                         f"{d.launch.num_blocks - 1:,}")
    if not len(d.slices):
        raise InputError(f"{name}: no phase slices to replay (ktrace inspect {name} says what the buffer holds)")
    wait_phases = tuple(wait_phases or ())
    if wait_phases and fix is not None:
        raise InputError("whatif: --wait-phases is for a change of your own; --fix N replays the warning as analyze "
                         "reads it (its timed waits: the phases named as waits, e.g. mma_wait)")
    fig = numpy_figures(d)
    _check_wait_phases(name, d, wait_phases)
    tl = timeline_of(d, fig, wait_phases)
    told = None
    if fix is not None:
        change, told = _fix(name, fig, fix, thresholds)
    try:
        w = _whatif(tl, change or Change(), fig.kernel.wall_ns)
    except ValueError as e:
        raise InputError(f"{name}: {e}") from None
    if told is None:
        return w
    from dataclasses import replace

    return replace(w, fix=told(w.saving_ns))


def _check_wait_phases(name: str, d, wait_phases: tuple) -> None:
    """InputError for a wait phase the capture lacks or that never lies nested in a lane's work."""
    if not wait_phases:
        return
    import numpy as np

    from .analysis.figures.numpy.structure import slice_depth

    sl = d.slices
    nested = slice_depth(sl.lane, sl.begin_seq, sl.end_seq, sl.overlap) > 0
    names = {}
    for e in np.unique(sl.event).tolist():
        names.setdefault(d.launch.event_name(int(e)), []).append(int(e))
    for p in wait_phases:
        if p not in names:
            raise InputError(f"whatif: --wait-phases {p!r}: {name} has no phase of that name; its phases: "
                             f"{', '.join(sorted(names))}")
        if not (nested & np.isin(sl.event, names[p])).any():
            raise InputError(f"whatif: --wait-phases {p!r}: no slice of it lies inside a lane's work in {name}; a "
                             "timed wait is a phase nested in the slice it interrupts (ktrace inspect lists the phases)")


def _fix(name: str, fig, fix, thresholds):
    """(the change of the warnings ``fix`` names, a function of the replayed saving giving the WhatIf's ``fix``)."""
    from .analysis.findings.find import find
    from .analysis.model.thresholds import Thresholds
    from .analysis.replay.change import combine
    from .analysis.replay.whatif import fix_told

    warnings = [f for f in find(fig, Thresholds.of(thresholds)) if f.severity == "warning"]
    if not warnings:
        raise InputError(f"{name}: analyze gives no warning: nothing to fix (ktrace analyze {name} --all lists the "
                         "info findings)")
    if isinstance(fix, str) and fix.strip().lower() == "all":
        numbers = list(range(1, len(warnings) + 1))
    else:
        try:
            numbers = [int(x) for x in (fix if isinstance(fix, (list, tuple)) else str(fix).split(","))]
        except ValueError:
            raise InputError(f"whatif: fix {fix!r}: give a warning's number in the analyze report (1 to "
                             f"{len(warnings)}) or 'all'") from None
    bad = [n for n in numbers if not 1 <= n <= len(warnings)]
    if bad or not numbers:
        raise InputError(f"{name}: the analyze report has {len(warnings)} warning(s): give --fix 1 to "
                         f"{len(warnings)} or all, not {bad[0] if bad else fix!r}")
    chosen = [(n, warnings[n - 1]) for n in numbers]
    if len(chosen) == 1 and chosen[0][1].change is None:
        n, f = chosen[0]
        raise InputError(f"{name}: warning {n} ({f.kind}) names no change the replay can make: its stake is its "
                         "share of the critical path; give a change (--balance, --speedup, ...) instead")
    resized = [n for n, f in chosen if f.change is not None and f.change.blocks is not None]
    if resized and len(chosen) > 1:
        raise InputError(f"{name}: warning {resized[0]} resizes the grid, which takes no other change with it: "
                         f"replay it alone (--fix {resized[0]})")
    replayable = [f.change for _, f in chosen if f.change is not None]
    change = replayable[0] if len(replayable) == 1 else combine(replayable)
    return change, lambda saving: fix_told(chosen, saving, float(fig.kernel.wall_ns or 0))
