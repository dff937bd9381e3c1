"""The analysis figures computed with numpy straight from a decoded buffer: an oracle for the SQL package.

Same definitions, tie rules and arithmetic as ``sql/ktrace/*.sql`` (docs/analysis-schema.md), so the two
give equal figures, bit for bit: means and ratios are one division of exact integer sums, done in float64 in
the same order as the SQL does it. Everything is vectorized over slices; nothing loops over events.
"""

from __future__ import annotations

import numpy as np

from ..export.writer import launch_facts
from ..model import Decoded, Summary
from . import oracle_structure as st
from .results import Figures, Kernel, PhaseInstances, PhaseLanes, Phases, Waits

__all__ = ["oracle_figures", "DEFAULT_TICK_NS"]

DEFAULT_TICK_NS = 32  # %globaltimer step measured on an H200


def oracle_figures(d: Decoded) -> Figures:
    """Every figure of the analysis (see ``Figures``) for the decoded buffer ``d``."""
    s = _SliceColumns(d)
    blocks, s.block_row = st.blocks_table(s.block, s.sm, s.lane, s.begin, s.end)
    inst = _Instances(s, blocks)
    kernel = _kernel(d, s)
    lane_totals = st.lane_totals(s.lane, s.block, s.group, s.sm, s.begin, s.end, s.top)
    busy = st.busy_sms(blocks)
    pred, kind = st.predecessors(s, s.top, s.prev, inst.end_of_slice, inst.last_of_slice, s.block_row, blocks)
    cp = st.critical_path(s, s.top, pred, kind, kernel.begin_ns, kernel.end_ns) if s.n else st.CriticalPath.empty()
    return Figures(
        kernel=kernel,
        launch=dict(launch_facts(d, Summary.of(d))),
        phases=_phases(s, inst, lane_totals),
        instances=inst.table,
        lanes=_lanes(s, inst),
        waits=_waits(s),
        critical_path=cp,
        critical_shares=st.critical_shares(cp, kernel.wall_ns),
        blocks=blocks,
        lane_totals=lane_totals,
        busy_sms=busy,
        occupancy=st.occupancy(blocks, busy, kernel.begin_ns, kernel.end_ns) if s.n else st.Occupancy.empty(),
    )


class _SliceColumns:
    """The phase slices with their phase name code and phase order."""

    def __init__(self, d: Decoded) -> None:
        sl = d.slices
        self.n = len(sl)
        self.begin = sl.begin_ns.astype(np.int64)
        self.end = sl.end_ns.astype(np.int64)
        self.dur = self.end - self.begin
        self.block, self.group, self.sm = sl.block, sl.group, sl.sm
        self.lane, self.k, self.seq = sl.lane, sl.k, sl.begin_seq
        events = np.unique(sl.event)
        event_names = [d.launch.event_name(int(e)) for e in events]
        # Phases are named events: two event indices with one name are one phase, as in SQL.
        self.names = sorted(set(event_names))
        code_of_event = np.array([self.names.index(nm) for nm in event_names], np.int64)
        self.code = code_of_event[np.searchsorted(events, sl.event)] if self.n else np.zeros(0, np.int64)
        first = np.full(len(self.names), np.iinfo(np.int64).max)
        np.minimum.at(first, self.code, self.begin)
        order = sorted(range(len(self.names)), key=lambda c: (int(first[c]), self.names[c]))
        self.phase_index = np.empty(len(self.names), np.int64)
        self.phase_index[order] = np.arange(len(self.names))
        self.depth = st.slice_depth(self.lane, sl.begin_seq, sl.end_seq, sl.overlap)
        self.top = self.depth == 0
        self.prev, self.next = st.lane_neighbours(self.lane, self.begin, self.seq, self.top)
        self.block_row = np.zeros(self.n, np.int64)

    def phase_name(self, codes: np.ndarray) -> list[str]:
        return [self.names[c] for c in codes.tolist()]


def _starts(sorted_keys: np.ndarray) -> np.ndarray:
    """Indices where a run of equal keys begins."""
    if not len(sorted_keys):
        return np.zeros(0, np.int64)
    return np.flatnonzero(np.r_[True, sorted_keys[1:] != sorted_keys[:-1]])


