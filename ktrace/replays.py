"""``ktrace.whatif``: a capture's timeline replayed with a change (ktrace/analysis/replay.py, whatif.py), for
``ktrace whatif`` and library users; re-exported by ktrace.api."""

from __future__ import annotations

from pathlib import Path

from .core.errors import InputError
from .inputs import buffer_options, is_trace, open_input

__all__ = ["whatif"]


def whatif(source, change=None, **decode_options):
    """What a change would make of a capture's wall: the timeline replayed with it (docs/analysis-schema.md,
    "Cause model and replay"). source: a profiler buffer path (or bytes, an array, a Decoded); change: a
    ``ktrace.Change`` (None: the timeline as measured). Returns a ``WhatIf`` (ns).
    Raises InputError for a trace (the replay reads the buffer's slices) or a phase the capture lacks."""
    from .analysis.replay.replay import timeline_of
    from .analysis.figures.numpy.stream import numpy_figures
    from .analysis.replay.whatif import Change, whatif as _whatif

    if isinstance(source, (str, Path)) and is_trace(source):
        raise InputError(f"{source}: read as a trace; whatif replays a profiler buffer's slices: give the buffer (.bin)")
    buffer_options([source], decode_options)
    with open_input(source, need="decoder", **decode_options) as inp:
        d = inp.decoded if inp.decoded is not None else inp.decoder.decode()
        name = inp.name
    if not len(d.slices):
        raise InputError(f"{name}: no phase slices to replay (ktrace inspect {name} says what the buffer holds)")
    fig = numpy_figures(d)
    tl = timeline_of(d, fig)
    try:
        return _whatif(tl, change or Change(), fig.kernel.wall_ns)
    except ValueError as e:
        raise InputError(f"{name}: {e}") from None
