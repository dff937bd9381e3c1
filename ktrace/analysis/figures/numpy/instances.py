"""The cross-lane figures of ``stream_figures`` over chunks of the kept columns: phase instances (two
sweeps over the slices grouped by instance), the lanes' phase table and the waits (sweeps over whole lanes),
and the critical path (a backward walk through each slice's predecessor, ``Preds``, found before it over
chunks of rows).

Every chunk runs the same vectorized definitions (instance_math.py, tables.py, structure.py) on its
rows; what a chunk cannot know alone (an instance's latest end, a phase's most
frequent last block, a pair's longest wait) comes from a sweep before it or is merged after.
"""

from __future__ import annotations

import numpy as np

from . import structure as st
from ....runtime.config import SERIAL, Stage
from .growing import narrowest, narrowest_type
from .phase_tables import waits_columns
from ...evidence.keyed import distinct as _distinct
from .instance_math import (ChunkRows, combined_fits, fdiv, instance_columns, lower_percentile, run_starts,
                               sorted_within, stability)
from ...model.results import CriticalPath, PhaseInstances, PhaseLanes, Waits

__all__ = ["instance_sweeps", "lanes_table", "waits_table", "critical_path", "Preds"]

# numpy scalars, not Python ints: np.where(mask, narrow, _BIG) must widen to int64, not wrap.
_SMALL, _BIG = np.int64(np.iinfo(np.int64).min), np.int64(np.iinfo(np.int64).max)
_PIECE = 1 << 16  # rows a whole-column scan reads at a time (its temporaries stay small)
_FILL_ROWS = 1 << 20  # rows of Preds.fill at a time


def _cuts(starts: np.ndarray, n: int, chunk_rows: int) -> list[tuple[int, int]]:
    """Row ranges [a, b) of about chunk_rows rows, each beginning at one of ``starts`` (group starts)."""
    if not n:
        return []
    at = _distinct(starts[np.searchsorted(starts, np.arange(0, n, max(chunk_rows, 1)), side="right") - 1])
    return list(zip(at.tolist(), np.r_[at[1:], n].tolist()))


def _lane_cuts(cols, chunk_rows: int) -> list[tuple[int, int]]:
    return _cuts(run_starts(cols.lane), cols.n, chunk_rows)


class Instances:
    """The instance table (``table``, ``code``), its phase-level stability figures (``top_block``,
    ``top_count``, ``distinct``), and what later figures need: per slice, whether it is its instance's last
    finisher (``is_last``); per instance in (k, phase code) order, its key k * phases + code (``keys``, which
    ``instance_of`` searches, or reads in ``index_of``), latest end (``inst_end``) and last finisher's row
    (``last_row``); per block id, its row in the blocks table (``block_row``)."""


def _k_ranges(cols, chunk_rows: int) -> list[tuple[int, int]]:
    """Ranges [k0, k1) of instance numbers with about chunk_rows slices each (an instance (phase, k) lies
    within one range)."""
    per_k = cols.per_k  # np.bincount(cols.k), summed over the parts
    cum = np.cumsum(per_k)
    cuts = _distinct(np.r_[0, np.searchsorted(cum, np.arange(0, cols.n, max(chunk_rows, 1)), side="right")])
    cuts = cuts[cuts < len(per_k)]
    return list(zip(cuts.tolist(), np.r_[cuts[1:], len(per_k)].tolist()))


def _grouped(cols, rows: np.ndarray, ncode: int, k0: int, k1: int):
    """Rows of whole instances (k in [k0, k1)) grouped by instance (in (k, phase code) order; each instance's
    rows in row order), the instances' keys k * ncode + code, and where each instance's rows start. The sort
    reads keys from k0 on, in the narrowest type they fit (16 bits: a radix sort)."""
    local = narrowest((cols.k[rows].astype(np.int64) - k0) * ncode + cols.code[rows], 0, (k1 - k0) * ncode)
    order = np.argsort(local, kind="stable")
    rows, local = rows[order].astype(np.int64), local[order]
    starts = run_starts(local)
    return rows, local[starts].astype(np.int64) + k0 * ncode, starts


