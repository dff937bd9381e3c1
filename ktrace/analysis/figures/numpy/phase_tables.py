"""The numpy engine's phase-level tables and the Figures they make: the phase table from the instance
table, the wait table from per-pair figures, the kernel row, and what follows from them (shares, busy SMs,
occupancy, wait causes).

Same definitions, tie rules and arithmetic as ``sql/ktrace/*.sql`` (docs/analysis-schema.md), so the SQL
package and the numpy engine give equal figures, bit for bit: means and ratios are one division of exact
integer sums, done in float64 in the same order as the SQL does it.
"""

from __future__ import annotations

import numpy as np

from ....core.model import Summary
from . import structure as st
from ...evidence.keyed import distinct as _distinct
from .instance_math import fdiv, run_starts
from ...evidence.waits import TopSlices, WaitCauses, wait_causes
from ...model.results import Figures, Kernel, Phases, Waits

__all__ = ["figures_of", "wait_causes_of", "kernel_figures", "phases_table", "waits_columns", "DEFAULT_TICK_NS"]

DEFAULT_TICK_NS = 32  # %globaltimer step measured on an H200


def figures_of(kernel: Kernel, launch: dict, phases, instances, lanes, waits, cp, blocks, lane_totals,
               evidence: tuple, top: TopSlices | None = None, timed: TopSlices | None = None) -> Figures:
    """The Figures of these tables, with the ones that follow from them: the critical path's shares per
    phase, busy SMs over time, the launch's occupancy; evidence: what each wait waited for and the lead-ins
    (WaitCauses, LeadIns); top: every top-level slice, for the replay (None where only a sample was read); timed:
    the timed waits nested in the lanes' work, for the replay too (None: none, or not read)."""
    busy = st.busy_sms(blocks)
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
        top=top,
        timed=timed,
    )


def wait_causes_of(top: TopSlices, kernel: Kernel, names: dict[int, str], launch: dict) -> WaitCauses:
    """The WaitCauses of the top-level slices, with the phases' names (phase_index -> name) and the launch's
    block count."""
    nb = launch.get("num_blocks")
    return wait_causes(top, kernel.tick_ns, names, int(nb) if isinstance(nb, int) and nb > 0 else None)


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
    groups = [",".join(map(str, _distinct(cg_group[cg_code == c]).tolist())) for c in pc.tolist()]
    mean_max = fdiv(sum_max, instances)
    mean_dur = fdiv(sum_dur, slices)
    # Lanes that ran each phase, how many slices of it each ran, and idle lanes of the phase's groups.
    pairs = code_lanes
    lanes_of = np.bincount(pairs[0], minlength=len(s.names))
    lo = np.full(len(s.names), np.iinfo(np.int64).max)
    hi = np.zeros(len(s.names), np.int64)
    np.minimum.at(lo, pairs[0], per_lane)
    np.maximum.at(hi, pairs[0], per_lane)
    group_lanes = {g: int((lane_totals.group == g).sum()) for g in _distinct(lane_totals.group).tolist()}
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
