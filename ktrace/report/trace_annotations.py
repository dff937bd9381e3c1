"""An Analysis as timeline annotations: what ``ktrace analyze --trace`` and ``ktrace view`` draw in the UI.

Turns the findings, the critical path and the occupancy figures into the plain rows of
``ktrace.export.annotations.Annotations`` (the writer knows nothing of the analysis). The time a finding
concerns, by kind (docs/trace-format.md, "Annotations"; each kind's ``span`` and ``roles`` in
analysis/findings/kinds/):

- ``tail``: from ``occupancy.tail_begin_ns`` to the kernel's end;
- ``stable_straggler``, ``late_start`` (with a block): the instances that block finished last, first begin to
  last end; ``straggler_change``: its segments' instances;
- ``load_imbalance``: the phase's instance with the longest slice; ``start_skew``: the instance with the most
  excess (wall - slowest slice); ``large_wait``: the instance with the longest wait, to that wait's end;
- ``idle_lanes``, ``critical_path`` and any other phase finding: the phase's extent (first begin to last
  end); a launch finding without a rule: the kernel.
"""

from __future__ import annotations

import numpy as np

from ..analysis.findings import kinds
from ..analysis.findings.kinds.base import extent
from ..export.annotations import Annotations, CounterSeries, SliceMarks, Span

__all__ = ["annotations_of", "finding_span", "finding_label", "lanes_running", "GAP_NAMES"]

GAP_NAMES = {"wait": "wait", "lane_gap": "lane gap", "block_switch": "block switch", "lead_in": "lead-in"}


def _kernel(fig) -> tuple[int, int]:
    return int(fig.kernel.begin_ns or 0), int(fig.kernel.end_ns or 0)


def finding_span(f, fig) -> tuple[int, int]:
    """[begin_ns, end_ns] (trace ns) of the time finding ``f`` concerns, by its kind (module docstring)."""
    inst = fig.instances
    mine = inst.phase == f.phase if f.phase is not None else np.zeros(len(inst), bool)
    kind = kinds.get(f.kind)
    span = kind.span(f, fig, mine) if kind else None  # each kind's module says what it draws
    if span is None and mine.any():
        span = extent(inst, mine)
    if span is None:
        span = _kernel(fig)
    lo, hi = _kernel(fig)
    b, e = max(span[0], lo), min(max(span[1], span[0]), hi)
    return (b, e) if e >= b else (lo, hi)


def finding_label(f) -> str:
    """The finding's short text: a marker for warnings, its kind, its phase and the block it names."""
    head = ("⚠ " if f.severity == "warning" else "") + f.kind.replace("_", " ")
    if f.phase is not None:
        head += f" · {f.phase}"
    block = f.figures.get("block", f.figures.get("last_block", f.figures.get("slowest_block")))
    if block is not None:
        head += f" · block {block}"
    return head


def _finding_spans(a) -> tuple:
    out = []
    for rank, f in enumerate(a.findings):
        b, e = finding_span(f, a.figures)
        args = (("rank", rank + 1), ("kind", f.kind), ("severity", f.severity), ("impact_ns", float(f.impact_ns)),
                ("impact_share", float(f.impact_share or 0.0)), ("evidence", f.evidence), ("message", f.message))
        if f.phase is not None:
            args += (("phase", f.phase),)
        out.append(Span(finding_label(f), b, e, args))
    return tuple(out)


def _path(cp) -> tuple[tuple, list]:
    """The path's parts as Spans, and the indices of its slice parts."""
    spans, slices = [], []
    for i in range(len(cp)):
        r = cp.row(i)
        kind = r["kind"]
        args = [("part", kind), ("step", r["step"])]
        if r["phase"] is not None:
            args.append(("phase", r["phase"]))
        if r["k"] is not None:
            args.append(("instance", r["k"]))
        if r["last_block"] is not None:
            args += [("lane_block", r["last_block"]), ("lane_group", r["last_group"])]
        if r["next_phase"] is not None:
            args.append(("next_phase", r["next_phase"]))
        name = r["phase"] if kind == "slice" else GAP_NAMES.get(kind, kind)
        spans.append(Span(name, r["begin_ns"], r["end_ns"], tuple(args)))
        if kind == "slice":
            slices.append(i)
    return tuple(spans), slices


