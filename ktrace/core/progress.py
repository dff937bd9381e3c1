"""Progress through a long piece of work: how much is done, and which stage it is in.

A progress callback is ``progress(done, total)``. One that also has a ``stage(name, total, unit)`` method is told
when a new stage begins (loading a trace: "parsing the trace" in bytes, then "finalizing the trace", then
each SQL module by name, then "reading the figures"); the calls ``progress(done, total)`` that follow count
that stage's work. A plain callable is never given a stage, so any ``progress(done, total)`` still works.
"""

from __future__ import annotations

__all__ = ["stage"]


def stage(progress, name: str, total: int | None = None, unit: str = "") -> None:
    """Tell ``progress`` (None, or a callable with an optional ``stage`` method) that stage ``name`` begins;
    total: its amount of work in ``unit`` ("bytes", "records", "modules"), None when unknown."""
    begin = getattr(progress, "stage", None)
    if begin is not None:
        begin(name, total, unit)
