"""The figures every last-finisher verdict stores (findings/last_finisher.py decides which kind it is)."""

from __future__ import annotations


from .base import KindFigures
from ....core.records import frozen

__all__ = ["LastFinisherFigures"]


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