def instance_sweeps(cols, blocks, chunk_rows: int, stage: Stage = SERIAL) -> Instances:
    """The instance table and what later figures need (``Instances``), in two sweeps over chunks of whole
    instances, the chunks mapped by the runtime's ``stage`` (the same result for any number of workers)."""
    n, ncode = cols.n, max(len(cols.names), 1)
    inst = Instances()
    inst.is_last = np.zeros(n, bool)
    if not n:
        inst.table, inst.code = PhaseInstances.empty(), np.zeros(0, np.int64)
        inst.top_block = inst.top_count = inst.distinct = np.zeros(len(cols.names), np.int64)
        inst.keys = inst.inst_end = inst.last_row = np.zeros(0, np.int64)
        inst.index_of, inst.lane_span = None, 1
        return inst
    chunks = _k_ranges(cols, chunk_rows)
    by_chunk = ChunkRows(cols, chunks, stage)
    items = [(i, *c) for i, c in enumerate(chunks)]
    # Sweep 1: each instance's latest end, and its tied last finishers.
    got = stage.map(_sweep_ends, (cols, ncode, by_chunk), items)
    inst.keys, inst.inst_end = np.concatenate([g[0] for g in got]), np.concatenate([g[1] for g in got])
    inst.index_of = _dense_index(inst.keys)
    inst.block_row = _block_rows(blocks)
    inst.lane_span = int(cols.lane.max()) + 1
    counts = [len(g[0]) for g in got]
    sizes = np.concatenate([g[3] for g in got])  # each instance's slices, in the order of inst.keys
    tied = np.concatenate([g[2] for g in got])
    del got
    inst.top_block, inst.top_count, inst.distinct = stability(cols.code[tied], cols.k[tied], cols.block_of(tied),
                                                              len(cols.names))
    del tied
    # Sweep 2: every other figure of each instance, on the rows as sweep 1 grouped them.
    starts_at = np.r_[0, np.cumsum(counts)[:-1]].tolist()
    got = stage.map(_sweep_figures, (cols, blocks, inst, by_chunk, sizes),
                    [(item[0], i0, count) for item, i0, count in zip(items, starts_at, counts)])
    del by_chunk, sizes
    inst.last_row = np.concatenate([g[1] for g in got])
    inst.is_last[inst.last_row] = True
    parts = [g[0] for g in got]
    del got
    table = {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}
    del parts
    order = np.lexsort((table["k"], table["phase_index"]))
    inst.code = table.pop("code")[order]
    table = {name: v[order] for name, v in table.items()}
    table["phase"] = cols.phase_name(inst.code)
    inst.table = PhaseInstances.from_columns(table)
    return inst


def _sweep_ends(state, chunk: tuple[int, int, int]):
    """Sweep 1 of one chunk (i, k0, k1): its instances' keys, latest ends, the rows that tie at the latest
    end, and each instance's slice count; its rows kept grouped by instance (``ChunkRows.keep``)."""
    cols, ncode, by_chunk = state
    i, k0, k1 = chunk
    rows, key, starts = _grouped(cols, by_chunk.rows(i), ncode, k0, k1)
    by_chunk.keep(i, rows)
    sizes = np.diff(np.r_[starts, len(rows)])
    end_g = cols.end[rows].astype(np.int64)
    latest = np.maximum.reduceat(end_g, starts)
    return key, latest, rows[end_g == np.repeat(latest, sizes)], sizes


def _sweep_figures(state, chunk: tuple[int, int, int]):
    """Sweep 2 of one chunk (i; its instances numbered from i0, count of them): their columns and last
    finishers' rows."""
    cols, blocks, inst, by_chunk, sizes = state
    i, i0, count = chunk
    starts = np.r_[0, np.cumsum(sizes[i0:i0 + count])[:-1]].astype(np.int64)
    return _instance_chunk(cols, blocks, inst, by_chunk.rows(i), starts, i0)


