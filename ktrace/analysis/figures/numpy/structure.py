"""The numpy engine's structural figures: slice depth, each lane's previous top-level slice, blocks and
their waves, lane totals, busy SMs over time, the launch's occupancy and tail, and the pieces of the
critical path's backward walk that tiles the wall. Definitions: docs/analysis-structure.md.

Vectorized over slices; loops run over SMs or over the critical path's steps (one per instance on the path),
never over all events.
"""

from __future__ import annotations

import numpy as np

from ...evidence.keyed import distinct as _distinct, run_starts as _starts
from ...model.results import REMAINDERS, Blocks, BusySms, CriticalPath, CriticalShares, LaneTotals, Occupancy

__all__ = ["unique_columns", "slice_depth", "finish_blocks", "block_extents", "lane_neighbours", "lane_totals",
           "busy_sms", "occupancy", "critical_shares", "walk", "path_table", "blocks_before"]


def unique_columns(*cols, return_counts: bool = False, weights=None):
    """np.unique(np.stack(cols), axis=1) for non-negative int64 columns, through one combined key (a 1-D
    unique is many times faster than a unique over rows). Returns the distinct rows as a (len(cols), n) array
    (sorted as np.unique sorts them), and their counts when asked (weights: each row counts as its weight)."""
    cols = [np.asarray(c, np.int64) for c in cols]
    if not len(cols[0]):
        out = np.zeros((len(cols), 0), np.int64)
        return (out, np.zeros(0, np.int64)) if return_counts else out
    spans = [int(c.max()) + 1 for c in cols]
    key = np.zeros(len(cols[0]), np.int64)
    for c, span in zip(cols, spans):
        key = key * span + c
    total = 1
    for span in spans:
        total *= span
    if total <= max(4 * len(key), 1 << 16):  # a small key space: counted directly, no sort
        counts = np.bincount(key, minlength=total)
        keys = np.flatnonzero(counts)
        counts = (counts[keys] if weights is None else
                  np.bincount(key, weights=weights, minlength=total)[keys].astype(np.int64))
    elif weights is not None and return_counts:
        keys, inv = np.unique(key, return_inverse=True)
        counts = np.bincount(inv.ravel(), weights=weights, minlength=len(keys)).astype(np.int64)
    else:
        u = np.unique(key, return_counts=return_counts)
        keys, counts = (u if return_counts else (u, None))
    rows = []
    for span in reversed(spans):
        rows.append(keys % span)
        keys = keys // span
    out = np.stack(rows[::-1])
    return (out, counts) if return_counts else out


def slice_depth(lane, begin_seq, end_seq, overlap) -> np.ndarray:
    """Per slice: how many slices of its lane are open when its BEGIN is read (0 for partial overlaps,
    which sit on their own child track). Slices come in (lane, begin sequence) order (``Slices``)."""
    n = len(lane)
    depth = np.zeros(n, np.int64)
    rows = np.flatnonzero(~np.asarray(overlap, bool))
    if not len(rows):
        return depth
    lane_r, b_seq, e_seq = lane[rows], begin_seq[rows], end_seq[rows]
    span = int(max(b_seq.max(), e_seq.max())) + 1
    begin_key = lane_r * span + b_seq
    if not _is_sorted(begin_key):
        begin_key = None
    if begin_key is None or _overflows(int(lane_r.max()) + 1, span):
        return _slice_depth_sorting(rows, lane_r, b_seq, e_seq, depth)
    if not ((lane_r[1:] == lane_r[:-1]) & (b_seq[1:] < e_seq[:-1])).any():
        return depth  # each slice ends before the next of its lane begins: none is open at a BEGIN
    # Open at a BEGIN = the lane's BEGINs before it minus the lane's ENDs before it (sequences are distinct).
    end_key = np.sort(lane_r * span + e_seq)
    lane_start = np.searchsorted(begin_key, lane_r * span, side="left")
    ends_before = np.searchsorted(end_key, begin_key) - np.searchsorted(end_key, lane_r * span)
    depth[rows] = np.arange(len(rows)) - lane_start - ends_before
    return depth


