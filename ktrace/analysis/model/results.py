"""The analysis figures as frozen, columnar tables (numpy, units in the names), shared by the SQL path
(figures.py) and the numpy engine (stream.py) so that the two can be compared exactly.

Each table is one SQL table of the ``ktrace`` package (docs/analysis-schema.md); the SQL column ``grp`` is
``group`` here. Integer columns are int64, real ones float64 (NaN where SQL has NULL), text ones object
arrays of str (None where SQL has NULL).
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any, ClassVar

import numpy as np

from .wait_tables import LeadIns, TopSlices, WaitCauses
from .launch_shape import Blocks, BusySms, LaneTotals, Occupancy
from .table import INT as _INT, INTN as _INTN, REAL as _REAL, TEXT as _TEXT, Table, kinds as _kinds, table
from ...core.records import frozen

__all__ = [
    "Table",
    "PhaseInstances",
    "Phases",
    "PhaseLanes",
    "Waits",
    "CriticalPath",
    "CriticalShares",
    "Blocks",
    "LaneTotals",
    "BusySms",
    "Occupancy",
    "WaitCauses",
    "LeadIns",
    "REMAINDERS",
    "Kernel",
    "Figures",
]

@table
class PhaseInstances(Table):
    """One row per phase instance (the k-th slice of a phase on each lane): SQL ``ktrace_phase_instance``."""

    last_lead_ns: np.ndarray  # real: NaN with a single lane
    lead_in_min_ns: np.ndarray  # intn: NULL without prev_lanes

    SQL_TABLE: ClassVar[str] = "ktrace_phase_instance"
    ORDER_BY: ClassVar[str] = "phase_index, k"
    KINDS: ClassVar[dict[str, str]] = _kinds(
        phase=_TEXT, phase_index=_INT, k=_INT, lanes=_INT, min_dur_ns=_INT, p50_dur_ns=_INT, p90_dur_ns=_INT,
        max_dur_ns=_INT, sum_dur_ns=_INT, mean_dur_ns=_REAL, imbalance=_REAL, begin_ns=_INT, end_ns=_INT,
        wall_ns=_INT, excess_ns=_INT, start_skew_ns=_INT, end_skew_ns=_INT, last_block=_INT, last_group=_INT,
        last_sm=_INT, last_lane=_INT, tied_last_lanes=_INT, last_lead_ns=_REAL, depth=_INT, p50_begin_ns=_INT,
        last_begin_ns=_INT, last_dur_ns=_INT, prev_lanes=_INT, sync_lanes=_INT, lead_in_min_ns=_INTN,
        lead_in_max_ns=_INTN, later_wave_lanes=_INT)


@table
class Phases(Table):
    """One row per phase: sums and means over its instances, last-finisher stability. SQL ``ktrace_phase``."""

    SQL_TABLE: ClassVar[str] = "ktrace_phase"
    ORDER_BY: ClassVar[str] = "phase_index"
    KINDS: ClassVar[dict[str, str]] = _kinds(
        phase=_TEXT, phase_index=_INT, groups=_TEXT, instances=_INT, slices=_INT, sum_max_dur_ns=_INT,
        mean_max_dur_ns=_REAL, sum_dur_ns=_INT, mean_dur_ns=_REAL, imbalance=_REAL, max_imbalance=_REAL,
        sum_wall_ns=_INT, sum_excess_ns=_INT, mean_excess_ns=_REAL, max_excess_ns=_INT,
        mean_start_skew_ns=_REAL, max_start_skew_ns=_INT, mean_end_skew_ns=_REAL, max_end_skew_ns=_INT,
        mean_last_lead_ns=_REAL, top_last_block=_INT, top_last_count=_INT, distinct_last_blocks=_INT,
        tied_instances=_INT, depth=_INT, lanes=_INT, idle_lanes=_INT, min_lane_instances=_INT,
        max_lane_instances=_INT, sync_instances=_INT, wave_instances=_INT)


@table
class PhaseLanes(Table):
    """One row per (phase, lane): the lane's slices of the phase over all instances. SQL ``ktrace_phase_lane``."""

    SQL_TABLE: ClassVar[str] = "ktrace_phase_lane"
    ORDER_BY: ClassVar[str] = "phase_index, lane"
    KINDS: ClassVar[dict[str, str]] = _kinds(
        phase=_TEXT, phase_index=_INT, block=_INT, group=_INT, lane=_INT, sm=_INT, instances=_INT,
        min_dur_ns=_INT, mean_dur_ns=_REAL, max_dur_ns=_INT, sum_dur_ns=_INT, last_count=_INT)