def _dense_index(keys: np.ndarray) -> np.ndarray | None:
    """Instance index by key k * phases + code, as a table read directly where the keys are dense enough
    (phases of about as many instances each); else None (``instance_of`` searches the sorted keys)."""
    span = int(keys[-1]) + 1 if len(keys) else 1
    if span > 4 * len(keys) + 4096:
        return None
    index_of = np.full(span, -1, np.int64)
    index_of[keys] = np.arange(len(keys))
    return index_of


def instance_of(cols, inst, rows) -> np.ndarray:
    """The instance (index into inst.keys) of each of these slice rows."""
    key = cols.k[rows].astype(np.int64) * max(len(cols.names), 1) + cols.code[rows]
    return inst.index_of[key] if inst.index_of is not None else np.searchsorted(inst.keys, key)


def _instance_chunk(cols, blocks, inst, rows: np.ndarray, starts: np.ndarray, i0: int) -> tuple[dict, np.ndarray]:
    """The instances whose slices are ``rows`` (grouped by instance, each instance's rows in row order):
    the instance table's definitions (docs/analysis-schema.md) on these rows alone; and each one's last
    finisher's row."""
    g = cols.num_groups
    nloc = len(rows)
    n = np.diff(np.r_[starts, nloc])
    li = np.repeat(np.arange(len(starts)), n)

    def red(f, a):
        return f.reduceat(a, starts)

    # Times are kept narrow; every sum and difference is taken in int64.
    end_g, begin_g = cols.end[rows].astype(np.int64), cols.begin[rows].astype(np.int64)
    dur = end_g - begin_g
    lane = cols.lane[rows].astype(np.int64)
    block = lane // g
    code_g = cols.code[rows].astype(np.int64)
    latest = inst.inst_end[i0:i0 + len(starts)]
    tied_g = end_g == latest[li]
    tied_count = red(np.add, tied_g.astype(np.int64))
    runner_up = np.where(tied_count > 1, latest, red(np.maximum, np.where(tied_g, _SMALL, end_g)))
    lead = np.where(n > 1, latest - np.where(n > 1, runner_up, latest), 0).astype(np.float64)
    lead[n <= 1] = np.nan
    # The one tie rule: among the tied last, the lowest lane of the phase's top block, else the lowest lane
    # (then the first row).
    lane_span = inst.lane_span
    not_top = (block != inst.top_block[code_g]).astype(np.int64)
    if combined_fits(2 * lane_span, nloc):
        # Within an instance the rows ascend, so the position in the chunk is the row order.
        rank = np.where(tied_g, (not_top * lane_span + lane) * nloc + np.arange(nloc), _BIG)
        first_l = red(np.minimum, rank) % nloc
        del rank
    else:
        pick = np.lexsort((lane, not_top, ~tied_g, li))
        first_l = pick[run_starts(li[pick])]
    first = rows[first_l]
    # Structure: lanes with a previous top-level slice, those that waited for its whole instance, lead-ins.
    prev = cols.prev[rows].astype(np.int64)
    has_prev = prev >= 0
    p = np.maximum(prev, 0)
    prev_end = np.where(has_prev, cols.end[p].astype(np.int64), 0)
    synced = has_prev & (begin_g >= np.where(has_prev, inst.inst_end[instance_of(cols, inst, p)], 0))
    lead_in = begin_g - prev_end
    prev_lanes = red(np.add, has_prev.astype(np.int64))
    li_min = red(np.minimum, np.where(has_prev, lead_in, _BIG)).astype(np.float64)
    li_max = red(np.maximum, np.where(has_prev, lead_in, _SMALL)).astype(np.float64)
    li_min[prev_lanes == 0] = np.nan
    li_max[prev_lanes == 0] = np.nan
    later = blocks.later_wave[inst.block_row[block]]
    dur_sorted = sorted_within(dur, None, li, starts)
    begin_sorted = sorted_within(begin_g, None, li, starts)
    max_dur, sum_dur = red(np.maximum, dur), red(np.add, dur)
    begin_min, begin_max = red(np.minimum, begin_g), red(np.maximum, begin_g)
    code = code_g[first_l]
    return instance_columns(
        n, starts, dur_sorted, begin_sorted, max_dur, sum_dur, begin_min, begin_max, latest, red(np.minimum, end_g),
        code=code, phase_index=cols.phase_index[code], k=cols.k[first].astype(np.int64), last_block=block[first_l],
        last_group=lane[first_l] % g, last_sm=cols.sm[first].astype(np.int64), last_lane=lane[first_l],
        tied_last_lanes=tied_count, last_lead_ns=lead, depth=red(np.minimum, cols.depth[rows].astype(np.int64)),
        last_begin_ns=begin_g[first_l], last_dur_ns=dur[first_l], prev_lanes=prev_lanes,
        sync_lanes=red(np.add, synced.astype(np.int64)), lead_in_min_ns=li_min, lead_in_max_ns=li_max,
        later_wave_lanes=red(np.add, later.astype(np.int64))), first


