"""The wait evidence (evidence.py) of a buffer analyzed in parts, in bounded memory.

Up to ``EVIDENCE_MAX_SLICES`` top-level slices, the evidence reads every slice. Beyond, it reads a sample of
whole subsets of 8 consecutive blocks (every ``stride``-th subset, so that clusters, warp groups and blocks
stay whole; the (at most 2) blocks that end 5% of the instances or more are always read, each with the other
block of its pair), and takes from every
slice, a range of lanes at a time, what must be exact: the latest end of
each phase instance (the grid test's reference), each boundary's gap count, sum and longest gap, and the gap
before each instance's last finisher. The tests' rates, spreads and slopes are the sample's
(``WaitCauses.tested_gaps`` says how many gaps they read).
"""

from __future__ import annotations

import numpy as np

from ..forked import fork_imap
from .evidence import LeadIns, TopSlices, WaitCauses, lead_ins, wait_causes

__all__ = ["stream_evidence", "read_evidence", "finish_evidence", "EVIDENCE_MAX_SLICES"]

EVIDENCE_MAX_SLICES = 1 << 19
_SUBSET = 8  # blocks sampled together: the largest portable cluster; larger clusters are not tested on a sample


def _top(cols, a: int, b: int) -> TopSlices:
    """TopSlices of rows [a, b) of the stream's columns (top-level only)."""
    rows = np.arange(a, b)[cols.depth[a:b] == 0]
    return TopSlices(cols.lane[rows].astype(np.int64), cols.block_of(rows), cols.group_of(rows),
                     cols.phase_index[cols.code[rows]], cols.k[rows].astype(np.int64),
                     cols.begin[rows].astype(np.int64), cols.end[rows].astype(np.int64))


def stream_evidence(cols, cuts, tick: float, names: dict, num_blocks, instances, jobs: int = 1
                    ) -> tuple[WaitCauses, LeadIns]:
    """(WaitCauses, LeadIns) of the stream's columns ``cols`` (stream.Columns), read a range of lanes at a
    time (``cuts``: row ranges that begin at a lane's first row), each range in one of ``jobs`` forked
    workers; instances: the instance table."""
    return finish_evidence(read_evidence(cols, cuts, tick, names, num_blocks, instances, jobs))


def finish_evidence(read) -> tuple[WaitCauses, LeadIns]:
    """The evidence's tests on what ``read_evidence`` read (in one process: they read a sample, not every
    slice)."""
    args, kwargs, li_args, li_kwargs = read
    return wait_causes(*args, **kwargs), lead_ins(*li_args, **li_kwargs)


