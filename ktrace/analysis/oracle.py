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
from .oracle_instances import Instances, combined_fits, fdiv, lower_percentile, run_starts
from .evidence import TopSlices, WaitCauses, lead_ins, wait_causes
from .results import Figures, Kernel, PhaseLanes, Phases, Waits

__all__ = ["oracle_figures", "figures_of", "causes_of", "kernel_figures", "phases_table", "waits_columns", "sort_pairs",
           "pair_runs", "DEFAULT_TICK_NS"]

DEFAULT_TICK_NS = 32  # %globaltimer step measured on an H200


def oracle_figures(d: Decoded, summary: Summary | None = None) -> Figures:
    """Every figure of the analysis (see ``Figures``) for the decoded buffer ``d``; summary: the buffer's
    Summary when ``d`` holds only its slices (``BufferDecoder.slices_and_summary``), else Summary.of(d)."""
    summary = Summary.of(d) if summary is None else summary
    s = _SliceColumns(d)
    blocks, s.block_row = st.blocks_table(s.block, s.sm, s.lane, s.begin, s.end)
    inst = Instances(s, blocks)
    kernel = kernel_figures(d.launch, summary, np.unique(s.dur), int(s.begin.min()) if s.n else None,
                            int(s.end.max()) if s.n else None, s.n, len(np.unique(s.lane)), len(s.names))
    lane_totals = st.lane_totals(s.lane, s.block, s.group, s.sm, s.begin, s.end, s.top)
    pred, kind = st.predecessors(s, s.top, s.prev, inst.end_of_slice, inst.last_of_slice, s.block_row, blocks)
    cp = st.critical_path(s, s.top, pred, kind, kernel.begin_ns, kernel.end_ns) if s.n else st.CriticalPath.empty()
    phases = phases_table(s, inst, lane_totals, st.unique_columns(s.code, s.group),
                          *st.unique_columns(s.code, s.lane, return_counts=True))
    top = TopSlices.of(s.lane, s.block, s.group, s.phase_index[s.code], s.k, s.begin, s.end, s.top)
    return figures_of(kernel, launch_facts(d, summary), phases, inst.table, _lanes(s, inst), _waits(s), cp, blocks,
                      lane_totals, top)


def figures_of(kernel: Kernel, launch: dict, phases, instances, lanes, waits, cp, blocks, lane_totals,
               top: TopSlices | None, evidence=None) -> Figures:
    """The Figures of these tables, with the ones that follow from them: the critical path's shares per
    phase, busy SMs over time, the launch's occupancy, and what each wait waited for (from ``top``, the
    top-level slices; or evidence, the (WaitCauses, LeadIns) computed already)."""
    busy = st.busy_sms(blocks)
    if evidence is None:
        evidence = (causes_of(top, kernel, phases, launch),
                    lead_ins(top, instances.phase_index, instances.k, instances.last_lane))
    return Figures(
        kernel=kernel,
        launch=dict(launch),
        phases=phases,
        instances=instances,
        lanes=lanes,
        waits=waits,
        critical_path=cp,
        critical_shares=st.critical_shares(cp, kernel.wall_ns),
        blocks=blocks,
        lane_totals=lane_totals,
        busy_sms=busy,
        occupancy=st.occupancy(blocks, busy, kernel.begin_ns, kernel.end_ns) if kernel.slices else st.Occupancy.empty(),
        wait_causes=evidence[0],
        lead_ins=evidence[1],
    )


def causes_of(top: TopSlices, kernel: Kernel, phases, launch: dict) -> WaitCauses:
    """The WaitCauses of the top-level slices, with the phases' names and the launch's block count."""
    names = dict(zip(phases.phase_index.tolist(), phases.phase.tolist()))
    nb = launch.get("num_blocks")
    return wait_causes(top, kernel.tick_ns, names, int(nb) if isinstance(nb, int) and nb > 0 else None)


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


def phases_table(s, inst, lane_totals, code_groups, code_lanes, per_lane) -> Phases:
    """The ktrace_phase table from the instance table and, per phase code: its (code, group) pairs, its
    distinct (code, lane) pairs and how many slices of it each such lane ran."""
    t = inst.table
    if not len(t):
        return Phases.empty()
    code = inst.code
    order = np.argsort(s.phase_index[code], kind="stable")  # instances are sorted by phase_index already
    starts = run_starts(s.phase_index[code][order])
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
    cg_code, cg_group = code_groups
    groups = [",".join(map(str, np.unique(cg_group[cg_code == c]).tolist())) for c in pc.tolist()]
    mean_max = fdiv(sum_max, instances)
    mean_dur = fdiv(sum_dur, slices)
    # Lanes that ran each phase, how many slices of it each ran, and idle lanes of the phase's groups.
    pairs = code_lanes
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
        "imbalance": fdiv(mean_max, mean_dur),
        "max_imbalance": np.fmax.reduceat(t.imbalance[order], starts),
        "sum_wall_ns": total("wall_ns"),
        "sum_excess_ns": total("excess_ns"),
        "mean_excess_ns": fdiv(total("excess_ns"), instances),
        "max_excess_ns": most("excess_ns"),
        "mean_start_skew_ns": fdiv(total("start_skew_ns"), instances),
        "max_start_skew_ns": most("start_skew_ns"),
        "mean_end_skew_ns": fdiv(total("end_skew_ns"), instances),
        "max_end_skew_ns": most("end_skew_ns"),
        "mean_last_lead_ns": fdiv(sum_lead, lead_count),
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