def _lower_percentile(p: float, n: np.ndarray) -> np.ndarray:
    """0-based index of the p-quantile (0 <= p <= 1) of n sorted values: floor(p * (n - 1)), computed in
    float64 as SQLite's percentile_disc does (numpy's method='lower')."""
    return np.floor(p * (np.asarray(n) - 1).astype(np.float64)).astype(np.int64)


def _fdiv(num, den) -> np.ndarray:
    """num / den in float64 (exact integers converted first), NaN where den is 0: SQL's x * 1.0 / y."""
    num = np.asarray(num).astype(np.float64)
    den = np.asarray(den).astype(np.float64)
    out = np.full(np.broadcast(num, den).shape, np.nan)
    np.divide(num, den, out=out, where=den != 0)
    return out


class _Instances:
    """Per-instance figures, and per-slice facts the other tables need (last finisher, tie, the instance's
    latest end and last finisher)."""

    def __init__(self, s: _SliceColumns, blocks) -> None:
        ncode = max(len(s.names), 1)
        # Group the slices by instance with one stable sort: on a lane, k grows with every slice of a phase,
        # so (k, phase) keys come in long ascending runs that the stable sort merges cheaply.
        ikey = s.k * ncode + s.code
        by_inst = np.argsort(ikey, kind="stable")
        sk = ikey[by_inst]
        starts = _starts(sk)
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
        top_block, self.top_count, self.distinct = _stability(s, self.tied, len(s.names))
        self.top_block = top_block
        # The one tie rule: among the tied last, the lowest lane of the phase's top block, else the lowest lane
        # (then the first row).
        lane_span = int(s.lane.max()) + 1 if s.n else 1
        if _combined_fits(2 * lane_span, s.n):
            not_top = (s.block != top_block[s.code]).astype(np.int64)
            rank = np.where(self.tied, (not_top * lane_span + s.lane) * s.n + np.arange(s.n), np.iinfo(np.int64).max)
            first = red(np.minimum, rank[by_inst]) % s.n if s.n else np.zeros(0, np.int64)
            del rank, not_top
        else:
            not_top = (s.block != top_block[s.code]).astype(np.int64)
            key = s.code * (int(s.k.max()) + 1) + s.k
            pick = np.lexsort((s.lane, not_top, ~self.tied, key))
            first = pick[_starts(key[pick])]
            first = first[np.argsort(inst_of[first])]
        self.is_last = np.zeros(s.n, bool)
        self.is_last[first] = True
        dur_sorted = _sorted_within(s.dur, by_inst, inst_sorted, starts)
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
        begin_sorted = _sorted_within(s.begin, by_inst, inst_sorted, starts)
        cols = {
            "phase": s.phase_name(code),
            "phase_index": s.phase_index[code],
            "k": s.k[first],
            "lanes": n,
            "min_dur_ns": dur_sorted[starts] if s.n else [],
            "p50_dur_ns": dur_sorted[starts + _lower_percentile(0.5, n)] if s.n else [],
            "p90_dur_ns": dur_sorted[starts + _lower_percentile(0.9, n)] if s.n else [],
            "max_dur_ns": max_dur,
            "sum_dur_ns": sum_dur,
            "mean_dur_ns": _fdiv(sum_dur, n),
            "imbalance": _fdiv(max_dur * n, sum_dur),
            "begin_ns": begin_min,
            "end_ns": latest,
            "wall_ns": latest - begin_min,
            "excess_ns": latest - begin_min - max_dur,
            "start_skew_ns": begin_max - begin_min,
            "end_skew_ns": latest - end_min,
            "last_block": s.block[first],
            "last_group": s.group[first],
            "last_sm": s.sm[first],
            "last_lane": s.lane[first],
            "tied_last_lanes": tied_count,
            "last_lead_ns": lead,
            "depth": red(np.minimum, s.depth[by_inst]),
            "p50_begin_ns": begin_sorted[starts + _lower_percentile(0.5, n)] if s.n else [],
            "last_begin_ns": s.begin[first],
            "last_dur_ns": s.dur[first],
            "prev_lanes": prev_lanes,
            "sync_lanes": red(np.add, synced[by_inst].astype(np.int64)),
            "lead_in_min_ns": li_min,
            "lead_in_max_ns": li_max,
            "later_wave_lanes": red(np.add, later[by_inst].astype(np.int64)),
        }
        order = np.lexsort((cols["k"], cols["phase_index"]))
        self.code = code[order]
        self.table = PhaseInstances.from_columns(
            {name: np.asarray(v, dtype=object if name == "phase" else None)[order] for name, v in cols.items()})


