"""The arithmetic of the numpy engine's per-instance table (ktrace_phase_instance, built a chunk of
instances at a time in stream_instances.py): run starts, percentiles, divisions and the last finisher's
stability, with the same definitions and arithmetic as ``sql/ktrace/phases.sql`` (docs/analysis-schema.md).
Order statistics (percentiles) sort values within each instance through one combined int64 key; the sweeps' rows
by k range come from one stable sort (chunk_order).
"""

from __future__ import annotations

import numpy as np

from . import structure as st
from ....runtime.config import SERIAL, Stage
from .growing import narrowest_type
from ...evidence.keyed import distinct as _distinct
from ...evidence.keyed import run_starts

__all__ = ["ChunkRows", "run_starts", "lower_percentile", "fdiv", "combined_fits", "sorted_within", "stability",
           "instance_columns", "chunk_order", "chunk_order_forked", "PIECE_ROWS"]


def lower_percentile(p: float, n: np.ndarray) -> np.ndarray:
    """0-based index of the p-quantile (0 <= p <= 1) of n sorted values: floor(p * (n - 1)), computed in
    float64 as SQLite's percentile_disc does (numpy's method='lower')."""
    return np.floor(p * (np.asarray(n) - 1).astype(np.float64)).astype(np.int64)


def fdiv(num, den) -> np.ndarray:
    """num / den in float64 (exact integers converted first), NaN where den is 0: SQL's x * 1.0 / y."""
    num = np.asarray(num).astype(np.float64)
    den = np.asarray(den).astype(np.float64)
    out = np.full(np.broadcast(num, den).shape, np.nan)
    np.divide(num, den, out=out, where=den != 0)
    return out


def combined_fits(*spans: int) -> bool:
    """Whether a key combined from columns of these spans stays well inside int64."""
    total = 1
    for sp in spans:
        total *= max(int(sp), 1)
    return total < 2**62


def sorted_within(values: np.ndarray, by_inst: np.ndarray, inst_sorted: np.ndarray, starts) -> np.ndarray:
    """values grouped as by_inst groups them (None: already grouped; inst_sorted: the group of each grouped
    row), sorted within each group: one sort of (group, value) keys combined into one int64, else a lexsort."""
    v = values if by_inst is None else values[by_inst]
    if not len(v):
        return v
    lo = int(v.min())
    span = int(v.max()) - lo + 1
    if not combined_fits(len(starts), span):
        return v[np.lexsort((v, inst_sorted))]
    comb = inst_sorted * span + (v - lo)
    del v
    if len(starts) * span <= np.iinfo(np.int32).max:  # sorted as int32: about twice as fast
        comb = comb.astype(np.int32)
        comb.sort()
        comb = comb.astype(np.int64)
    else:
        comb.sort()
    comb -= inst_sorted * span
    comb += lo
    return comb


def instance_columns(n, starts, dur_sorted, begin_sorted, max_dur, sum_dur, begin_min, begin_max, latest, end_min,
                     **given) -> dict:
    """The ktrace_phase_instance columns that follow from each instance's slice count, run starts in the
    grouped rows, sorted durations and begins, and extremes and sums; ``given``: the other columns."""
    p50, p90 = (starts + lower_percentile(q, n) for q in (0.5, 0.9))
    return {
        **given,
        "lanes": n,
        "min_dur_ns": dur_sorted[starts],
        "p50_dur_ns": dur_sorted[p50],
        "p90_dur_ns": dur_sorted[p90],
        "max_dur_ns": max_dur,
        "sum_dur_ns": sum_dur,
        "mean_dur_ns": fdiv(sum_dur, n),
        "imbalance": fdiv(max_dur * n, sum_dur),
        "begin_ns": begin_min,
        "end_ns": latest,
        "wall_ns": latest - begin_min,
        "excess_ns": latest - begin_min - max_dur,
        "start_skew_ns": begin_max - begin_min,
        "end_skew_ns": latest - end_min,
        "p50_begin_ns": begin_sorted[p50],
    }


