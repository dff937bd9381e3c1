"""What every finding kind declares (``Kind``), the typed figures it stores (``KindFigures``) and the helpers
its parts share: the time a finding concerns on the instances' table, the slices it names, a claim's few words.

A kind's figures are a frozen dataclass: the fields in the order the JSON shows them, the optional ones left
out of ``to_dict`` while they hold their default (``optional()``). The figures that finding-making adds to any
kind (a tiny phase, the waits on a lead's block, the consequences, the replayed saving, the claim before the
disjoint split) are the base class's, written after the kind's own. ``figures["x"]`` and ``figures.get("x")``
read the JSON's view (a read-only mapping), so a reader of a finding's dict reads the dataclass alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field, fields, replace
from typing import Callable

import numpy as np
from ....core.records import frozen

__all__ = ["KindFigures", "Kind", "optional", "first_clause", "claim_words", "extent", "one_instance",
           "instance_keys", "no_span", "no_roles", "no_change", "stake_checks", "no_detect", "no_link", "no_hook", "Scope", "ok",
           "fixed_rank",
           "last_block_extent"]

_OPTIONAL = "optional"


def optional(default=None):
    """A figure left out of the JSON while it holds ``default``."""
    return field(default=default, metadata={_OPTIONAL: True})


@frozen(kw_only=True)
class KindFigures(Mapping):
    """The numbers behind a finding (units in the names). Subclasses: one per kind (or per basis of a kind)."""

    tiny_phase: bool = optional(False)  # the phase's slowest slice is under MIN_PHASE_TICKS: never a warning
    waited_at: tuple = optional(())  # the waits on the lead's block after other phases (causes.merge)
    consequences: tuple = optional(())  # the verdicts of the same cause after the lead (causes.merge)
    replayed_saving_ns: float | None = optional(None)  # what removing the cause saves, replayed (stakes)
    roofline_cap_ns: float | None = optional(None)  # the stake's bound: the wall less the work at the peaks
    marginal: dict | None = optional(None)  # the threshold a warning cleared by less than the noise (margins)
    claimed_ns: float | None = optional(None)  # the impact before the findings ahead of it took their share

    _TAIL = ("tiny_phase", "waited_at", "consequences", "replayed_saving_ns", "roofline_cap_ns", "marginal",
             "claimed_ns")

    def _present(self):
        own = [f for f in fields(self) if f.name not in self._TAIL]
        tail = [f for f in fields(self) if f.name in self._TAIL]
        for f in own + sorted(tail, key=lambda f: self._TAIL.index(f.name)):
            v = getattr(self, f.name)
            if f.metadata.get(_OPTIONAL) and (v is f.default or (not isinstance(v, np.ndarray) and v == f.default
                                                                   and type(v) is type(f.default))):
                continue
            yield f.name, v

    def to_dict(self) -> dict:
        """The JSON's figures: the kind's own in order, then what finding-making added."""
        return {k: (list(v) if k in ("waited_at", "consequences") else v) for k, v in self._present()}

    def with_(self, **changes) -> "KindFigures":
        return replace(self, **changes)

    # the read-only mapping view (the JSON's keys)
    def __getitem__(self, key):
        for k, v in self._present():
            if k == key:
                return list(v) if k in ("waited_at", "consequences") else v
        raise KeyError(key)

    def __iter__(self):
        return (k for k, _ in self._present())

    def __len__(self) -> int:
        return sum(1 for _ in self._present())

    __hash__ = None  # figures hold lists (segments, idle lanes): not hashable


@frozen(eq=False)
class Scope:
    """Where a detector looks (``Kind.detect(ctx, scope)``, one signature for every kind): one phase (``phase``:
    its row of the phases table; ``inst``: its instances; ``on_path``: which of them are on the critical path;
    ``lined_up``: whether they line up across lanes), the launch (no phase), or, last, the verdicts the others
    made (``verdicts``: for a kind that reads them)."""

    phase: dict | None = None
    inst: object = None
    on_path: object = None
    lined_up: bool = False
    verdicts: tuple | None = None

    @property
    def launch(self) -> bool:
        return self.phase is None and self.verdicts is None


def no_detect(ctx, scope) -> list:
    """A kind another kind's detector makes (one pass over the same table): nothing of its own."""
    return []


def no_link(ctx, scope, v, found) -> None:
    """A verdict whose cause no other verdict of its phase decides."""


def no_hook(*args) -> None:
    """A part a kind does not use (grouped_short, joins, waits_on): None."""


def stake_checks(family: str = "kernel_wall", share: str | None = None) -> Callable:
    """A kind's checks: its stake moves as ``family`` does between runs (the kernel's wall, or the waits) and must
    clear the impact floor (and ``share``, a threshold's share of the wall, where given)."""
    def checks(th, tick: float, wall: float):
        floor = max(th.min_impact * wall, th.min_ticks * tick)
        return family, max(floor, getattr(th, share) * wall) if share else floor
    return checks