def _slice_depth_sorting(rows, lane_r, b_seq, e_seq, depth) -> np.ndarray:
    ev_lane = np.r_[lane_r, lane_r]
    ev_seq = np.r_[b_seq, e_seq]
    delta = np.r_[np.ones(len(rows), np.int64), -np.ones(len(rows), np.int64)]
    order = np.lexsort((ev_seq, ev_lane))
    open_after = np.cumsum(delta[order])  # every lane's slices balance, so the count restarts per lane
    is_begin = order < len(rows)
    depth[rows[order[is_begin]]] = open_after[is_begin] - 1
    return depth


def _is_sorted(a: np.ndarray) -> bool:
    return bool(len(a) < 2 or (a[1:] >= a[:-1]).all())


def _overflows(*spans: int) -> bool:
    """Whether a key combined from columns of these spans could pass int64."""
    total = 1
    for s in spans:
        total *= max(int(s), 1)
    return total >= 2**62


def lane_neighbours(lane, begin, seq, top) -> tuple[np.ndarray, np.ndarray]:
    """Per slice: the row of the previous and of the next top-level slice on its lane (by begin, then
    record order), -1 when none or when the slice is not top-level."""
    n = len(lane)
    prev = np.full(n, -1, np.int64)
    nxt = np.full(n, -1, np.int64)
    rows = np.flatnonzero(top)
    # Slices come in (lane, sequence) order and a lane's kept times never go back, so the lexsort is
    # usually the identity: check that in one pass and sort only when it is not.
    lr, br, sr = lane[rows], begin[rows], seq[rows]
    same = lr[1:] == lr[:-1]
    in_order = bool(len(rows) < 2 or ((lr[1:] > lr[:-1]) | (same & ((br[1:] > br[:-1]) | (
        (br[1:] == br[:-1]) & (sr[1:] > sr[:-1]))))).all())
    if in_order:
        order = rows
    else:
        order = rows[np.lexsort((sr, br, lr))]
        same = lane[order][1:] == lane[order][:-1]
    nxt[order[:-1][same]] = order[1:][same]
    prev[order[1:][same]] = order[:-1][same]
    return prev, nxt


def _extents(inv, n: int, sm, begin, end):
    """Per group (inv: each row's group, of n): the highest SM, the first begin and the last end."""
    i64 = np.iinfo(np.int64)
    g_sm, g_begin, g_end = np.full(n, i64.min), np.full(n, i64.max), np.full(n, i64.min)
    np.maximum.at(g_sm, inv, sm)
    np.minimum.at(g_begin, inv, begin)
    np.maximum.at(g_end, inv, end)
    return g_sm, g_begin, g_end


def block_extents(block, sm, lane, begin, end):
    """Per distinct block: (block, SM, first begin, last end, slices, lanes), and each slice's block row."""
    if len(lane) and _is_sorted(block) and _is_sorted(lane):  # (lane, sequence) order: runs of each
        new_block = block[1:] != block[:-1]
        first = np.r_[0, np.flatnonzero(new_block) + 1]
        ub = block[first]
        inv = np.r_[0, np.cumsum(new_block)]
        lanes = np.bincount(inv[np.r_[0, np.flatnonzero(new_block | (lane[1:] != lane[:-1])) + 1]], minlength=len(ub))
        # Each block a run of rows: reduced run by run (ufunc.at, below, is several times slower).
        i64 = np.int64
        return (ub, np.maximum.reduceat(sm.astype(i64, copy=False), first),
                np.minimum.reduceat(begin.astype(i64, copy=False), first),
                np.maximum.reduceat(end.astype(i64, copy=False), first), np.diff(np.r_[first, len(block)]), lanes, inv)
    else:
        ub, inv = np.unique(block, return_inverse=True)
        lanes = np.bincount(unique_columns(inv, lane)[0], minlength=len(ub))
    nb = len(ub)
    b_sm, b_begin, b_end = _extents(inv, nb, sm, begin, end)
    return ub, b_sm, b_begin, b_end, np.bincount(inv, minlength=nb), lanes, inv


def finish_blocks(ub, b_sm, b_begin, b_end, slices, lanes) -> Blocks:
    """The ktrace_block table from each block's SM, extent, slice and lane counts: adds the later-wave flag."""
    later = _later_wave(b_sm, b_begin, b_end)
    return Blocks.from_columns({
        "block": ub, "sm": b_sm, "lanes": lanes, "slices": slices, "begin_ns": b_begin, "end_ns": b_end,
        "dur_ns": b_end - b_begin, "later_wave": later})


