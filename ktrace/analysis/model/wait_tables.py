"""The wait evidence's tables (computed with numpy for every engine: evidence/waits.py): what each wait
waited for, per phase boundary and warp group, and the gap before each phase instance's last finisher."""

from __future__ import annotations


import numpy as np

from ..model.table import INT as _INT, INTN as _INTN, REAL as _REAL, TEXT as _TEXT, Table, kinds as _kinds, table
from ...core.records import frozen

__all__ = ["WaitCauses", "LeadIns", "TopSlices"]


@table
class WaitCauses(Table):
    """One row per phase boundary ``phase -> next_phase`` and warp group: what its waits waited for.
    Not in the SQL package: computed with numpy from the slices for every engine (evidence.py)."""

    SQL_TABLE = ""
    ORDER_BY = "phase_index, next_phase_index, grp"
    KINDS = _kinds(
        phase=_TEXT, next_phase=_TEXT, phase_index=_INT, next_phase_index=_INT, group=_INT, count=_INT,
        sum_ns=_INT, mean_ns=_REAL, p50_ns=_INT, max_ns=_INT, cause=_TEXT, cluster_size=_INT, instances=_INT,
        synced_instances=_INT, release_spread_ns=_REAL, gap_spread_ns=_REAL, handoff_gaps=_INT,
        handoff_expected=_REAL, handoff_group=_INTN, waiting_gaps=_INT, waited_gaps=_INT, waited_block=_INTN,
        waited_block_count=_INT, own_spread_ns=_REAL, follow_slope=_REAL, release_p50_ns=_REAL, ambiguous=_INT, tested_gaps=_INT)


@table
class LeadIns(Table):
    """One row per phase instance (as ``ktrace_phase_instance``): the gap before the last finisher's slice on
    its own lane, and the median such gap over the instance's lanes (NaN where no lane ran anything before).
    A late start is a late begin that this gap explains, not lag the lane carried from its own earlier work."""

    SQL_TABLE = ""
    ORDER_BY = "phase_index, k"
    KINDS = _kinds(phase_index=_INT, k=_INT, last_lead_in_ns=_INTN, median_lead_in_ns=_REAL, lanes_with_prev=_INT)


@frozen
class TopSlices:
    """The top-level phase slices the evidence reads: one entry per slice (any order)."""

    lane: np.ndarray
    block: np.ndarray
    group: np.ndarray
    phase_index: np.ndarray
    k: np.ndarray
    begin: np.ndarray
    end: np.ndarray

    @classmethod
    def of(cls, lane, block, group, phase_index, k, begin, end, top=None) -> "TopSlices":
        cols = [np.asarray(c) for c in (lane, block, group, phase_index, k, begin, end)]
        if top is not None:
            m = np.asarray(top, bool)
            cols = [c[m] for c in cols]
        return cls(*(c.astype(np.int64, copy=False) for c in cols))