def no_change(v) -> None:
    """No change the replay can make removes the cause: the stake is the critical path's claim alone."""
    return None


@frozen
class Kind:
    """One finding kind, every part of it (a registry line in kinds/__init__.py; a test checks them all).

    name: the kind in the JSON; detects: what it claims, in a sentence; figures: its figures' dataclass(es);
    rank: which verdict of one cause leads its finding (smaller first; causes.merge), ``lead(verdict)`` the
    rank of one verdict where it depends on its figures (None: ``rank``; ``fixed_rank`` for a kind whose
    verdicts all rank alike); short(verdict): its few words as a consequence in
    another finding's message; headline(finding, vocabulary): (text, action) for the short report;
    span(finding, figures, mine): the time the annotated trace draws for it (None: the phase's extent, else the
    kernel); roles(finding, figures, mine, tick_ns): ((phase, block, group, k), role) of the slices it names in
    the trace; diff: the per-phase figure ``ktrace diff`` must see move before it calls the finding new or
    resolved (None: its impact alone); change(verdict): the ``Change`` whose replay removes its cause (None, or
    ``no_change``: none; its stake is then the critical path's claim alone); checks(thresholds, tick_ns,
    wall_ns): (the noise family its stake moves with, the floor it must clear by more than that noise;
    default ``stake_checks()``: the kernel's wall, the impact floor); detect(ctx, scope): its verdicts in a
    ``Scope`` (a phase, the launch, or the verdicts so far; ``no_detect`` for a kind another's detector makes);
    link(ctx, scope, verdict, found): where its verdict's cause is another verdict's of the same phase (the
    imbalance a straggler makes), it says so by setting ``verdict.cause`` (``no_link``: never);
    grouped_short(verdict): (key, render(phases)) where its few words as a consequence merge over phases (the same
    lanes idle in several phases: one entry naming them); joins(verdict, causes): the cause a finding alone of
    this kind joins instead (a tail left by a block joins the lanes' unequal totals); waits_on(verdict): (block,
    {phase, next_phase, mean_ns}) where its verdict is a wait on one block (the block's finding says so); each
    ``no_hook`` where unused."""

    name: str
    detects: str
    figures: tuple
    rank: float
    lead: Callable
    short: Callable
    headline: Callable
    span: Callable
    roles: Callable
    diff: str | None
    change: Callable = no_change
    checks: Callable = stake_checks()
    detect: Callable = no_detect
    link: Callable = no_link
    grouped_short: Callable = no_hook
    joins: Callable = no_hook
    waits_on: Callable = no_hook

    def change_of(self, v):
        """The ``Change`` (analysis/replay/change.py) that removes verdict ``v``'s cause: its stake is that change's
        replayed saving; None where the replay has no change for it."""
        return self.change(v)

    def rank_of(self, v) -> float:
        r = self.lead(v)
        return self.rank if r is None else r


SHORT_CHARS = 90  # a consequence's words in the lead's message


def first_clause(message: str) -> str:
    return message.split("; ")[0]


def claim_words(v) -> str:
    """The claim of a verdict's message, not its advice, in whole words up to SHORT_CHARS."""
    text = v.message.split(": ", 1)[-1].split("; ", 1)[0]
    if len(text) <= SHORT_CHARS:
        return text
    cut = text[:SHORT_CHARS - 3].rsplit(" ", 1)[0].rstrip(",;:(")  # whole words only
    return cut + "..."


def extent(inst, mask) -> tuple[int, int] | None:
    """First begin to last end of the instances in mask."""
    if not mask.any():
        return None
    return int(inst.begin_ns[mask].min()), int(inst.end_ns[mask].max())


def one_instance(inst, mask, score) -> tuple[int, int] | None:
    """The instance in mask with the largest score."""
    if not mask.any():
        return None
    i = np.flatnonzero(mask)[int(np.argmax(np.asarray(score)[mask]))]
    return int(inst.begin_ns[i]), int(inst.end_ns[i])


def instance_keys(inst, mask, role: str) -> list:
    """((phase, last block, last group, k), role) of the instances in mask: their last finishers' slices."""
    return [((inst.phase[i], int(inst.last_block[i]), int(inst.last_group[i]), int(inst.k[i])), role)
            for i in np.flatnonzero(mask).tolist()]  # a loop over the named instances


def fixed_rank(v) -> None:
    """Every verdict of the kind ranks at the kind's rank."""
    return None


def last_block_extent(f, fig, mine):
    """The instances of the phase that the finding's block finished last, first begin to last end."""
    b = f.figures.get("block")
    return None if b is None else extent(fig.instances, mine & (fig.instances.last_block == b))


def no_span(f, fig, mine):
    return None


def no_roles(f, fig, mine, tick_ns) -> list:
    return []


def ok(x) -> bool:
    """A figure that is there: not None, not NaN."""
    return x is not None and not (isinstance(x, float) and np.isnan(x))