def _combined_fits(*spans: int) -> bool:
    """Whether a key combined from columns of these spans stays well inside int64."""
    total = 1
    for sp in spans:
        total *= max(int(sp), 1)
    return total < 2**62


def _sorted_within(values: np.ndarray, by_inst: np.ndarray, inst_sorted: np.ndarray, starts) -> np.ndarray:
    """values grouped as by_inst groups them (inst_sorted: the group of each grouped row), sorted within each
    group: one sort of (group, value) keys combined into one int64, else a lexsort."""
    v = values[by_inst]
    if not len(v):
        return v
    lo = int(v.min())
    span = int(v.max()) - lo + 1
    if not _combined_fits(len(starts), span):
        return v[np.lexsort((v, inst_sorted))]
    comb = inst_sorted * span + (v - lo)
    del v
    comb.sort()
    comb -= inst_sorted * span
    comb += lo
    return comb


def _phases(s: _SliceColumns, inst: _Instances, lane_totals) -> Phases:
    t = inst.table
    if not len(t):
        return Phases.empty()
    code = inst.code
    order = np.argsort(s.phase_index[code], kind="stable")  # instances are sorted by phase_index already
    starts = _starts(s.phase_index[code][order])
    pc = code[order][starts]

    def total(col):
        return np.add.reduceat(np.asarray(getattr(t, col))[order], starts)

    def most(col):
        return np.maximum.reduceat(np.asarray(getattr(t, col))[order], starts)

    instances = np.diff(np.r_[starts, len(t)])
    slices, sum_max, sum_dur = total("lanes"), total("max_dur_ns"), total("sum_dur_ns")
    lead = t.last_lead_ns[order]
    has_lead = ~np.isnan(lead)
    sum_lead = np.add.reduceat(np.where(has_lead, lead, 0).astype(np.int64), starts)
    lead_count = np.add.reduceat(has_lead.astype(np.int64), starts)
    top_block, top_count, distinct = inst.top_block, inst.top_count, inst.distinct
    groups = [",".join(map(str, np.unique(s.group[s.code == c]).tolist())) for c in pc.tolist()]
    mean_max = _fdiv(sum_max, instances)
    mean_dur = _fdiv(sum_dur, slices)
    # Lanes that ran each phase, how many slices of it each ran, and idle lanes of the phase's groups.
    pairs, per_lane = st.unique_columns(s.code, s.lane, return_counts=True)
    lanes_of = np.bincount(pairs[0], minlength=len(s.names))
    lo = np.full(len(s.names), np.iinfo(np.int64).max)
    hi = np.zeros(len(s.names), np.int64)
    np.minimum.at(lo, pairs[0], per_lane)
    np.maximum.at(hi, pairs[0], per_lane)
    group_lanes = {g: int((lane_totals.group == g).sum()) for g in np.unique(lane_totals.group).tolist()}
    idle = [sum(group_lanes[int(g)] for g in gs.split(",")) - int(lanes_of[c]) for gs, c in zip(groups, pc.tolist())]
    synced = (t.lanes >= 2) & (t.sync_lanes == t.lanes)
    return Phases.from_columns({
        "phase": s.phase_name(pc),
        "phase_index": s.phase_index[pc],
        "groups": groups,
        "instances": instances,
        "slices": slices,
        "sum_max_dur_ns": sum_max,
        "mean_max_dur_ns": mean_max,
        "sum_dur_ns": sum_dur,
        "mean_dur_ns": mean_dur,
        "imbalance": _fdiv(mean_max, mean_dur),
        "max_imbalance": np.fmax.reduceat(t.imbalance[order], starts),
        "sum_wall_ns": total("wall_ns"),
        "sum_excess_ns": total("excess_ns"),
        "mean_excess_ns": _fdiv(total("excess_ns"), instances),
        "max_excess_ns": most("excess_ns"),
        "mean_start_skew_ns": _fdiv(total("start_skew_ns"), instances),
        "max_start_skew_ns": most("start_skew_ns"),
        "mean_end_skew_ns": _fdiv(total("end_skew_ns"), instances),
        "max_end_skew_ns": most("end_skew_ns"),
        "mean_last_lead_ns": _fdiv(sum_lead, lead_count),
        "top_last_block": top_block[pc],
        "top_last_count": top_count[pc],
        "distinct_last_blocks": distinct[pc],
        "tied_instances": np.add.reduceat((t.tied_last_lanes[order] > 1).astype(np.int64), starts),
        "depth": np.minimum.reduceat(t.depth[order], starts),
        "lanes": lanes_of[pc],
        "idle_lanes": idle,
        "min_lane_instances": lo[pc],
        "max_lane_instances": hi[pc],
        "sync_instances": np.add.reduceat(synced[order].astype(np.int64), starts),
        "wave_instances": np.add.reduceat((t.later_wave_lanes[order] > 0).astype(np.int64), starts),
    })