def read_evidence(cols, cuts, tick: float, names: dict, num_blocks, instances, jobs: int = 1) -> tuple:
    """What the evidence's tests read (``finish_evidence``): every top-level slice where they are few; else a
    sample, and what must be exact from every slice, read a range of lanes at a time (``stream_evidence``)."""
    n_top = int((cols.depth == 0).sum())
    if n_top <= EVIDENCE_MAX_SLICES:
        top = _top(cols, 0, cols.n)
        return ((top, tick, names, num_blocks), {},
                (top, instances.phase_index, instances.k, instances.last_lane), {})
    stride = int(np.ceil(n_top / EVIDENCE_MAX_SLICES))
    kmax = int(cols.k.max()) + 1
    nph = len(names)
    size = nph * kmax
    ng = int(max(instances.last_group.max(), 0)) + 1 if len(instances) else 1
    inst_key = instances.phase_index.astype(np.int64) * kmax + instances.k.astype(np.int64)
    row_of = np.full(size, -1, np.int64)
    row_of[inst_key] = np.arange(len(inst_key))
    # The subsets holding the blocks that end instances most often are always read: the evidence is about them.
    blocks, counts = np.unique(instances.last_block.astype(np.int64), return_counts=True)
    often = np.argsort(-counts, kind="stable")[:2]
    often = often[counts[often] * 20 >= max(len(instances), 1)]  # last in 5% of the instances or more
    forced = np.unique(blocks[often] // 2)  # with the other block of its pair (a 2-block cluster)
    plan = _Plan(cols, kmax, nph, ng, stride, forced, row_of, instances.last_lane.astype(np.int64))
    latest = np.full(size, np.iinfo(np.int64).min)
    tot = np.zeros((3, nph * nph * ng), np.int64)
    last_gap = np.full(len(inst_key), np.nan)
    parts, chunk_ends = [], []
    for keys, ends, lowest, sample, n, sums, most, r, gaps in fork_imap(_pass1, plan, cuts, jobs):  # every slice
        np.maximum.at(latest, keys, ends)
        chunk_ends.append((keys, ends, lowest))
        parts.append(sample)
        tot[0] += n
        tot[1] += sums
        np.maximum(tot[2], most, out=tot[2])
        last_gap[r] = gaps
    # The lowest block among those ending last: each range's lowest at its own latest end, where that is the
    # instance's.
    who = np.full(size, np.iinfo(np.int64).max)
    for keys, ends, lowest in chunk_ends:
        at = ends == latest[keys]
        np.minimum.at(who, keys[at], lowest[at])
    del chunk_ends
    present = np.flatnonzero(latest > np.iinfo(np.int64).min)
    grid = (present, latest[present], who[present], kmax)
    totals = {}
    for i in np.flatnonzero(tot[0]).tolist():
        p, rest = divmod(i, nph * ng)
        q, g = divmod(rest, ng)
        totals[(p, q, g)] = (int(tot[0][i]), int(tot[1][i]), int(tot[2][i]))
    sample = TopSlices(*(np.concatenate([getattr(x, f) for x in parts]) for f in TopSlices.__dataclass_fields__))
    return ((sample, tick, names, num_blocks), {"grid": grid, "totals": totals, "max_cluster": _SUBSET},
            (sample, instances.phase_index, instances.k, instances.last_lane), {"last_gaps": last_gap})


class _Plan:
    """What the evidence's passes over ranges of lanes read (inherited by forked workers)."""

    def __init__(self, cols, kmax, nph, ng, stride, forced, row_of, last_lane) -> None:
        self.cols, self.kmax, self.nph, self.ng, self.stride, self.forced = cols, kmax, nph, ng, stride, forced
        self.row_of, self.last_lane = row_of, last_lane


def _pass1(plan: _Plan, cut: tuple[int, int]):
    """One range's instance ends (distinct keys, latest end of each, the lowest block among its slices that
    end then), its sample, its boundary gaps' count, sum and longest per (phase, next phase, group), and the
    gaps before instances' last finishers (rows of the instance table, gaps)."""
    a, b = cut
    t = _top(plan.cols, a, b)
    key = t.phase_index * plan.kmax + t.k
    ends = np.full(plan.nph * plan.kmax, np.iinfo(np.int64).min)
    np.maximum.at(ends, key, t.end)
    at_max = t.end == ends[key]
    lowest = np.full(plan.nph * plan.kmax, np.iinfo(np.int64).max)
    np.minimum.at(lowest, key[at_max], t.block[at_max])
    keys = np.flatnonzero(ends > np.iinfo(np.int64).min)
    ends, lowest = ends[keys], lowest[keys]
    keep = ((t.block // _SUBSET) % plan.stride == 0) | np.isin(t.block // 2, plan.forced)
    sample = TopSlices(*(getattr(t, f)[keep] for f in TopSlices.__dataclass_fields__))
    nph, ng = plan.nph, plan.ng
    same = np.flatnonzero(t.lane[1:] == t.lane[:-1])
    gap = t.begin[same + 1] - t.end[same]
    bk = (t.phase_index[same] * nph + t.phase_index[same + 1]) * ng + t.group[same]
    size = nph * nph * ng
    n = np.bincount(bk, minlength=size)
    sums = np.bincount(bk, weights=gap, minlength=size).astype(np.int64)
    most = np.zeros(size, np.int64)
    np.maximum.at(most, bk, gap)
    r = plan.row_of[key[same + 1]]
    mine = (r >= 0) & (t.lane[same + 1] == plan.last_lane[np.maximum(r, 0)])
    return keys, ends, lowest, sample, n, sums, most, r[mine], gap[mine]
