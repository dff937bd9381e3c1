"""The numpy analysis's per-instance table (ktrace_phase_instance): each phase instance's figures, its last
finisher by the one tie rule, and per slice the facts the other tables need. Same definitions and
arithmetic as ``sql/ktrace/phases.sql`` (docs/analysis-schema.md).

The slices are grouped by instance with one stable sort; order statistics (percentiles) sort values within
each instance through one combined int64 key; everything else is a reduction over the grouped rows.
"""

from __future__ import annotations

import numpy as np

from . import oracle_structure as st
from .results import PhaseInstances

__all__ = ["Instances", "run_starts", "lower_percentile", "fdiv", "combined_fits", "sorted_within", "stability",
           "instance_columns"]


def run_starts(sorted_keys: np.ndarray) -> np.ndarray:
    """Indices where a run of equal keys begins."""
    if not len(sorted_keys):
        return np.zeros(0, np.int64)
    return np.flatnonzero(np.r_[True, sorted_keys[1:] != sorted_keys[:-1]])


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
    """values grouped as by_inst groups them (inst_sorted: the group of each grouped row), sorted within each
    group: one sort of (group, value) keys combined into one int64, else a lexsort."""
    v = values[by_inst]
    if not len(v):
        return v
    lo = int(v.min())
    span = int(v.max()) - lo + 1
    if not combined_fits(len(starts), span):
        return v[np.lexsort((v, inst_sorted))]
    comb = inst_sorted * span + (v - lo)
    del v
    comb.sort()
    comb -= inst_sorted * span
    comb += lo
    return comb


class Instances:
    """Per-instance figures, and per-slice facts the other tables need (last finisher, tie, the instance's
    latest end and last finisher)."""

    def __init__(self, s, blocks) -> None:
        ncode = max(len(s.names), 1)
        # Group the slices by instance with one stable sort: on a lane, k grows with every slice of a phase,
        # so (k, phase) keys come in long ascending runs that the stable sort merges cheaply.
        ikey = s.k * ncode + s.code
        by_inst = np.argsort(ikey, kind="stable")
        sk = ikey[by_inst]
        starts = run_starts(sk)
        n = np.diff(np.r_[starts, s.n])
        inst_sorted = np.cumsum(np.r_[False, sk[1:] != sk[:-1]]) if s.n else np.zeros(0, np.int64)
        del sk
        inst_of = np.empty(s.n, np.int64)
        inst_of[by_inst] = inst_sorted
        red = (lambda f, a: f.reduceat(a, starts)) if s.n else (lambda f, a: np.zeros(0, np.int64))
        end_g = s.end[by_inst]
        latest = red(np.maximum, end_g)
        self.end_of_slice = latest[inst_of] if s.n else np.zeros(0, np.int64)
        self.tied = s.end == self.end_of_slice
        tied_g = self.tied[by_inst]
        tied_count = red(np.add, tied_g.astype(np.int64))
        # The second latest end: the latest again when two or more tie, else the latest of the others.
        small = np.iinfo(np.int64).min
        runner_up = np.where(tied_count > 1, latest, red(np.maximum, np.where(tied_g, small, end_g)))
        lead = np.where(n > 1, latest - np.where(n > 1, runner_up, latest), 0).astype(np.float64)
        lead[n <= 1] = np.nan
        end_min = red(np.minimum, end_g)
        del end_g
        m = self.tied
        top_block, self.top_count, self.distinct = stability(s.code[m], s.k[m], s.block[m], len(s.names))
        self.top_block = top_block
        # The one tie rule: among the tied last, the lowest lane of the phase's top block, else the lowest lane
        # (then the first row).
        lane_span = int(s.lane.max()) + 1 if s.n else 1
        if combined_fits(2 * lane_span, s.n):
            not_top = (s.block != top_block[s.code]).astype(np.int64)
            rank = np.where(self.tied, (not_top * lane_span + s.lane) * s.n + np.arange(s.n), np.iinfo(np.int64).max)
            first = red(np.minimum, rank[by_inst]) % s.n if s.n else np.zeros(0, np.int64)
            del rank, not_top
        else:
            not_top = (s.block != top_block[s.code]).astype(np.int64)
            key = s.code * (int(s.k.max()) + 1) + s.k
            pick = np.lexsort((s.lane, not_top, ~self.tied, key))
            first = pick[run_starts(key[pick])]
            first = first[np.argsort(inst_of[first])]
        self.is_last = np.zeros(s.n, bool)
        self.is_last[first] = True
        dur_sorted = sorted_within(s.dur, by_inst, inst_sorted, starts)
        max_dur = red(np.maximum, s.dur[by_inst])
        sum_dur = red(np.add, s.dur[by_inst])
        begin_g = s.begin[by_inst]
        begin_min = red(np.minimum, begin_g)
        begin_max = red(np.maximum, begin_g)
        del begin_g
        self.last_of_slice = first[inst_of] if s.n else np.zeros(0, np.int64)
        # Structure: lanes with a previous top-level slice, those that waited for its whole instance, lead-ins.
        has_prev = (s.prev >= 0)
        prev_end = np.where(has_prev, s.end[np.maximum(s.prev, 0)], 0)
        synced = has_prev & (s.begin >= np.where(has_prev, self.end_of_slice[np.maximum(s.prev, 0)], 0))
        lead_in = s.begin - prev_end
        del prev_end
        big = np.iinfo(np.int64).max
        hp = has_prev[by_inst]
        prev_lanes = red(np.add, hp.astype(np.int64))
        li_min = red(np.minimum, np.where(hp, lead_in[by_inst], big)).astype(np.float64)
        li_max = red(np.maximum, np.where(hp, lead_in[by_inst], small)).astype(np.float64)
        del lead_in, hp
        li_min[prev_lanes == 0] = np.nan
        li_max[prev_lanes == 0] = np.nan
        later = blocks.later_wave[s.block_row] if s.n else np.zeros(0, np.int64)
        code = s.code[first] if s.n else np.zeros(0, np.int64)
        begin_sorted = sorted_within(s.begin, by_inst, inst_sorted, starts)
        cols = instance_columns(
            n, starts, dur_sorted, begin_sorted, max_dur, sum_dur, begin_min, begin_max, latest, end_min,
            phase=s.phase_name(code), phase_index=s.phase_index[code], k=s.k[first], last_block=s.block[first],
            last_group=s.group[first], last_sm=s.sm[first], last_lane=s.lane[first], tied_last_lanes=tied_count,
            last_lead_ns=lead, depth=red(np.minimum, s.depth[by_inst]), last_begin_ns=s.begin[first],
            last_dur_ns=s.dur[first], prev_lanes=prev_lanes, sync_lanes=red(np.add, synced[by_inst].astype(np.int64)),
            lead_in_min_ns=li_min, lead_in_max_ns=li_max,
            later_wave_lanes=red(np.add, later[by_inst].astype(np.int64)))
        order = np.lexsort((cols["k"], cols["phase_index"]))
        self.code = code[order]
        self.table = PhaseInstances.from_columns(
            {name: np.asarray(v, dtype=object if name == "phase" else None)[order] for name, v in cols.items()})


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