def stability(code, k, block, phases: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per phase code: the block among the tied last finishers in the most instances (then the lowest),
    in how many, and the distinct last blocks when a tie that includes that block counts as that block.
    code, k, block: those of every tied last finisher (any order)."""
    if not len(code):
        return np.full(phases, -1, np.int64), np.zeros(phases, np.int64), np.zeros(phases, np.int64)
    tied = st.unique_columns(code, k, block)  # distinct (phase, k, block)
    code, k, block = tied
    pairs, count = st.unique_columns(code, block, return_counts=True)
    pick = np.lexsort((pairs[1], -count, pairs[0]))
    first = pick[run_starts(pairs[0][pick])]
    top_block = np.full(phases, -1, np.int64)
    top_count = np.zeros(phases, np.int64)
    top_block[pairs[0][first]] = pairs[1][first]
    top_count[pairs[0][first]] = count[first]
    # Per instance: the top block if it is among the tied, else the lowest tied block.
    starts = run_starts(code * (int(k.max()) + 1 if len(k) else 1) + k)
    has_top = np.maximum.reduceat((block == top_block[code]).astype(np.int64), starts) if len(k) else []
    lowest = np.minimum.reduceat(block, starts) if len(k) else []
    inst_code = code[starts]
    chosen = np.where(np.asarray(has_top, bool), top_block[inst_code], lowest)
    distinct = np.zeros(phases, np.int64)
    uniq = st.unique_columns(inst_code, chosen)
    np.add.at(distinct, uniq[0], 1)
    return top_block, top_count, distinct


PIECE_ROWS = 1 << 20  # chunk_order sorts this many rows at a time


def chunk_order(lut: np.ndarray, k: np.ndarray, bounds: list[int], piece_rows: int = PIECE_ROWS,
                out: np.ndarray | None = None) -> np.ndarray:
    """``np.argsort(lut[k], kind="stable")`` (every row by its chunk lut[k], each chunk's rows in row order;
    bounds: where each chunk's rows begin, then the row count) in the narrowest integer type. Sorted a piece
    of rows at a time (a radix sort of 8- or 16-bit keys) into one array: a sort of the whole column made an
    int64 result and a buffer as large, each of fresh pages (at 1e8 records: 3.0-7.1 s of the parent's time,
    now 1.3-2.5 s). out: where to write it (len(k) rows of an integer type that holds them)."""
    n = len(k)
    out = np.empty(n, narrowest_type(0, max(n - 1, 0))) if out is None else out
    if n and _by_runs(lut[k], out, piece_rows):
        return out
    at = list(bounds[:-1])  # where each chunk's next rows go
    for lo in range(0, n, max(piece_rows, 1)):
        of = lut[k[lo:lo + piece_rows]]
        o = np.argsort(of, kind="stable")
        count = np.bincount(of, minlength=len(at))
        first = np.r_[0, np.cumsum(count)[:-1]]
        for c in np.flatnonzero(count).tolist():
            m = int(count[c])
            out[at[c]:at[c] + m] = o[first[c]:first[c] + m] + lo
            at[c] += m
    return out


def chunk_order_forked(lut: np.ndarray, k: np.ndarray, bounds: list[int], out: np.ndarray, stage: Stage) -> np.ndarray:
    """``chunk_order(lut, k, bounds, out=out)`` by the workers of the runtime's ``stage``, ``out`` in shared
    memory (``Stage.array``): ranges of rows, about four a worker, each counted by chunk, then each sorted
    alone and its rows of every chunk written where the ranges before it leave off (the same order). One
    process took 0.66 s of 1e8 records' phase instances on 2 cores, while every worker waited."""
    n = len(k)
    step = max(PIECE_ROWS, -(-n // (4 * max(stage.jobs, 1))))
    pieces = [(lo, min(lo + step, n)) for lo in range(0, n, step)]
    counts = np.array(stage.map(_piece_counts, (lut, k, len(bounds) - 1), pieces), np.int64).reshape(
        len(pieces), len(bounds) - 1)
    at = np.asarray(bounds[:-1], np.int64) + np.cumsum(counts, axis=0) - counts  # per piece and chunk
    stage.map(_piece_order, (lut, k, out), [(lo, hi, at[i], counts[i]) for i, (lo, hi) in enumerate(pieces)])
    return out


def _piece_counts(state, piece: tuple[int, int]) -> np.ndarray:
    lut, k, chunks = state
    lo, hi = piece
    return np.bincount(lut[k[lo:hi]], minlength=chunks)


def _piece_order(state, item) -> None:
    lut, k, out = state
    lo, hi, at, count = item
    first = np.r_[0, np.cumsum(count)]
    local = chunk_order(lut, k[lo:hi], first.tolist())
    for c in np.flatnonzero(count).tolist():
        out[at[c]:at[c] + count[c]] = local[first[c]:first[c + 1]] + lo


def _by_runs(of: np.ndarray, out: np.ndarray, piece_rows: int) -> bool:
    """The stable sort of ``of`` (each row's chunk) into ``out`` where rows of one chunk come in long runs (a
    lane's instance numbers ascend, so its rows of a chunk are one run): the runs, stably sorted by chunk,
    written out a piece of rows at a time. False, leaving ``out`` alone, where the runs are short."""
    n = len(of)
    starts = run_starts(of)
    if len(starts) > max(n // 64, 1):
        return False
    lens = np.diff(np.r_[starts, n])
    o = np.argsort(of[starts], kind="stable")
    starts, lens = starts[o], lens[o]
    at = np.cumsum(lens) - lens  # where each run goes in out
    shift = starts - at
    cuts = _distinct(np.r_[0, np.searchsorted(at, np.arange(0, n, max(piece_rows, 1)), side="right") - 1, len(at)])
    for a, b in zip(cuts[:-1].tolist(), cuts[1:].tolist()):
        lo, hi = int(at[a]), int(at[b - 1] + lens[b - 1])
        out[lo:hi] = np.repeat(shift[a:b], lens[a:b]) + np.arange(lo, hi)
    return True


class ChunkRows:
    """The rows of each k range (``stream_instances._k_ranges``): first in row order (one stable sort of the
    rows by their range, ``chunk_order``), then, once sweep 1 has grouped a range's rows by instance, in that
    grouping (``keep``), which sweep 2 reads instead of sorting them again. In shared memory where the
    ``stage`` has workers (``Stage.array``), made before they fork, so that what sweep 1's workers keep
    reaches sweep 2's."""

    def __init__(self, cols, chunks: list[tuple[int, int]], stage: Stage = SERIAL) -> None:
        n = cols.n
        self.order = stage.array(n, narrowest_type(0, max(n - 1, 0)))
        if len(chunks) <= 1:
            self.bounds = [0, n]
            self.order[:] = np.arange(n)
            return
        small = next((t for t in (np.uint8, np.uint16) if len(chunks) <= np.iinfo(t).max + 1), np.int64)
        lut = np.zeros(chunks[-1][1], small)
        for i, (k0, k1) in enumerate(chunks):
            lut[k0:k1] = i
        cum = np.r_[0, np.cumsum(cols.per_k)]
        self.bounds = [int(cum[k0]) for k0, _ in chunks] + [int(cum[-1])]
        if stage.parallel:
            chunk_order_forked(lut, cols.k, self.bounds, self.order, stage)
        else:
            chunk_order(lut, cols.k, self.bounds, out=self.order)

    def rows(self, i: int) -> np.ndarray:
        return self.order[self.bounds[i]:self.bounds[i + 1]].astype(np.int64)

    def keep(self, i: int, rows: np.ndarray) -> None:
        """Range i's rows in a new order (the same rows)."""
        self.order[self.bounds[i]:self.bounds[i + 1]] = rows
