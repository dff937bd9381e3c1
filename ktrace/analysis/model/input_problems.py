"""Signs that a capture's buffer is broken or incomplete, as gates see them: the data-quality counts of its
launch facts (data_quality.py) by kind: records that could not be paired or read, lanes that filled up with
no guard, records the capacity guard dropped, a layout that barely matches. A gate refuses such a capture
(exit 2) unless they are accepted: a gate must not pass on part of the slices (docs/ci.md).
"""

from __future__ import annotations


from .data_quality import LAYOUT_WARN, UNPAIRED_KINDS, UNREADABLE_KINDS, data_quality
from ...core.records import frozen

__all__ = ["PROBLEM_KINDS", "Problem", "input_problems", "parse_allowed"]

PROBLEM_KINDS = {
    "unpaired_records": "a BEGIN never closed or an END never opened (a cut copy, a lane that filled up, a "
    "kernel that stopped early)",
    "unreadable_records": "records the layout cannot read: a tag that disagrees with its position, an unknown "
    "type or event, a timestamp that runs backwards",
    "full_lanes": "lanes whose last slot is written with no guard counting: records after it may be lost or "
    "written past the buffer",
    "records_lost": "records ktrace's capacity guard dropped",
    "layout_match": f"a layout that matches fewer than {LAYOUT_WARN:.0%} of the records",
    "records_written": "a buffer holding other than the records its sidecar says were written (a copy cut "
    "short, stale data, or another capture's sidecar)",
    "unread_events": "events of a Proton trace that could not be read (not complete events, or a damaged id, ts "
    "or dur)",
}
_FIX = {
    "unpaired_records": "copy the whole buffer, or capture again with more records per lane",
    "unreadable_records": "check the layout and the sidecar (--layout, --sidecar)",
    "full_lanes": "give each lane more records (a larger profiler buffer) and capture again",
    "records_lost": "give each lane more records (a larger profiler buffer) and capture again",
    "layout_match": "check --layout, --num-blocks and --num-groups: the file may not be this layout's buffer",
    "records_written": "copy the buffer again with its own sidecar",
    "unread_events": "copy the trace Proton wrote again",
}


@frozen
class Problem:
    """One kind of problem (PROBLEM_KINDS): how many records or lanes, in words, and how to fix it."""

    kind: str
    count: float
    text: str
    fix: str


def input_problems(launch: dict) -> tuple[Problem, ...]:
    """The problems a capture's launch facts (``Analysis.launch``) show, in PROBLEM_KINDS order; none for a
    trace without launch facts."""
    dq = data_quality(launch)
    if not dq.known:
        return ()

    def kinds(names) -> str:
        return ", ".join(f"{k} {dq.anomalies[k]:,}" for k in names if dq.anomalies.get(k))

    found = {
        "unpaired_records": (dq.unpaired_records,
                             f"{dq.unpaired_records:,} unpaired records ({kinds(UNPAIRED_KINDS)})"),
        "unreadable_records": (dq.unreadable_records,
                               f"{dq.unreadable_records:,} unreadable records ({kinds(UNREADABLE_KINDS)})"),
        "full_lanes": (dq.full_lanes, f"{dq.full_lanes:,} full lanes (records after them may be lost)"),
        "records_lost": (dq.lost_records or 0, f"{dq.lost_records or 0:,} records lost (capacity guard)"),
        "layout_match": (dq.layout_match if dq.layout_match is not None and dq.layout_match < LAYOUT_WARN
                         and dq.records else 0,
                         f"layout {dq.layout} matches only {dq.layout_match or 0:.1%} of the records"),
        "records_written": (abs(dq.records - dq.records_written) if dq.records_written is not None else 0,
                            f"{dq.records or 0:,} records where the sidecar says {dq.records_written or 0:,} were "
                            "written"),
        "unread_events": (dq.unread_events, f"{dq.unread_events:,} events of the Proton trace not read"),
    }
    return tuple(Problem(kind, n, text, _FIX[kind]) for kind, (n, text) in found.items() if n)


def parse_allowed(value, where: str) -> frozenset:
    """The kinds a rules file's ``allow_anomalies`` or ``--allow-anomalies`` accepts: true / 'all' (every
    kind), a list or comma-separated kinds, false / empty (none). ValueError saying what is wrong."""
    if value is True or value == "all":
        return frozenset(PROBLEM_KINDS)
    if value is False or value is None or value == "":
        return frozenset()
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)) or not all(isinstance(x, str) for x in items):
        raise ValueError(f"{where}: give true, or a list of kinds: {', '.join(PROBLEM_KINDS)}")
    kinds = {x.strip() for x in items if x.strip()}
    unknown = sorted(kinds - set(PROBLEM_KINDS))
    if unknown:
        raise ValueError(f"{where}: unknown kind(s) {', '.join(map(repr, unknown))}; kinds: "
                         f"{', '.join(PROBLEM_KINDS)} (or true, or 'all', for every kind)")
    return frozenset(kinds)