def _roles(a) -> dict:
    """(phase, block, group, k) -> set of roles, for the slices the findings name."""
    fig, inst = a.figures, a.figures.instances
    out: dict = {}

    for f in a.findings:
        kind = kinds.get(f.kind)
        if kind is None:
            continue
        for key, role in kind.roles(f, fig, inst.phase == f.phase, a.tick_ns):  # each kind's module names its slices
            out.setdefault(key, set()).add(role)
    return out


def _marks(a, path: tuple, slice_parts: list) -> tuple[SliceMarks, tuple]:
    roles = _roles(a)
    flows: dict = {}
    hops = []
    for h, (i, j) in enumerate(zip(slice_parts, slice_parts[1:]), start=1):
        hops.append((i, j))
        for part, side in ((path[i], 0), (path[j], 1)):
            key = _path_key(part)
            flows.setdefault(key, [0, 0])[side] = h
    keys = sorted(set(roles) | set(flows))
    m = SliceMarks(
        tuple(k[0] for k in keys), np.array([k[1] for k in keys], np.int64), np.array([k[2] for k in keys], np.int64),
        np.array([k[3] for k in keys], np.int64), tuple(",".join(sorted(roles.get(k, ()))) for k in keys),
        np.array([flows.get(k, (0, 0))[0] for k in keys], np.uint64),
        np.array([flows.get(k, (0, 0))[1] for k in keys], np.uint64))
    return m, tuple(hops)


def _path_key(s: Span) -> tuple:
    args = dict(s.args)
    return args["phase"], int(args["lane_block"]), int(args["lane_group"]), int(args["instance"])


def lanes_running(phase, ts, end_ts, order=()) -> list[CounterSeries]:
    """Per phase (in ``order``, then first-seen order), the number of its slices running over time: one point per time the
    count changes (begins and ends at one time net out). phase, ts, end_ts: one entry per phase slice."""
    phase = np.asarray(phase, dtype=object)
    ts, end_ts = np.asarray(ts, np.int64), np.asarray(end_ts, np.int64)
    out = []
    names, first = np.unique(phase.astype(str), return_index=True) if len(phase) else ([], [])
    seen = [names[i] for i in np.argsort(first)]
    for name in [p for p in order if p in seen] + [p for p in seen if p not in order]:  # a loop over phases
        m = phase == name
        t = np.concatenate([ts[m], end_ts[m]])
        d = np.concatenate([np.ones(m.sum(), np.int64), -np.ones(m.sum(), np.int64)])
        order = np.argsort(t, kind="stable")
        t, level = t[order], np.cumsum(d[order])
        last = np.r_[t[1:] != t[:-1], True]  # the count after every change at one time
        t, level = t[last], level[last]
        keep = np.r_[True, level[1:] != level[:-1]]
        out.append(CounterSeries(f"lanes running: {name}", t[keep], level[keep],
                                 f"slices of phase {name} running (one per lane at a time)", unit="lanes"))
    return out


def annotations_of(a, phase_slices: dict | None = None) -> Annotations:
    """The Annotations of Analysis ``a``: findings, the critical path and its hops, the slices the findings name,
    busy SMs over time and (given ``phase_slices``: columns phase, ts, end_ts) lanes running per phase."""
    fig = a.figures
    path, slice_parts = _path(fig.critical_path)
    marks, hops = _marks(a, path, slice_parts)
    counters = []
    if len(fig.busy_sms):
        counters.append(CounterSeries("busy SMs", fig.busy_sms.ts, fig.busy_sms.busy_sms,
                                      "SMs running a block (from each block's first begin to its last end)",
                                      unit="SMs"))
    if phase_slices is not None:
        counters += lanes_running(phase_slices["phase"], phase_slices["ts"], phase_slices["end_ts"],
                                  order=fig.phases.phase.tolist())
    top = a.findings[0] if a.findings else None
    desc = f"ktrace analyze: {len(a.findings)} findings" + (f"; top: {top.message}" if top else "")
    return Annotations(_finding_spans(a), path, hops, tuple(counters), marks, desc)