def _lanes(s: _SliceColumns, inst: Instances) -> PhaseLanes:
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
    starts = run_starts(key)
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
        "mean_dur_ns": fdiv(sums, n),
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
    key_up, w_up = sort_pairs(key, w, nph)
    # The longest wait of each pair: lowest block, then group, then k among those that equal it.
    pair, n, longest = pair_runs(key_up, w_up)
    cand = np.flatnonzero(w == longest[np.searchsorted(pair, key)])
    cand = cand[np.lexsort((s.k[rows[cand]], s.group[rows[cand]], s.block[rows[cand]], key[cand]))]
    top = rows[cand[run_starts(key[cand])]]  # the same pairs, in the same order, as `pair`
    starts = run_starts(key_up)
    return waits_columns(s, nph, pair, n, np.add.reduceat(w_up, starts), w_up[starts],
                         w_up[starts + lower_percentile(0.5, n)], w_up[starts + lower_percentile(0.9, n)], longest,
                         s.block[top], s.group[top], s.k[top])


def sort_pairs(key: np.ndarray, w: np.ndarray, nph: int) -> tuple[np.ndarray, np.ndarray]:
    """Waits (w >= 0) sorted by (pair key, wait): one sort of the two combined into one int64 key."""
    span = int(w.max()) + 1
    if combined_fits(nph * nph, span):
        comb = key.astype(np.int64) * span + w
        comb.sort()
        key_up = comb // span
        comb -= key_up * span
        return key_up, comb
    up = np.lexsort((w, key))
    return key[up].astype(np.int64), w[up]


def pair_runs(key_up: np.ndarray, w_up: np.ndarray):
    """(distinct pair keys, count of each, longest wait of each) of waits sorted by (pair key, wait)."""
    starts = run_starts(key_up)
    n = np.diff(np.r_[starts, len(key_up)])
    return key_up[starts], n, w_up[starts + n - 1]


def waits_columns(s, nph: int, pair, n, sums, mn, p50, p90, mx, max_block, max_group, max_k) -> Waits:
    """The ktrace_wait table from per-pair figures, pair = phase_index of the slice * nph + phase_index of
    the next (ascending); max_*: the longest wait's slice per pair by the tie rule."""
    a, b = pair // nph, pair % nph
    code_of_index = np.argsort(s.phase_index)
    return Waits.from_columns({
        "phase": s.phase_name(code_of_index[a]),
        "next_phase": s.phase_name(code_of_index[b]),
        "phase_index": a,
        "next_phase_index": b,
        "count": n,
        "sum_ns": sums,
        "mean_ns": fdiv(sums, n),
        "min_ns": mn,
        "p50_ns": p50,
        "p90_ns": p90,
        "max_ns": mx,
        "max_block": max_block,
        "max_group": max_group,
        "max_k": max_k,
    })


def kernel_figures(launch, summary: Summary, distinct_durations: np.ndarray, begin, end, slices: int, lanes: int,
                   phases: int) -> Kernel:
    """The ktrace_kernel row: begin/end (None without slices), the timer tick and where it came from."""
    steps = np.diff(distinct_durations)  # distinct durations are whole ticks apart
    candidates = [int(steps.min())] if len(steps) else []
    record_step = summary.min_step_ns  # as the launch slice records it
    if record_step and record_step > 0:
        candidates.append(int(record_step))
    smallest = min(candidates) if candidates else None
    launch_tick = launch.timer_tick_ns if launch.timer_tick_ns and launch.timer_tick_ns > 0 else None
    tick, source = ((launch_tick, "launch") if launch_tick else (smallest, "smallest step") if smallest
                    else (DEFAULT_TICK_NS, "default"))
    return Kernel(
        begin_ns=begin,
        end_ns=end,
        wall_ns=None if begin is None else end - begin,
        slices=slices,
        lanes=lanes,
        phases=phases,
        smallest_step_ns=smallest,
        tick_ns=int(tick),
        tick_source=source,
    )