def _later_wave(b_sm, b_begin, b_end) -> np.ndarray:
    """Per block: 1 when another block on its SM ended at or before it began (the block itself ends after it
    began, except a block of zero length, which is not counted against itself). All SMs in one search of
    (SM, end) keys where they fit int64; else SM by SM."""
    nb = len(b_sm)
    later = np.zeros(nb, np.int64)
    on = np.flatnonzero(b_sm >= 0)
    if not len(on):
        return later
    sm, b, e = b_sm[on], b_begin[on], b_end[on]
    t0 = min(int(b.min()), int(e.min()))
    span = max(int(b.max()), int(e.max())) - t0 + 1
    if _overflows(int(sm.max()) + 1, span):
        for s in _distinct(sm).tolist():
            at = np.flatnonzero(sm == s)
            n_le = np.searchsorted(np.sort(e[at]), b[at], side="right") - (e[at] <= b[at])
            later[on[at]] = n_le > 0
        return later
    base = sm * span
    ends = np.sort(base + (e - t0))
    # Ends on the same SM at or before the begin: the keys from the SM's first up to (SM, begin).
    n_le = (np.searchsorted(ends, base + (b - t0), side="right") - np.searchsorted(ends, base, side="left")
            - (e <= b))
    later[on] = n_le > 0
    return later


def lane_totals(lane, block, group, sm, begin, end, top) -> LaneTotals:
    if not len(lane):
        return LaneTotals.empty()
    if not _is_sorted(lane):
        return _lane_totals_unsorted(lane, block, group, sm, begin, end, top)
    # Slices come grouped by lane: reduce each lane's run of rows.
    first = _starts(lane)
    n = np.diff(np.r_[first, len(lane)])
    top_i = top.astype(np.int64)
    return LaneTotals.from_columns({
        "lane": lane[first], "block": block[first], "group": group[first], "sm": np.maximum.reduceat(sm, first),
        "slices": n, "top_slices": np.add.reduceat(top_i, first),
        "busy_ns": np.add.reduceat((end - begin) * top_i, first), "begin_ns": np.minimum.reduceat(begin, first),
        "end_ns": np.maximum.reduceat(end, first)})


def _lane_totals_unsorted(lane, block, group, sm, begin, end, top) -> LaneTotals:
    ul, inv = np.unique(lane, return_inverse=True)
    n = len(ul)
    first = np.zeros(n, np.int64)
    first[inv[::-1]] = np.arange(len(lane))[::-1]
    l_sm, l_begin, l_end = _extents(inv, n, sm, begin, end)
    busy = np.zeros(n, np.int64)
    np.add.at(busy, inv[top], (end - begin)[top])
    return LaneTotals.from_columns({
        "lane": ul, "block": block[first], "group": group[first], "sm": l_sm,
        "slices": np.bincount(inv, minlength=n), "top_slices": np.bincount(inv[top], minlength=n),
        "busy_ns": busy, "begin_ns": l_begin, "end_ns": l_end})


def _sweep(key, b, e):
    """Running counts of intervals [b, e) per key: events sorted by (key, time, ends before begins).
    Returns (key, time, count after the event) per event, in that order."""
    k = np.r_[key, key]
    t = np.r_[b, e]
    d = np.r_[np.ones(len(b), np.int64), -np.ones(len(e), np.int64)]
    o = np.lexsort((d, t, k))
    return k[o], t[o], np.cumsum(d[o])


def _sm_busy(bl: Blocks):
    """Per SM, its busy intervals (the union of its blocks' extents): arrays (start, end)."""
    m = (bl.sm >= 0) & (bl.dur_ns > 0)
    k, t, c = _sweep(bl.sm[m], bl.begin_ns[m], bl.end_ns[m])
    prev = np.r_[0, c[:-1]]
    newkey = np.r_[True, k[1:] != k[:-1]] if len(k) else np.zeros(0, bool)
    prev[newkey] = 0
    starts = t[(prev == 0) & (c > 0)]
    ends = t[(prev > 0) & (c == 0)]
    return starts, ends, (k, c)


