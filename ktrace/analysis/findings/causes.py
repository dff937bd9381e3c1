"""One cause, one finding; impacts that are disjoint parts of the wall.

Verdicts that name one cause (``Verdict.cause``: "block 17", "waves", "pipeline 1") are one finding: the
verdict that says most about the cause leads (a straggler before the imbalance it makes, the waits on it and
the tail it leaves) and the others are listed as its consequences. Each finding then takes, in order of the
time it claims, its claims on the critical path's steps that no finding before it took: the impacts are
disjoint parts of the wall, so the warnings' impacts add up to at most the wall and the rest is unexplained.
"""

from __future__ import annotations

import numpy as np

from . import kinds
from .kinds.base import claim_words
from .verdict import Verdict, fmt as _fmt

__all__ = ["merge", "LEAD_ORDER"]

LEAD_ORDER = kinds.LEAD_ORDER  # which verdict leads a cause's finding, first to last

MAX_CONSEQUENCES = 4  # listed in the message; figures.consequences holds them all


def _kind(v: Verdict):
    return kinds.get(v.kind)


def _rank(v: Verdict) -> tuple:
    """Which verdict of one cause leads: the kind's rank (its module's ``lead``), then the larger impact."""
    k = _kind(v)
    return (k.rank_of(v) if k else len(kinds.KINDS), -float(v.impact_ns))


def _short(v: Verdict) -> str:
    k = _kind(v)
    return k.short(v) if k else claim_words(v)


def _consequences(rest: list[Verdict]) -> str:
    """The consequences in a few words each: each said once, at most ``MAX_CONSEQUENCES``, the rest counted."""
    shorts: list = []
    grouped: dict = {}  # a kind's consequences that merge over phases (kinds' grouped_short): key -> phases
    renders: dict = {}
    for m in rest:
        k = _kind(m)
        got = k.grouped_short(m) if k is not None and m.phase is not None else None
        if got is not None:
            key, render = got
            if key in grouped:
                grouped[key].append(m.phase)
                continue
            grouped[key], renders[key] = [m.phase], render
            shorts.append(key)
            continue
        t = _short(m)
        if t not in shorts:
            shorts.append(t)
    shorts = [renders[t](grouped[t]) if isinstance(t, tuple) and t in grouped else t for t in shorts]
    more = len(shorts) - MAX_CONSEQUENCES
    text = "; ".join(shorts[:MAX_CONSEQUENCES])
    return text + (f"; and {more} more (figures.consequences)" if more > 0 else "")


def _claims(v: Verdict, steps: int) -> np.ndarray:
    c = v.claims
    return np.zeros(steps) if c is None else np.asarray(c, np.float64)


def merge(verdicts: list[Verdict], step_ns: np.ndarray, bound=None) -> list[tuple[Verdict, float, float]]:
    """(finding's lead verdict with its consequences, disjoint impact ns, impact claimed before the
    disjoint split) per cause, for verdicts over a critical path of steps lasting ``step_ns``. ``bound(verdict)``:
    the most removing a finding's cause saves (its replayed saving; None: no bound): the findings claim their
    steps in the order of their claims so bounded, so a finding whose claims its replay does not back (a barrier
    whose wait is a late starter's) does not take a step before the finding whose cause it is."""
    steps = len(step_ns)
    groups: dict[str, list[Verdict]] = {}
    alone: list[list[Verdict]] = []
    for v in verdicts:
        if v.cause:
            groups.setdefault(v.cause, []).append(v)
        else:
            alone.append([v])
    # A finding alone that its kind says is another cause's (kinds' joins: a tail a block leaves, the lanes').
    for key in [k for k, m in groups.items() if len(m) == 1]:
        kind = _kind(groups[key][0])
        to = kind.joins(groups[key][0], groups) if kind is not None else None
        if to is not None and to in groups and to != key:
            groups[to].append(groups.pop(key)[0])
    waits = [(v, w) for v in verdicts for w in [_kind(v).waits_on(v) if _kind(v) is not None else None]
             if w is not None]  # waits on one block (kinds' waits_on)
    merged = []
    position = {id(v): i for i, v in enumerate(verdicts)}
    for members in list(groups.values()) + alone:
        members = sorted(members, key=_rank)
        # Several verdicts of the lead's kind and rank (the releases of several barriers) are one cost: the first
        # in the kernel leads, not the largest by a hair (same-input runs would name a different one each time).
        same = [m for m in members if m.kind == members[0].kind and type(m.figures) is type(members[0].figures)
                and _rank(m)[0] == _rank(members[0])[0]]
        if len(same) > 1:
            first = min(same, key=lambda m: position[id(m)])
            members = [first] + [m for m in members if m is not first]
        lead = members[0]
        # One cause's cost is its largest expression: the straggler's lead, the imbalance it makes and the tail it
        # leaves are the same time seen at different places on the path, so they are not added up.
        # Verdicts of one kind (the releases of several barriers) are distinct parts of the path: their claims
        # add up (elementwise max).
        by_kind: dict[str, np.ndarray] = {}
        for m in members:
            c = _claims(m, steps)
            by_kind[m.kind] = np.maximum(by_kind[m.kind], c) if m.kind in by_kind else c
        claims = max(by_kind.values(), key=lambda c: float(c.sum()))
        figs = lead.figures
        rest = members[1:]
        message = lead.message
        waited_at = []
        for w, (block, at) in waits:
            if lead.cause == f"block {block}" and w not in members:
                message += (f"; the others wait for it after {at['phase']} ({_fmt(at['mean_ns'])} on average, "
                            "a separate finding)")
                waited_at.append(dict(at))
        if waited_at:
            figs = figs.with_(waited_at=list(figs.get("waited_at", [])) + waited_at)
        if rest:
            figs = figs.with_(consequences=[{"kind": m.kind, "phase": m.phase, "message": m.message,
                                             "impact_ns": float(m.impact_ns)} for m in rest])
            message += "; the same cause shows as: " + _consequences(rest)
        if lead.claims is None and all(m.claims is None for m in members):
            raw = float(lead.impact_ns)
            warn = False
        else:
            raw = float(claims.sum())
            warn = any(m.warn for m in members)
        v = Verdict(lead.kind, lead.phase, message, lead.evidence, raw, warn, figs, claims, lead.cause)
        merged.append((v, raw, lead.claims is None and all(m.claims is None for m in members)))
    # Disjoint impacts: the largest claims first, each taking what is left of the steps.
    left = np.asarray(step_ns, np.float64).copy()
    # Findings that may warn take their claims before information does; then by the time they claim.
    def _bounded(v: Verdict, raw: float) -> float:
        b = bound(v) if bound is not None else None
        return raw if b is None else min(raw, b)

    order = sorted(range(len(merged)), key=lambda i: (not merged[i][0].warn, -_bounded(merged[i][0], merged[i][1]),
                                                      _rank(merged[i][0])[0], merged[i][0].kind,
                                                      str(merged[i][0].phase)))
    out = [None] * len(merged)
    for i in order:
        v, raw, unclaimed = merged[i]
        if unclaimed or not steps:
            out[i] = (v, raw if unclaimed else 0.0, raw)
            continue
        got = np.minimum(v.claims, left)
        left -= got
        out[i] = (v, float(got.sum()), raw)
    return out