def _block_rows(blocks) -> np.ndarray:
    """Each block id's row in the blocks table (-1 none): read directly, not searched for each slice."""
    rows = np.full(int(blocks.block.max()) + 1 if len(blocks.block) else 1, -1, np.int64)
    rows[blocks.block] = np.arange(len(blocks.block))
    return rows


def lanes_table(cols, inst: Instances, chunk_rows: int, stage: Stage = SERIAL) -> PhaseLanes:
    """ktrace_phase_lane, a chunk of whole lanes at a time (mapped by the runtime's ``stage``)."""
    if not cols.n:
        return PhaseLanes.empty()
    out = stage.map(_lanes_chunk, (cols, inst), _lane_cuts(cols, chunk_rows))
    t = {k: np.concatenate([o[k] for o in out]) for k in out[0]}
    order = np.lexsort((t["lane"], t["phase_index"]))
    t = {k: v[order] for k, v in t.items()}
    code_of_index = np.argsort(cols.phase_index)
    t["phase"] = cols.phase_name(code_of_index[t["phase_index"]])
    return PhaseLanes.from_columns(t)


def _lanes_chunk(state, chunk: tuple[int, int]) -> dict:
    cols, inst = state
    a, b = chunk
    nph = len(cols.names)
    lane = cols.lane[a:b].astype(np.int64)
    pi = cols.phase_index[cols.code[a:b]]
    key = lane * nph + pi
    order = np.argsort(narrowest(key, 0, int(key.max()) if len(key) else 0), kind="stable")  # 16 bits: radix
    starts = run_starts(key[order])
    n = np.diff(np.r_[starts, b - a])
    dur = (cols.end[a:b].astype(np.int64) - cols.begin[a:b])[order]
    sums = np.add.reduceat(dur, starts)
    lo = lane[order][starts]
    return {
        "phase_index": pi[order][starts], "block": lo // cols.num_groups, "group": lo % cols.num_groups,
        "lane": lo, "sm": np.maximum.reduceat(cols.sm[a:b][order].astype(np.int64), starts), "instances": n,
        "min_dur_ns": np.minimum.reduceat(dur, starts), "mean_dur_ns": fdiv(sums, n),
        "max_dur_ns": np.maximum.reduceat(dur, starts), "sum_dur_ns": sums,
        "last_count": np.add.reduceat(inst.is_last[a:b][order].astype(np.int64), starts),
    }