def busy_sms(bl: Blocks) -> BusySms:
    """Busy SMs over time. A block of an unknown SM (sm = -1) ran on some SM: while it runs it counts as one
    more busy SM, up to the SMs seen, so that no SM is called idle that may have run it."""
    starts, ends, _ = _sm_busy(bl)
    if not len(starts):
        return BusySms.empty()
    sms = len(_distinct(bl.sm[bl.sm >= 0]))
    unknown = (bl.sm < 0) & (bl.dur_ns > 0)
    ub, ue = bl.begin_ns[unknown], bl.end_ns[unknown]
    t = np.r_[starts, ends, ub, ue]
    d = np.r_[np.ones(len(starts), np.int64), -np.ones(len(ends), np.int64), np.ones(len(ub), np.int64),
              -np.ones(len(ue), np.int64)]
    o = np.argsort(t, kind="stable")
    t = t[o]
    c = np.minimum(np.cumsum(d[o]), sms)  # known busy SMs + running blocks of an unknown SM, at most the SMs
    last_at_t = np.r_[t[1:] != t[:-1], True]  # the count after every event at that time
    t, c = t[last_at_t], c[last_at_t]
    keep = np.r_[True, c[1:] != c[:-1]]
    return BusySms.from_columns({"ts": t[keep], "busy_sms": c[keep]})


def occupancy(bl: Blocks, busy: BusySms, kernel_begin, kernel_end) -> Occupancy:
    nan = float("nan")
    if not len(bl):
        return Occupancy.empty()
    known = bl.sm >= 0
    sms = len(_distinct(bl.sm[known]))
    m = bl.dur_ns > 0
    _, _, c_all = _sweep(np.zeros(int(m.sum()), np.int64), bl.begin_ns[m], bl.end_ns[m])
    max_resident = int(c_all.max()) if len(c_all) else 0
    wall = kernel_end - kernel_begin
    per_sm = tail_begin = tail = busy_ns = in_tail = frac = nan
    if sms:
        _, _, (_, c_sm) = _sm_busy(bl)
        per_sm = int(c_sm.max()) if len(c_sm) else 0
        ts, v = busy.ts, busy.busy_sms
        busy_ns = int((v[:-1] * np.diff(ts)).sum())  # the busy SMs over time, blocks of an unknown SM included
        frac = busy_ns / (sms * wall) if wall else nan
        high = np.flatnonzero(v * 2 >= sms)
        tb = int(ts[high[-1] + 1]) if len(high) else int(kernel_begin)
        tail_begin, tail = tb, int(kernel_end) - tb
        if tail and len(ts):
            after = ts >= tb
            seg = np.diff(np.r_[ts, ts[-1]])  # the last row has 0 busy SMs
            in_tail = float((v[after] * seg[after]).sum()) / tail
    last = int(np.lexsort((bl.block, -bl.end_ns))[0])
    durs = np.sort(bl.dur_ns)
    return Occupancy.from_columns({
        "sms": [sms], "blocks": [len(bl)], "unknown_sm_blocks": [int((~known).sum())],
        "blocks_per_sm_max": [per_sm], "max_resident": [max_resident],
        "waves": [len(bl) / max_resident if max_resident else nan], "sm_busy_ns": [busy_ns],
        "sm_busy_fraction": [frac], "tail_begin_ns": [tail_begin], "tail_ns": [tail],
        "busy_sms_in_tail": [in_tail], "last_block": [int(bl.block[last])],
        "last_block_begin_ns": [int(bl.begin_ns[last])], "last_block_dur_ns": [int(bl.dur_ns[last])],
        "median_block_dur_ns": [int(durs[int(np.floor(0.5 * (len(durs) - 1)))])]})


def blocks_before(bl: Blocks) -> np.ndarray:
    """Per block row: the row of the block that freed its SM slot (later-wave blocks), else -1."""
    before = np.full(len(bl), -1, np.int64)
    for sm in _distinct(bl.sm[bl.later_wave == 1]).tolist():
        on = np.flatnonzero(bl.sm == sm)
        o2 = on[np.lexsort((-bl.block[on], bl.end_ns[on]))]  # by end; among equal ends lowest block last
        later = on[bl.later_wave[on] == 1]
        pos = np.searchsorted(bl.end_ns[o2], bl.begin_ns[later], side="right") - 1
        pick = np.where(pos >= 0, o2[np.maximum(pos, 0)], -1)
        # never the block itself (only possible for a zero-length block)
        pick = np.where(pick == later, -1, pick)
        before[later] = pick
    return before


