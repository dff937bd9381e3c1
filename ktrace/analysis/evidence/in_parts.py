"""The wait evidence (evidence.py) of a buffer analyzed in parts, in bounded memory.

Up to ``EVIDENCE_MAX_SLICES`` top-level slices, the evidence reads every slice. Beyond, it reads a sample of
whole subsets of 8 consecutive blocks (every ``stride``-th subset, so that clusters, warp groups and blocks
stay whole; the (at most 2) blocks that end 5% of the instances or more are always read, each with the other
block of its pair), and takes from every
slice, a range of lanes at a time, what must be exact: the latest end of
each phase instance (the grid test's reference), each boundary's gap count, sum and longest gap, and the gap
before each instance's last finisher. The tests' rates, spreads and slopes are the sample's
(``WaitCauses.tested_gaps`` says how many gaps they read).

Both engines read the evidence this way: the numpy engine from its columns (``read_evidence``), the SQL package's
reader from the top-level slices it read from the trace (``read_top_evidence``), the same sample of the same
slices, so that their figures stay equal at every size.
"""

from __future__ import annotations

import numpy as np

from ...runtime.config import SERIAL, Stage, thread_pool
from .keyed import distinct as _distinct
from .waits import LeadIns, TopSlices, WaitCauses, is_timed_wait, lead_ins, wait_causes

__all__ = ["read_evidence", "read_top_evidence", "finish_evidence", "nested_waits", "EVIDENCE_MAX_SLICES"]

EVIDENCE_MAX_SLICES = 1 << 19
PIECE_ROWS = 1 << 16  # top-level slices a range is read in at a time (stream.CHUNK_ROWS)
_SUBSET = 8  # blocks sampled together: the largest portable cluster; larger clusters are not tested on a sample


def _top(cols, a: int, b: int) -> TopSlices:
    """TopSlices of rows [a, b) of the stream's columns (top-level only)."""
    return _top_rows(cols, np.arange(a, b)[cols.depth[a:b] == 0])


def nested_waits(cols) -> TopSlices | None:
    """The slices of timed-wait phases (is_timed_wait) nested in a lane's work (depth 1 or more): what the replay
    reads as the lane waiting for a release (replay.py); None where there is none."""
    codes = [c for c, nm in enumerate(cols.names) if is_timed_wait(nm)]
    if not codes or not cols.n:
        return None
    rows = np.flatnonzero((cols.depth > 0) & np.isin(cols.code, codes))
    return _top_rows(cols, rows) if len(rows) else None


def _top_rows(cols, rows: np.ndarray) -> TopSlices:
    """TopSlices of the given rows (ascending) of the stream's columns."""
    rows = _contiguous(rows)
    return TopSlices(cols.lane[rows].astype(np.int64), cols.block_of(rows), cols.group_of(rows),
                     cols.phase_index[cols.code[rows]], cols.k[rows].astype(np.int64),
                     cols.begin[rows].astype(np.int64), cols.end[rows].astype(np.int64))


def _contiguous(rows: np.ndarray):
    """Ascending, distinct rows as a slice where they are a run (the usual case: every slice top-level), which
    reads the columns without a gather."""
    return slice(int(rows[0]), int(rows[-1]) + 1) if len(rows) and rows[-1] - rows[0] + 1 == len(rows) else rows


def finish_evidence(read, threads: int = 1) -> tuple[WaitCauses, LeadIns]:
    """The evidence's tests on what ``read_evidence`` read (in one process: they read a sample, not every
    slice); threads: with more than one, the lead-ins beside the wait causes, and the boundaries side by side
    (the same tables for any number)."""
    args, kwargs, li_args, li_kwargs = read
    if threads <= 1:
        return wait_causes(*args, **kwargs), lead_ins(*li_args, **li_kwargs)
    with thread_pool(1, "ktrace-lead-ins") as beside:
        li = beside.submit(lead_ins, *li_args, **li_kwargs)
        return wait_causes(*args, **kwargs, threads=threads), li.result()