def waits_table(cols, chunk_rows: int, stage: Stage = SERIAL) -> Waits:
    """ktrace_wait, a chunk of whole lanes at a time (mapped by the runtime's ``stage``): each chunk gives
    its distinct (pair, wait) values with their counts (the percentiles need every wait, not every row) and its
    longest wait per pair; they are merged after. The waits themselves were gathered and sorted in this
    process: at 1e8 records, 5e7 of them, serial."""
    nph = len(cols.names)
    got = [g for g in stage.imap(_waits_chunk, cols, _lane_cuts(cols, chunk_rows)) if g is not None]
    if not got:
        return Waits.empty()
    (pair_of, value), counts = st.unique_columns(np.concatenate([g[0] for g in got]),
                                                 np.concatenate([g[1] for g in got]), return_counts=True,
                                                 weights=np.concatenate([g[2] for g in got]))
    # Per pair: count, sum, extremes, and the two percentiles read off the cumulative counts of its sorted
    # distinct values (the value at sorted position i is the first whose cumulative count passes i).
    starts = run_starts(pair_of)
    pair = pair_of[starts]
    cum = np.cumsum(counts)
    m = np.add.reduceat(counts, starts)
    base = cum[starts] - counts[starts]
    at = [value[np.searchsorted(cum, base + lower_percentile(q, m), side="right")] for q in (0.5, 0.9)]
    ends = np.r_[starts[1:], len(value)] - 1
    stats = (m, np.add.reduceat(value * counts, starts), value[starts], at[0], at[1], value[ends])
    bt = np.concatenate([g[3] for g in got], axis=1)
    bt = bt[:, np.lexsort((bt[4], bt[3], bt[2], -bt[1], bt[0]))]
    bt = bt[:, run_starts(bt[0])]  # per pair: the longest, then lowest (block, group, k)
    assert np.array_equal(bt[0], pair) and np.array_equal(bt[1], stats[5])
    return waits_columns(cols, nph, pair, *stats, bt[2], bt[3], bt[4])


def _waits_chunk(cols, chunk: tuple[int, int]):
    """One chunk's waits: its distinct (pair key, wait) values and how many of each, and its longest wait per
    pair with that slice's block, group and k; None without waits."""
    a, b = chunk
    nph = len(cols.names)
    prev = cols.prev[a:b].astype(np.int64)
    has = prev >= 0
    nxt = np.full(b - a, -1, np.int64)
    nxt[prev[has] - a] = np.flatnonzero(has)
    rows = np.flatnonzero(nxt >= 0)
    gap = cols.begin[a:b][nxt[rows]].astype(np.int64) - cols.end[a:b][rows]
    ok = gap >= 0
    rows, w = rows[ok], gap[ok]
    if not len(rows):
        return None
    pi = cols.phase_index[cols.code[a:b]]
    key = pi[rows] * nph + pi[nxt[rows]]
    # This chunk's longest wait per pair, and its slice by the tie rule (block, group, k).
    longest = np.full(nph * nph, -1, np.int64)
    np.maximum.at(longest, key, w)
    cand = np.flatnonzero(w == longest[key])
    g_rows = rows[cand] + a
    top = np.lexsort((cols.k[g_rows], cols.group_of(g_rows), cols.block_of(g_rows), key[cand]))
    first = cand[top[run_starts(key[cand][top])]]
    g_rows = rows[first] + a
    best = np.stack([key[first], w[first], cols.block_of(g_rows), cols.group_of(g_rows),
                     cols.k[g_rows].astype(np.int64)])
    (key, w), n = st.unique_columns(key, w, return_counts=True)
    return key, w, n, best