_PARTS = ("slice", "wait", "lane_gap", "block_switch", "lead_in")  # a part's kind by its code; 1-3: the gap kinds


def walk(cur: int, code_of, begin_of, end_of, kernel_begin, kernel_end) -> np.ndarray:
    """The backward walk from the slice ``cur`` that ends the kernel: code_of(row) -> the row it waited for * 4
    + the gap's kind (0 wait, 1 lane_gap, 2 block_switch), or -1 for none; begin_of(row), end_of(row): a slice's
    times. Returns the parts in time order, one row each of (kind code in _PARTS, slice row or -1, next row or
    -1, begin, end). One step at a time (the steps are a chain: each is found from the one after it), in a
    loop of local names only: a step is a few hundred nanoseconds, and 1e8 records walk about a million."""
    t = int(kernel_end)
    parts: list = []
    add = parts.append
    while True:
        b = begin_of(cur)
        if b > t:
            b = t
        add((0, cur, -1, b, t))
        t = b
        v = code_of(cur)
        if v < 0:
            if t > kernel_begin:
                add((4, -1, cur, int(kernel_begin), t))
            break
        q = v >> 2
        gb = end_of(q)
        if gb < t:
            add(((v & 3) + 1, q, cur, gb, t))
        else:
            gb = t
        t = gb
        cur = q
    parts.reverse()
    return np.array(parts, np.int64).reshape(-1, 5)


def path_table(parts: np.ndarray, names, phase_index, at) -> CriticalPath:
    """The ktrace_critical_path table of the walk's parts (``walk``); at(rows) -> (code, k, block, group, lane)
    arrays of those slice rows. Built a column at a time (a row at a time took most of the walk's time)."""
    kind, rows, nxt, begin, end = (np.ascontiguousarray(c) for c in parts.T)
    has = rows >= 0
    code, k, block, group, lane = at(np.where(has, rows, 0))
    next_code = at(np.where(nxt >= 0, nxt, 0))[0]
    name = np.array([*names, None], dtype=object)  # None: the index past the names

    def col(values):
        return np.where(has, np.asarray(values, np.float64), np.nan)

    code = np.asarray(code, np.int64)
    return CriticalPath.from_columns({
        "step": np.arange(len(kind)),
        "kind": np.array(_PARTS, dtype=object)[kind],
        "phase": name[np.where(has, code, len(names))],
        "phase_index": col(phase_index[code]),
        "k": col(k),
        "last_block": col(block),
        "last_group": col(group),
        "last_lane": col(lane),
        "begin_ns": begin,
        "end_ns": end,
        "dur_ns": end - begin,
        "next_phase": name[np.where((kind >= 1) & (kind <= 3), np.asarray(next_code, np.int64), len(names))],
    })


def critical_shares(cp: CriticalPath, wall) -> CriticalShares:
    if not len(cp):
        return CriticalShares.empty()
    rows = []
    is_phase = np.array([k in ("slice", "wait") for k in cp.kind.tolist()])
    pi = cp.phase_index
    for p in _distinct(pi[is_phase]).tolist():
        sl = (pi == p) & (cp.kind == "slice")
        wt = (pi == p) & (cp.kind == "wait")
        name = cp.phase[np.flatnonzero((pi == p) & is_phase)[0]]
        dur, wait = int(cp.dur_ns[sl].sum()), int(cp.dur_ns[wt].sum())
        rows.append(("phase", name, p, int(sl.sum()), dur, wait))
    for rem in REMAINDERS:
        m = cp.kind == rem
        if m.any() and cp.dur_ns[m].sum() > 0:
            rows.append((rem, None, None, 0, int(cp.dur_ns[m].sum()), 0))
    total = np.array([r[4] + r[5] for r in rows], np.int64)
    share = total / float(wall) if wall else np.full(len(rows), np.nan)
    return CriticalShares.from_columns({
        "part": [r[0] for r in rows], "phase": [r[1] for r in rows], "phase_index": [r[2] for r in rows],
        "instances": [r[3] for r in rows], "dur_ns": [r[4] for r in rows], "wait_ns": [r[5] for r in rows],
        "total_ns": total, "share": share})