@table
class Waits(Table):
    """Waits (gaps >= 0 to the lane's next slice) per phase boundary ``phase -> next_phase``. SQL ``ktrace_wait``."""

    SQL_TABLE: ClassVar[str] = "ktrace_wait"
    ORDER_BY: ClassVar[str] = "phase_index, next_phase_index"
    KINDS: ClassVar[dict[str, str]] = _kinds(
        phase=_TEXT, next_phase=_TEXT, phase_index=_INT, next_phase_index=_INT, count=_INT, sum_ns=_INT,
        mean_ns=_REAL, min_ns=_INT, p50_ns=_INT, p90_ns=_INT, max_ns=_INT, max_block=_INT, max_group=_INT,
        max_k=_INT)


@table
class CriticalPath(Table):
    """The backward walk that tiles the kernel's wall time, one row per part in time order: a slice of the
    path, or a gap (``wait``, ``lane_gap``, ``block_switch``, ``lead_in``). SQL ``ktrace_critical_path``;
    docs/analysis-structure.md."""

    SQL_TABLE: ClassVar[str] = "ktrace_critical_path"
    ORDER_BY: ClassVar[str] = "step"
    KINDS: ClassVar[dict[str, str]] = _kinds(
        step=_INT, kind=_TEXT, phase=_TEXT, phase_index=_INTN, k=_INTN, last_block=_INTN, last_group=_INTN,
        last_lane=_INTN, begin_ns=_INT, end_ns=_INT, dur_ns=_INT, next_phase=_TEXT)


REMAINDERS = ("lead_in", "lane_gap", "block_switch")


@table
class CriticalShares(Table):
    """The wall time's parts on the critical path: each phase (its slices and the waits after it), then the
    remainders (``lead_in``, ``lane_gap``, ``block_switch``). Shares add up to 1. SQL
    ``ktrace_critical_path_share``."""

    SQL_TABLE: ClassVar[str] = "ktrace_critical_path_share"
    ORDER_BY: ClassVar[str] = "sort_key"
    KINDS: ClassVar[dict[str, str]] = _kinds(
        part=_TEXT, phase=_TEXT, phase_index=_INTN, instances=_INT, dur_ns=_INT, wait_ns=_INT, total_ns=_INT,
        share=_REAL)

    def coverage(self, wall_ns) -> float | None:
        """Sum of the parts / wall: 1.0 when the parts account for the whole wall."""
        return float(self.total_ns.sum()) / wall_ns if wall_ns else None


@frozen
class Kernel:
    """The kernel's extent over its phase slices (ns) and the timer resolution every figure carries.

    tick_ns: the launch's measured ``timer_tick_ns``, else the smallest timer step seen (between two
    distinct slice durations, or between consecutive records of a lane), else 32 (an H200's tick); tick_source says which ('launch', 'smallest step', 'default').
    A difference smaller than tick_ns is not a finding. begin_ns/end_ns are None without phase slices.
    """

    begin_ns: int | None
    end_ns: int | None
    wall_ns: int | None
    slices: int
    lanes: int
    phases: int
    smallest_step_ns: int | None
    tick_ns: int
    tick_source: str

    SQL_TABLE: ClassVar[str] = "ktrace_kernel"

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@frozen(eq=False)
class Figures:
    """Every figure of the analysis, from SQL (figures.py) or from the numpy engine (stream.py).

    launch: the launch facts (the launch slice's args without 'debug.'), in the order written. top: the
    top-level slices the wait evidence read, when it read every one (the replay's input; not a figure); timed:
    the slices of timed-wait phases nested in them (the replay's too).
    """

    kernel: Kernel
    launch: dict
    phases: Phases
    instances: PhaseInstances
    lanes: PhaseLanes
    waits: Waits
    critical_path: CriticalPath
    critical_shares: CriticalShares
    blocks: Blocks
    lane_totals: LaneTotals
    busy_sms: BusySms
    occupancy: Occupancy
    wait_causes: WaitCauses
    lead_ins: LeadIns
    top: TopSlices | None = None  # every top-level slice, for the replay (replay.py); None: a sample was read
    timed: TopSlices | None = None  # the timed-wait slices nested in the lanes' work (replay.py); None: none

    TABLES: ClassVar[tuple[str, ...]] = ("phases", "instances", "lanes", "waits", "critical_path",
                                         "critical_shares", "blocks", "lane_totals", "busy_sms", "occupancy",
                                         "wait_causes", "lead_ins")

    def differences(self, other: "Figures") -> list[str]:
        """What differs from ``other``, one line per table column (empty when every figure is equal)."""
        out = []
        if self.kernel != other.kernel:
            out.append(f"kernel: {self.kernel} != {other.kernel}")
        if self.launch != other.launch:
            out.append(f"launch: {self.launch} != {other.launch}")
        for name in self.TABLES:
            out += [f"{name}.{d}" for d in getattr(self, name).differences(getattr(other, name))]
        return out