class Preds:
    """Each slice's predecessor on the critical path (docs/analysis-structure.md), as the walk would find it:
    a top-level slice that began at or after its lane's previous top-level slice's instance ended waited for
    that instance's last finisher (kind 0, wait), else for the lane's previous slice (1, lane_gap); a
    later-wave block's first top-level slice waited for the block that freed its SM slot (2, block_switch).
    ``code``: row * 4 + kind, -1 none. Found before the walk (``fill``), a piece of rows at a time by up to
    the workers of the runtime's ``stage``, each writing its piece in place (``code`` is then shared memory),
    so that the walk reads one value a step: it looked each step up in the columns, a cache miss each at 1e8 records
    (4.9 s; 0.23 s at 1e7). (The lanes' workers once sent them back by pipe: at 1e8 records 200 MB pickled,
    piped and copied, 1.6 s of the parent's CPU; then the walk's own worker found them, alone: on 16 cores
    at 1e8 records, 1.7 s of CPU that every other stage had finished waiting for.)"""

    def __init__(self, cols, blocks, stage: Stage = SERIAL) -> None:
        self.stage = stage
        self.code = stage.array(cols.n, narrowest_type(-1, 4 * max(cols.n, 1)))
        # Per block row: where a later-wave block's first top-level slice waited (-1: it did not).
        self.switch = np.full(len(blocks), -1, np.int64)
        before = st.blocks_before(blocks)
        later = np.flatnonzero((blocks.later_wave == 1) & (before >= 0))
        ends = {b: _block_end_slice(cols, blocks, b) for b in _distinct(before[later]).tolist()}
        self.switch[later] = [ends[b] for b in before[later].tolist()]
        self.block_row = _block_rows(blocks)

    def fill(self, cols, inst) -> "Preds":
        """``code`` of every row, in pieces of at most _FILL_ROWS rows (each piece's temporaries stay small),
        about four a worker."""
        step = max(1, min(_FILL_ROWS, -(-cols.n // (4 * self.stage.jobs))))
        pieces = [(a, min(a + step, cols.n)) for a in range(0, cols.n, step)]
        for _ in self.stage.imap(_fill_piece, (self, cols, inst), pieces):
            pass
        return self

    def codes(self, cols, inst, a: int, b: int) -> np.ndarray:
        """``code`` of rows [a, b)."""
        prev = cols.prev[a:b].astype(np.int64)
        has = prev >= 0
        p = np.where(has, prev, 0)
        i = instance_of(cols, inst, p)
        wait = has & (cols.begin[a:b] >= inst.inst_end[i])
        code = np.where(wait, inst.last_row[i] * 4, np.where(has, prev * 4 + 1, -1))
        first = np.flatnonzero(~has & (cols.depth[a:b] == 0))
        if len(first) and (self.switch >= 0).any():
            sw = self.switch[self.block_row[cols.lane[a:b][first].astype(np.int64) // cols.num_groups]]
            on = sw >= 0
            code[first[on]] = sw[on] * 4 + 2
        return code.astype(self.code.dtype)


def _fill_piece(state, piece: tuple[int, int]) -> None:
    preds, cols, inst = state
    a, b = piece
    preds.code[a:b] = preds.codes(cols, inst, a, b)


def _block_end_slice(cols, blocks, b: int) -> int:
    """Block row b's top-level slice with the latest end (then lowest lane, then record order); -1 none."""
    g = cols.num_groups
    blk = int(blocks.block[b])
    lo, hi = np.searchsorted(cols.lane, [blk * g, (blk + 1) * g])
    top = np.flatnonzero(cols.depth[lo:hi] == 0)
    if not len(top):
        return -1
    return int(lo + top[np.argmax(cols.end[lo:hi][top])])


def critical_path(cols, preds: Preds, kernel_begin, kernel_end) -> CriticalPath:
    """The backward walk (docs/analysis-structure.md) from the slice that ends last, one step at a time through
    each slice's predecessor (``Preds``, filled)."""
    # The first row (lowest lane, then record order) of the latest top-level end, a piece at a time (a whole
    # column's temporary is fresh pages in a forked worker: 0.9 s of 1.0 at 1e7 records on a slow machine).
    latest, cur = _SMALL, -1
    for a in range(0, cols.n, _PIECE):
        e = np.where(cols.depth[a:a + _PIECE] == 0, cols.end[a:a + _PIECE], _SMALL)
        j = int(np.argmax(e))
        if e[j] > latest:
            latest, cur = e[j], a + j
    if cur < 0:
        return CriticalPath.empty()
    parts = st.walk(cur, preds.code.item, cols.begin.item, cols.end.item, kernel_begin, kernel_end)
    return st.path_table(parts, cols.names, cols.phase_index,
                         lambda r: (cols.code[r].astype(np.int64), cols.k[r].astype(np.int64), cols.block_of(r),
                                    cols.group_of(r), cols.lane[r].astype(np.int64)))