def _stability(s: _SliceColumns, tied_mask: np.ndarray, phases: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per phase code: the block among the tied last finishers in the most instances (then the lowest),
    in how many, and the distinct last blocks when a tie that includes that block counts as that block."""
    m = tied_mask
    if not m.any():
        return np.full(phases, -1, np.int64), np.zeros(phases, np.int64), np.zeros(phases, np.int64)
    tied = st.unique_columns(s.code[m], s.k[m], s.block[m])  # distinct (phase, k, block)
    code, k, block = tied
    pairs, count = st.unique_columns(code, block, return_counts=True)
    pick = np.lexsort((pairs[1], -count, pairs[0]))
    first = pick[_starts(pairs[0][pick])]
    top_block = np.full(phases, -1, np.int64)
    top_count = np.zeros(phases, np.int64)
    top_block[pairs[0][first]] = pairs[1][first]
    top_count[pairs[0][first]] = count[first]
    # Per instance: the top block if it is among the tied, else the lowest tied block.
    starts = _starts(code * (int(k.max()) + 1 if len(k) else 1) + k)
    has_top = np.maximum.reduceat((block == top_block[code]).astype(np.int64), starts) if len(k) else []
    lowest = np.minimum.reduceat(block, starts) if len(k) else []
    inst_code = code[starts]
    chosen = np.where(np.asarray(has_top, bool), top_block[inst_code], lowest)
    distinct = np.zeros(phases, np.int64)
    uniq = st.unique_columns(inst_code, chosen)
    np.add.at(distinct, uniq[0], 1)
    return top_block, top_count, distinct


def _lanes(s: _SliceColumns, inst: _Instances) -> PhaseLanes:
    if not s.n:
        return PhaseLanes.empty()
    pi = s.phase_index[s.code]
    if len(s.names) < 2**15 and st._is_sorted(s.lane):
        # Rows come in lane order: a stable sort on the phase alone (a radix sort of 16-bit keys) is the
        # (phase, lane) order.
        order = np.argsort(pi.astype(np.int16), kind="stable")
    else:
        order = np.lexsort((s.lane, pi))
    key = pi[order] * (int(s.lane.max()) + 1) + s.lane[order]
    del pi
    starts = _starts(key)
    n = np.diff(np.r_[starts, s.n])
    dur = s.dur[order]
    sums = np.add.reduceat(dur, starts)
    code = s.code[order][starts]
    return PhaseLanes.from_columns({
        "phase": s.phase_name(code),
        "phase_index": s.phase_index[code],
        "block": np.minimum.reduceat(s.block[order], starts),
        "group": np.minimum.reduceat(s.group[order], starts),
        "lane": s.lane[order][starts],
        "sm": np.maximum.reduceat(s.sm[order], starts),
        "instances": n,
        "min_dur_ns": np.minimum.reduceat(dur, starts),
        "mean_dur_ns": _fdiv(sums, n),
        "max_dur_ns": np.maximum.reduceat(dur, starts),
        "sum_dur_ns": sums,
        "last_count": np.add.reduceat(inst.is_last[order].astype(np.int64), starts),
    })


def _next_on_lane(s: _SliceColumns) -> tuple[np.ndarray, np.ndarray]:
    """For each top-level slice, the row of the lane's next top-level slice (by begin, then record order)
    or -1, and the gap to it."""
    nxt = s.next
    gap = np.where(nxt >= 0, s.begin[nxt] - s.end, 0)
    return nxt, gap


def _waits(s: _SliceColumns) -> Waits:
    nxt, gap = _next_on_lane(s)
    rows = np.flatnonzero((nxt >= 0) & (gap >= 0))
    if not len(rows):
        return Waits.empty()
    nph = len(s.names)
    key = s.phase_index[s.code[rows]] * nph + s.phase_index[s.code[nxt[rows]]]
    w = gap[rows]
    del gap
    # Sorted by (pair, wait): one sort of the two combined into one int64 key (waits are >= 0).
    span = int(w.max()) + 1
    if _combined_fits(nph * nph, span):
        comb = key * span + w
        comb.sort()
        key_up = comb // span
        w_up = comb - key_up * span
        del comb
    else:
        up = np.lexsort((w, key))
        key_up, w_up = key[up], w[up]
    starts = _starts(key_up)
    n = np.diff(np.r_[starts, len(rows)])
    pair = key_up[starts]
    a, b = pair // nph, pair % nph
    # The longest wait of each pair: lowest block, then group, then k among those that equal it.
    longest = w_up[starts + n - 1]
    cand = np.flatnonzero(w == longest[np.searchsorted(pair, key)])
    cand = cand[np.lexsort((s.k[rows[cand]], s.group[rows[cand]], s.block[rows[cand]], key[cand]))]
    top = rows[cand[_starts(key[cand])]]  # the same pairs, in the same order, as `pair`
    sums = np.add.reduceat(w_up, starts)
    code_of_index = np.argsort(s.phase_index)
    return Waits.from_columns({
        "phase": s.phase_name(code_of_index[a]),
        "next_phase": s.phase_name(code_of_index[b]),
        "phase_index": a,
        "next_phase_index": b,
        "count": n,
        "sum_ns": sums,
        "mean_ns": _fdiv(sums, n),
        "min_ns": w_up[starts],
        "p50_ns": w_up[starts + _lower_percentile(0.5, n)],
        "p90_ns": w_up[starts + _lower_percentile(0.9, n)],
        "max_ns": longest,
        "max_block": s.block[top],
        "max_group": s.group[top],
        "max_k": s.k[top],
    })


def _kernel(d: Decoded, s: _SliceColumns) -> Kernel:
    steps = np.diff(np.unique(s.dur))  # distinct durations are whole ticks apart
    candidates = [int(steps.min())] if len(steps) else []
    record_step = Summary.of(d).min_step_ns  # as the launch slice records it
    if record_step and record_step > 0:
        candidates.append(int(record_step))
    smallest = min(candidates) if candidates else None
    launch_tick = d.launch.timer_tick_ns if d.launch.timer_tick_ns and d.launch.timer_tick_ns > 0 else None
    tick, source = ((launch_tick, "launch") if launch_tick else (smallest, "smallest step") if smallest
                    else (DEFAULT_TICK_NS, "default"))
    begin = int(s.begin.min()) if s.n else None
    end = int(s.end.max()) if s.n else None
    return Kernel(
        begin_ns=begin,
        end_ns=end,
        wall_ns=None if begin is None else end - begin,
        slices=s.n,
        lanes=len(np.unique(s.lane)),
        phases=len(s.names),
        smallest_step_ns=smallest,
        tick_ns=int(tick),
        tick_source=source,
    )