def read_evidence(cols, cuts, tick: float, names: dict, num_blocks, instances, stage: Stage = SERIAL) -> tuple:
    """What the evidence's tests read (``finish_evidence``): every top-level slice where they are few; else a
    sample, and what must be exact from every slice, read a range of lanes at a time (the ranges mapped by the
    runtime's ``stage``)."""
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
    forced = _distinct(blocks[often] // 2)  # with the other block of its pair (a 2-block cluster)
    plan = _Plan(cols, kmax, nph, ng, stride, forced, row_of, instances.last_lane.astype(np.int64))
    latest = np.full(size, np.iinfo(np.int64).min)
    tot = np.zeros((3, nph * nph * ng), np.int64)
    last_gap = np.full(len(inst_key), np.nan)
    parts, chunk_ends = [], []
    for keys, ends, lowest, sample, n, sums, most, r, gaps in stage.imap(_pass1, plan, cuts):  # every slice
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


def read_top_evidence(top: TopSlices, tick: float, names: dict, num_blocks, instances) -> tuple:
    """``read_evidence`` of top-level slices already in memory (the SQL package's, in lane order: by begin, then
    slice id): the same sample of the same blocks, and the same exact figures from every slice."""
    return read_evidence(_TopColumns(top), [(0, len(top.lane))], tick, names, num_blocks, instances)


class _TopColumns:
    """TopSlices seen as the numpy engine's columns (stream.Columns), as far as ``read_evidence`` reads them:
    every slice top-level, each phase_index its own code."""

    def __init__(self, top: TopSlices) -> None:
        self.n = len(top.lane)
        self.lane, self.k, self.begin, self.end = top.lane, top.k, top.begin, top.end
        self.code = top.phase_index
        self.phase_index = np.arange(int(top.phase_index.max()) + 1 if self.n else 1)
        self.depth = np.zeros(self.n, np.int8)
        self.num_groups = 1  # _Plan's block ids run to the highest lane: a block id is never above its lane's
        self._block, self._group = top.block, top.group

    def block_of(self, rows) -> np.ndarray:
        return self._block[rows]

    def group_of(self, rows) -> np.ndarray:
        return self._group[rows]


class _Plan:
    """What the evidence's passes over ranges of lanes read (inherited by forked workers)."""

    def __init__(self, cols, kmax, nph, ng, stride, forced, row_of, last_lane) -> None:
        self.cols, self.kmax, self.nph, self.ng, self.stride, self.forced = cols, kmax, nph, ng, stride, forced
        self.row_of, self.last_lane = row_of, last_lane
        blocks = np.arange(int(cols.lane.max()) // cols.num_groups + 1 if cols.n else 0)
        self.sampled = ((blocks // _SUBSET) % stride == 0) | np.isin(blocks // 2, forced)  # per block id


def _pass1(plan: _Plan, cut: tuple[int, int]):
    """One range's instance ends (distinct keys, latest end of each, the lowest block among its slices that
    end then), its sample, its boundary gaps' count, sum and longest per (phase, next phase, group), and the
    gaps before instances' last finishers (rows of the instance table, gaps). Read in pieces of PIECE_ROWS
    top-level slices, whose temporaries stay in the caches (the whole range's took twice as long): each
    piece reads one slice more, for the gap after its last one."""
    a, b = cut
    cols, kmax, nph, ng = plan.cols, plan.kmax, plan.nph, plan.ng
    rows = a + np.flatnonzero(cols.depth[a:b] == 0)
    pieces = range(0, len(rows), PIECE_ROWS)
    ends = np.full(nph * kmax, np.iinfo(np.int64).min)
    for s in pieces:  # the latest end of each instance in the range, before the slices that end then
        r = _contiguous(rows[s:s + PIECE_ROWS])
        np.maximum.at(ends, cols.phase_index[cols.code[r]] * kmax + cols.k[r], cols.end[r].astype(np.int64))
    lowest = np.full(nph * kmax, np.iinfo(np.int64).max)
    size = nph * nph * ng
    n, sums, most = np.zeros(size, np.int64), np.zeros(size, np.int64), np.zeros(size, np.int64)
    samples, last_rows, last_gaps = [], [], []
    for s in pieces:
        t = _top_rows(cols, rows[s:s + PIECE_ROWS + 1])
        own = min(PIECE_ROWS, len(rows) - s)  # the slices of this piece (the one after it only closes a gap)
        key = t.phase_index * kmax + t.k
        at_max = np.flatnonzero(t.end[:own] == ends[key[:own]])
        np.minimum.at(lowest, key[at_max], t.block[at_max])
        keep = plan.sampled[t.block[:own]]
        samples.append(TopSlices(*(getattr(t, f)[:own][keep] for f in TopSlices.__dataclass_fields__)))
        same = t.lane[1:] == t.lane[:-1]
        gap = (t.begin[1:] - t.end[:-1])[same]
        bk = ((t.phase_index[:-1] * nph + t.phase_index[1:]) * ng + t.group[:-1])[same]
        wait = gap >= 0  # an overlap is no wait (evidence.wait_causes)
        n += np.bincount(bk[wait], minlength=size)
        sums += np.bincount(bk[wait], weights=gap[wait], minlength=size).astype(np.int64)
        np.maximum.at(most, bk[wait], gap[wait])
        nxt = np.flatnonzero(same) + 1
        r = plan.row_of[key[nxt]]
        mine = (r >= 0) & (t.lane[nxt] == plan.last_lane[np.maximum(r, 0)])
        last_rows.append(r[mine])
        last_gaps.append(gap[mine])
    keys = np.flatnonzero(ends > np.iinfo(np.int64).min)
    sample = TopSlices(*(_cat([getattr(x, f) for x in samples]) for f in TopSlices.__dataclass_fields__))
    return keys, ends[keys], lowest[keys], sample, n, sums, most, _cat(last_rows), _cat(last_gaps)


def _cat(pieces: list) -> np.ndarray:
    return np.concatenate(pieces) if pieces else np.zeros(0, np.int64)
