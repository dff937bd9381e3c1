"""What the figures show before a verdict names a cause: whether a phase's instances line up across lanes,
which causes the waits into it had, whether its start skew is carried over from the phase before, and which
block dominates a figure. verdicts.py, last_finisher.py and the kinds' detectors read these."""

from __future__ import annotations

import numpy as np

__all__ = ["lined_up", "incoming_causes", "carried", "dominant", "DOMINANCE"]

DOMINANCE = 2.0  # a named block's excess over the median is at least this many times the runner-up's


def lined_up(ctx, p: dict, inst) -> bool:
    """The phase's instances line up across lanes: every lane ran as many of them, and in most instances every
    lane began instance k+1 after the last lane began instance k (lanes of a work list drift apart)."""
    if p["min_lane_instances"] != p["max_lane_instances"]:
        return False
    if len(inst) <= 1:
        return True
    # Instance k+1 begins on every lane after instance k began on every lane: the lanes keep step.
    order = np.argsort(inst.k, kind="stable")
    first = inst.begin_ns[order].astype(np.int64)
    last = first + inst.start_skew_ns[order].astype(np.int64)
    ok = first[1:] >= last[:-1] - ctx.eps
    return bool(ok.mean() >= ctx.th.stable_fraction)


def incoming_causes(ctx, phase: str) -> set[str]:
    """The causes of the waits that end at this phase's begins (docs: "What a wait waited for")."""
    wc = ctx.wc
    m = (wc.next_phase == phase) & (wc.cause != "none")
    return set(wc.cause[m].tolist())


def carried(ctx, p, inst) -> bool:
    """The phase's start skew comes over from the phase before it on each lane: no barrier evidenced before
    it, and the gaps before it (lead-ins) spread over at most half the start skew."""
    with_prev = inst.prev_lanes > 0
    if not with_prev.any() or incoming_causes(ctx, p["phase"]) & {"grid", "cluster"}:
        return False
    spread = (inst.lead_in_max_ns - inst.lead_in_min_ns)[with_prev]
    return float(np.nan_to_num(spread).mean()) * 2 <= p["mean_start_skew_ns"]


def dominant(values: np.ndarray, eps: float) -> int | None:
    """The index of the value that stands out above the others (see DOMINANCE), else None."""
    v = np.asarray(values, np.float64)
    if len(v) < 2:
        return None
    order = np.argsort(-v, kind="stable")
    med = float(np.median(v))
    top, second = float(v[order[0]]) - med, float(v[order[1]]) - med
    if top < eps or top < DOMINANCE * max(second, 0.0):
        return None
    return int(order[0])
