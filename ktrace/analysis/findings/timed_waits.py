"""A pipeline whose waits are timed: the kernel wraps each wait in a phase of its own (IKET's ``mma_wait`` around a
consumer's wait for a full stage, ``load_wait`` around a producer's wait for a free one), so the waits are slices,
not the gaps the wait evidence reads (``launch_verdicts._pipeline``). A phase is a wait when its name says so: it
is ``wait`` or ends in ``wait`` after a separator (``mma_wait``, ``tma-wait``, ``barrier.wait``, ``Wait``).

Per lane, its own work is its busy time (top-level slices) less the time in wait phases. Within a block, the warp
group (or warp) that spends most of its busy time waiting waits for the one that hardly waits: the latter bounds
the blocks. Speeding the bounding group's own work up to the waiting group's own work is what the pipeline could
gain; the stake is that, as the last part of the wall."""

from __future__ import annotations

import re

import numpy as np

from .verdict import Verdict, fmt as _fmt

__all__ = ["timed_wait_pipeline", "is_wait_phase"]

WAIT_NAME = re.compile(r"(?:^|.*[_\-. ])wait$", re.IGNORECASE)
WAITING_SHARE = 0.5  # a group waits when its wait phases are at least this share of its busy time
BOUNDING_SHARE = 0.1  # ... for a group that hardly waits, at most this


def is_wait_phase(name: str) -> bool:
    """A phase that times a wait, by its name: ``wait``, ``mma_wait``, ``tma-wait``, ``barrier.Wait``."""
    return bool(WAIT_NAME.fullmatch(name or ""))


def timed_wait_pipeline(ctx) -> list[Verdict]:
    """The pipeline verdict from timed waits: which group bounds the blocks while another waits in its wait
    phases (figures as the pipeline verdict's, with ``wait_phase`` and the groups' wait shares)."""
    fig = ctx.fig
    pl, lt = fig.lanes, fig.lane_totals
    if not len(pl) or len(lt) < 2:
        return []
    waits = sorted({p for p in pl.phase.tolist() if is_wait_phase(p)})
    if not waits:
        return []
    lanes = lt.lane.astype(np.int64)
    busy = lt.busy_ns.astype(np.float64)
    groups = lt.group.astype(np.int64)
    wait = np.zeros(len(lanes))
    order = np.argsort(lanes, kind="stable")
    top_wait = {}
    for name in waits:  # a handful of phases; per phase, its lanes at once
        m = pl.phase == name
        at = np.searchsorted(lanes[order], pl.lane[m].astype(np.int64))
        at = np.minimum(at, len(lanes) - 1)
        found = lanes[order][at] == pl.lane[m]
        got = np.zeros(len(lanes))
        np.add.at(got, order[at[found]], pl.sum_dur_ns[m][found].astype(np.float64))
        wait += got
        top_wait[name] = got
    rows = []
    for g in np.unique(groups).tolist():
        m = (groups == g) & (busy > 0)
        if not m.any():
            continue
        share = float(wait[m].sum() / busy[m].sum())
        own = float(np.median(busy[m] - np.minimum(wait[m], busy[m])))
        rows.append((g, share, own, m))
    waiting = [r for r in rows if r[1] >= WAITING_SHARE]
    bounding = [r for r in rows if r[1] <= BOUNDING_SHARE]
    if not waiting or not bounding:
        return []
    w = max(waiting, key=lambda r: (r[1], -r[0]))
    b = max(bounding, key=lambda r: (r[2], -r[0]))
    if b[2] <= w[2] + ctx.eps:
        return []  # the group that hardly waits does not do more work: nothing binds the waiting one here
    g_w, share_w, own_w, m_w = w
    g_b, share_b, own_b, _ = b
    phase = max(waits, key=lambda n: (top_wait[n][m_w].sum(), n))
    wall = float(fig.kernel.wall_ns or 0)
    gain = min(own_b - own_w, wall)
    claims = ctx.claim_last(gain)
    gname, bname = _name(fig, g_w), _name(fig, g_b)
    n_waits = int(pl.instances[(pl.phase == phase) & np.isin(pl.lane, lanes[m_w])].sum())
    mean_wait = float(top_wait[phase][m_w].sum() / max(n_waits, 1))
    msg = (f"pipeline: {bname} bounds the blocks: {gname} spends {share_w:.0%} of its busy time waiting in "
           f"{phase} ({n_waits:,} waits, {_fmt(mean_wait)} on average) while {bname} waits {share_b:.0%} of its; "
           f"per block {bname}'s own work is {_fmt(own_b)} and {gname}'s {_fmt(own_w)} (medians): speed up the "
           f"work of {bname}; speeding up {gname} alone gains nothing")
    ev = (f"timed waits: the phases named as waits ({', '.join(waits)}) against each lane's busy time "
          "(top-level slices); a group's own work is its busy time less its waits")
    return [Verdict("pipeline", phase, msg, ev, float(claims.sum()), True, {
        "waiting_group": g_w, "bounding_group": g_b, "next_phase": None, "count": n_waits, "mean_ns": mean_wait,
        "handoff_gaps": 0, "handoff_expected": 0.0, "idle_share": share_w,
        "median_busy_bounding_ns": own_b, "median_busy_waiting_ns": own_w, "tick_ns": ctx.tick,
        "wait_phase": phase, "bounding_wait_share": share_b}, claims, f"pipeline {g_b}")]


def _name(fig, g: int) -> str:
    names = fig.launch.get("group_names")
    parts = names.split(",") if isinstance(names, str) and names else []
    name = parts[g] if 0 <= g < len(parts) else ""
    if re.fullmatch(r"warps? [\d-]+", name):
        return name
    return f"group {g}" + (f" ({name})" if name else "")
