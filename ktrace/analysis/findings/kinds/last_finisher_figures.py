"""The figures every last-finisher verdict stores, and each of its five kinds' own (last_finisher.py decides which
one a phase shows; each kind's module declares the rest of it)."""

from __future__ import annotations


from .base import KindFigures
from ....core.records import frozen

__all__ = ["LastFinisherFigures", "StragglerFigures", "StragglerChangeFigures", "RotatingFigures", "MovingFigures", "LateStartFigures"]


@frozen(kw_only=True)
class LastFinisherFigures(KindFigures):
    """Over the phase's instances: who finished last, how often, by how much, and why (work, late, lag)."""

    instances: int
    top_last_block: int | None
    top_last_count: int | None
    distinct_last_blocks: int | None
    tied_instances: int | None
    mean_last_lead_ns: float | None
    mean_work_excess_ns: float
    mean_late_start_ns: float
    long_instances: int
    late_instances: int
    lagging_instances: int
    tick_ns: float


@frozen(kw_only=True)
class StragglerFigures(LastFinisherFigures):
    block: int
    cause: str  # 'work', 'both', 'lag' or 'small'


@frozen(kw_only=True)
class StragglerChangeFigures(LastFinisherFigures):
    segments: list  # {block, group, first_k, last_k, instances} per run of one last block


@frozen(kw_only=True)
class RotatingFigures(LastFinisherFigures):
    pass


@frozen(kw_only=True)
class MovingFigures(LastFinisherFigures):
    pass


@frozen(kw_only=True)
class LateStartFigures(LastFinisherFigures):
    """A phase's last finisher that starts late (block None: a different block each time)."""

    block: int | None
    cause: str = "late_start"
