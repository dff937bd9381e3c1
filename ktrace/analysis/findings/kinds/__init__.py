"""The finding kinds, one module each, registered once: ``KINDS`` below is the registry.

Each kind's module declares its name, what it detects, its typed figures (a frozen dataclass), its rank among
the verdicts of one cause, its few words as a consequence, its headline, what the annotated trace draws for it
and what ``ktrace diff`` compares (``base.Kind``). Nothing outside this package spells a kind's name: read
``kinds.TAIL``, or ask ``kinds.get(name)`` for its parts. A new kind is one module here and its line below
(docs/architecture.md, "Adding a finding kind").
"""

from __future__ import annotations

from . import (critical_path, idle_lanes, large_wait, late_start, load_imbalance, moving_last_finisher, pipeline,
               rotating_imbalance, serial_tail, stable_straggler, start_skew, straggler_change, tail, untimed_work,
               wave_quantization)
from . import gpc_imbalance
from .base import Kind, KindFigures

__all__ = ["KINDS", "Kind", "KindFigures", "get", "names", "LEAD_ORDER", "SERIAL_TAIL",
           "STABLE_STRAGGLER", "LATE_START", "STRAGGLER_CHANGE", "ROTATING_IMBALANCE", "WAVE_QUANTIZATION",
           "PIPELINE", "LOAD_IMBALANCE", "LARGE_WAIT", "UNTIMED_WORK", "TAIL", "MOVING_LAST_FINISHER", "START_SKEW",
           "IDLE_LANES", "CRITICAL_PATH", "GPC_IMBALANCE"]

# The registry: one line per kind.
KINDS: tuple[Kind, ...] = (
    serial_tail.KIND,
    stable_straggler.KIND,
    late_start.KIND,
    straggler_change.KIND,
    rotating_imbalance.KIND,
    wave_quantization.KIND,
    gpc_imbalance.KIND,
    pipeline.KIND,
    load_imbalance.KIND,
    large_wait.KIND,
    untimed_work.KIND,
    tail.KIND,
    moving_last_finisher.KIND,
    start_skew.KIND,
    idle_lanes.KIND,
    critical_path.KIND,
)

_BY_NAME = {k.name: k for k in KINDS}

SERIAL_TAIL = serial_tail.NAME
STABLE_STRAGGLER = stable_straggler.NAME
LATE_START = late_start.NAME
STRAGGLER_CHANGE = straggler_change.NAME
ROTATING_IMBALANCE = rotating_imbalance.NAME
WAVE_QUANTIZATION = wave_quantization.NAME
GPC_IMBALANCE = gpc_imbalance.NAME
PIPELINE = pipeline.NAME
LOAD_IMBALANCE = load_imbalance.NAME
LARGE_WAIT = large_wait.NAME
UNTIMED_WORK = untimed_work.NAME
TAIL = tail.NAME
MOVING_LAST_FINISHER = moving_last_finisher.NAME
START_SKEW = start_skew.NAME
IDLE_LANES = idle_lanes.NAME
CRITICAL_PATH = critical_path.NAME

# Which verdict leads a cause's finding, first to last (by rank).
LEAD_ORDER: tuple[str, ...] = tuple(k.name for k in sorted(KINDS, key=lambda k: k.rank))


def get(name: str) -> Kind | None:
    """The kind called ``name`` (None for a kind this version does not know)."""
    return _BY_NAME.get(name)


def names() -> tuple[str, ...]:
    return tuple(_BY_NAME)
