"""What-if: the replay (replay.py) with one cause removed or one change made, against the replay of the timeline
as measured: the predicted wall, the saving and the critical path after the change (``ktrace whatif``;
docs/analysis-schema.md, "Cause model and replay")."""

from __future__ import annotations

from dataclasses import field

import numpy as np

from ...core.errors import InputError
from .change import Change, arrays, change_dict, resized_wall
from .replay import RELEASES, Replayed, Timeline, change_rounds, critical_rows, replay
from ...core.records import frozen

__all__ = ["Change", "WhatIf", "predict", "whatif", "change_dict", "path_parts", "fix_told", "CUTS"]

# What makes a finding's stake less than its change's replayed saving (``fix_told``).
CUTS = {"roofline": "the roofline: no change saves more than the wall less the work at the device's peaks",
        "shared": "time it shares on the critical path with the warnings above it, which take it first",
        "claims": "its claims on the critical path, which are less than the change saves",
        "none": "its kind names no change the replay can make: its stake is its share of the critical path"}


@frozen
class WhatIf:
    """measured_wall_ns: the kernel's wall; replayed_wall_ns: the unchanged timeline replayed (equal to it where
    the model holds); predicted_wall_ns: with the change; saving_ns = replayed - predicted; path: the critical
    path after the change, its parts' ns by phase ('phase' rows) and by what the path waited on ('wait'
    rows: grid, cluster, group, slot, lane, start); ends_on: the lane that ends the kernel after the change; fix
    (``ktrace whatif --fix N``): the warnings whose changes it replays, each with its stake and, where the stake
    is below the saving, what cut it (``fix_told``)."""

    measured_wall_ns: int
    replayed_wall_ns: int
    predicted_wall_ns: int
    saving_ns: int
    change: dict
    path: list = field(default_factory=list)
    ends_on: dict = field(default_factory=dict)
    path_before: list = field(default_factory=list)
    fix: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"measured_wall_ns": self.measured_wall_ns, "replayed_wall_ns": self.replayed_wall_ns,
                "predicted_wall_ns": self.predicted_wall_ns, "saving_ns": self.saving_ns,
                "saving_share": self.saving_ns / self.replayed_wall_ns if self.replayed_wall_ns else None,
                "change": dict(self.change), "path": list(self.path), "path_before": list(self.path_before),
                "ends_on": dict(self.ends_on), **({"fix": dict(self.fix)} if self.fix else {})}


def predict(tl: Timeline, change: "Change | None" = None, max_rounds: int | None = None) -> Replayed:
    """The replay with ``change`` applied (None: as measured), in at most ``max_rounds`` rounds."""
    ch = change or Change()
    if ch.blocks is not None:  # a resized grid: its own schedule, not an edit of the measured slices
        if not Change(blocks=ch.blocks, per_sm=ch.per_sm) == ch:
            raise ValueError("a resized grid (blocks) takes no other change with it")
        none = np.zeros(0, np.int64)
        return Replayed(none, none, np.zeros(0, np.int8), resized_wall(tl, int(ch.blocks), ch.per_sm), 0, True)
    return replay(tl, *arrays(tl, ch), max_rounds=max_rounds)


def whatif(tl: Timeline, change: Change, measured_wall_ns: int | None = None) -> WhatIf:
    """The wall with ``change`` applied against the timeline replayed unchanged, and the critical path after."""
    base = replay(tl)
    new = predict(tl, change, change_rounds(base))
    if not new.settled:
        raise InputError(f"the timeline with this change did not settle in {new.rounds:,} rounds of the replay (the "
                         "change makes a chain of releases circular): no prediction; try a smaller change")
    desc = change_dict(change)
    ends_on = {}
    if len(new.end):
        last = int(np.lexsort((tl.lane, -new.end))[0])
        ends_on = {"block": int(tl.block[last]), "group": int(tl.group[last]), "phase": tl.names[tl.phase[last]],
                   "k": int(tl.k[last])}
    mw = int(measured_wall_ns if measured_wall_ns is not None else tl.wall_ns)
    return WhatIf(mw, base.wall_ns, new.wall_ns, base.wall_ns - new.wall_ns, desc,
                  path_parts(tl, new) if len(new.end) else [], ends_on, path_parts(tl, base))


def path_parts(tl: Timeline, r: Replayed) -> list[dict]:
    """The critical path's time by part: each phase's slices on it, then the gaps by what they waited on."""
    rows = critical_rows(tl, r)
    if not rows:
        return []
    by_phase: dict[str, int] = {}
    by_wait: dict[str, int] = {}
    t = int(r.end[rows[0][0]])
    for row, b in rows:
        bgn = min(int(r.begin[row]), t)
        nm = tl.names[tl.phase[row]]
        by_phase[nm] = by_phase.get(nm, 0) + (t - bgn)
        t = bgn
        if b == 0:
            break
        src_end = int(r.end[row - 1]) if b == 1 else None
        if src_end is None:  # the release: its set's latest end
            s0 = tl.set_starts[tl.rel_set[row]]
            s1 = tl.set_starts[tl.rel_set[row] + 1] if tl.rel_set[row] + 1 < len(tl.set_starts) else len(tl.members)
            src_end = int(r.end[tl.members[s0:s1]].max())
        g = max(t - min(src_end, t), 0)
        by_wait[RELEASES[b]] = by_wait.get(RELEASES[b], 0) + g
        t = min(src_end, t)
    lead = t - min(int(r.begin.min()), int(tl.kernel_begin))
    out = [{"part": "phase", "name": k, "ns": v} for k, v in sorted(by_phase.items(), key=lambda x: -x[1])]
    out += [{"part": "wait", "name": k, "ns": v} for k, v in sorted(by_wait.items(), key=lambda x: -x[1]) if v > 0]
    if lead > 0:
        out.append({"part": "lead_in", "name": "lead_in", "ns": lead})
    return out


def fix_told(chosen, saving_ns: float, wall_ns: float) -> dict:
    """The WhatIf's ``fix`` for the warnings ``chosen`` ([(number, Finding)]) whose changes were replayed to save
    ``saving_ns``: each warning's stake and its replayed saving, and ``cut``, the reason (a key of CUTS) a stake
    is below the saving (None: the stake is the saving, to the timer's steps)."""
    rows = []
    for n, f in chosen:
        g = f.figures
        saved = g.get("replayed_saving_ns") if f.change is not None else None
        stake = float(f.impact_ns)
        cut = None
        if f.change is None:
            cut = "none"
        elif g.get("roofline_cap_ns") is not None:
            cut = "roofline"
        elif saved is not None and stake < float(saved) - 1:
            claimed = g.get("claimed_ns")
            cut = "shared" if claimed is not None and float(claimed) > stake else "claims"
        rows.append({"number": n, "kind": f.kind, "phase": f.phase, "stake_ns": stake,
                     "stake_share": stake / wall_ns if wall_ns else None,
                     "replayed_saving_ns": None if saved is None else float(saved), "cut": cut})
    return {"warnings": rows, "stake_ns": sum(r["stake_ns"] for r in rows), "saving_ns": float(saving_ns)}
