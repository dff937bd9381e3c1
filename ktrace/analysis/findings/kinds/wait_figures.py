"""The figures of a boundary's waits, shared by the two kinds one wait detector makes (large_wait.detect):
large_wait and untimed_work."""

from __future__ import annotations


from .base import KindFigures, optional
from ....core.records import frozen

__all__ = ["WaitFigures"]


@frozen(kw_only=True)
class WaitFigures(KindFigures):
    """One boundary's waits (WaitCauses' row) and the instance after which the longest began."""

    next_phase: str
    group: int | None
    count: int
    sum_ns: float
    mean_ns: float
    p50_ns: float
    max_ns: float
    waited_for: str  # 'grid', 'cluster', 'own', 'unexplained', ...
    synced_instances: int
    tested_instances: int
    follow_slope: float | None
    lane_time_fraction: float
    tick_ns: float
    cluster_size: int | None = optional(None)
    waited_block: int | None
    waited_block_late: bool = optional(False)  # the waited block's work is a median lane's: it began late
    barrier_floor_ns: float | None = optional(None)  # the tightest grid barrier's release on this GPU (model/barrier.py)
    max_k: int | None
