"""What removing a finding's cause would save, replayed on the timeline (analysis/replay/): the bound on its stake.

A finding's impact is its disjoint share of the critical path (causes.py); where its kind names the change that
removes its cause (``Kind.change``: a ``Change`` of the one vocabulary ``ktrace whatif`` uses), the impact is at
most what replaying that change saves, so no finding promises more than the change it advises could recover,
and ``ktrace whatif --fix N`` replays the same change (docs/analysis-schema.md, "Cause model and replay", states
each kind's change).

Where the work is known (analysis/model/roofline.py), no stake goes below the roofline: ``room`` is the wall less
the work's time at the device's peaks, and every impact is at most that.
"""

from __future__ import annotations

from ..model.roofline import roofline_of
from ..replay.change import Change, timed_waits
from ..replay.replay import Timeline, change_rounds, replay, timeline
from ..replay.whatif import predict
from . import kinds

__all__ = ["Stakes", "timeline_of_figures"]


def timeline_of_figures(fig) -> Timeline | None:
    """The replay's Timeline of the figures' top-level slices; None where only a sample of them was read."""
    top = getattr(fig, "top", None)
    if top is None or len(top.lane) < 2:
        return None
    n = int(max(top.phase_index.max(), fig.phases.phase_index.max() if len(fig.phases) else 0)) + 1
    names = [str(i) for i in range(n)]
    for i, nm in zip(fig.phases.phase_index.tolist(), fig.phases.phase.tolist()):
        names[i] = nm
    return timeline(top, tuple(names), fig)


class Stakes:
    """The replayed saving of each finding's cause, for the figures ``fig``."""

    def __init__(self, fig) -> None:
        self.fig = fig
        self.tl = timeline_of_figures(fig)
        base = replay(self.tl) if self.tl is not None else None
        self.base = base.wall_ns if base is not None else None
        self._timed_waits = self.tl is not None and timed_waits(self.tl)
        self._max_rounds = change_rounds(base) if base is not None else 0
        self._cache: dict = {}
        wall = float(fig.kernel.wall_ns or 0)
        self.roofline = roofline_of(getattr(fig, "launch", None) or {}, wall)
        floor = self.roofline.floor_ns if self.roofline is not None else None
        # the most any change can save: the wall down to the work at the device's peaks (None: no bound known)
        self.room = max(wall - floor, 0.0) if floor is not None else None

    def saving(self, v) -> float | None:
        """The ns removing the cause of verdict ``v`` saves; None where the replay has no change for it."""
        if self.tl is None or self.base is None:
            return None
        ch = self.change(v)
        if ch is None:
            return None
        if ch not in self._cache:
            try:
                r = predict(self.tl, ch, self._max_rounds)
            except ValueError:  # a change the timeline cannot take (a resized grid without SM ids): no bound
                r = None
            # a change whose replay has not settled gives no bound: the stake stays as the critical path says
            self._cache[ch] = None if r is None or not r.settled else float(max(self.base - r.wall_ns, 0))
        return self._cache[ch]

    def change(self, v) -> Change | None:
        """What removing the cause of verdict ``v`` changes (its kind's ``change``); None where the kind names no
        change or the change names a phase the timeline lacks."""
        kind = kinds.get(v.kind)
        ch = kind.change_of(v) if kind is not None else None
        if ch is None or self.tl is None or self._timed_waits:
            return None
        if not ch.phases() <= set(self.tl.names):  # a phase it names that the timeline lacks: no change
            return None
        return ch
