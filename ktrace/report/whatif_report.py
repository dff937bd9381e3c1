"""The text of ``ktrace whatif``: the measured wall, the predicted one, the saving and the critical path after."""

from __future__ import annotations

from ..analysis.findings.verdict import format_ns

__all__ = ["whatif_text", "change_text"]

_WAITS = {"grid": "grid barrier waits", "cluster": "cluster barrier waits", "group": "hand-offs from another warp "
          "group", "slot": "waits for an SM slot", "lane": "gaps on the path's lanes", "start": "launch",
          "lead_in": "lead-in before the path's first slice"}


def change_text(change: dict) -> str:
    """The change in words ('compute balanced (every lane the mean); barrier release at most 0 ns')."""
    parts = []
    for p in change.get("balance", []):
        parts.append(f"{p} balanced (every lane gets the mean)")
    block = change.get("block")
    of = f" of block {block}" if block is not None else ""
    for p in change.get("straggler_to_median", []):
        parts.append(f"{p}'s slices{of} longer than their instance's median cut to it")
    if change.get("no_late_start"):
        parts.append(f"no late start{of} (late lanes begin at their group's median first begin)")
    if "barrier_cost_ns" in change:
        parts.append(f"every barrier's release at most {format_ns(change['barrier_cost_ns'])}")
    for p in change.get("spread", []):
        parts.append(f"{p} spread over every lane of its warp groups")
    for p, f in change.get("speedup", []):
        parts.append(f"{p} {f:g}x as fast")
    return "; ".join(parts) or "nothing changed"


def _path(parts: list, wall: float) -> str:
    out = []
    for x in parts:
        name = x["name"] if x["part"] == "phase" else _WAITS.get(x["name"], x["name"])  # a phase: the capture's name
        out.append(f"{name} {format_ns(x['ns'])} ({x['ns'] / wall:.0%})" if wall else name)
    return ", ".join(out)


def whatif_text(name: str, w: dict, width: int | None = None) -> str:
    """The report of a WhatIf (its to_dict()) for the capture ``name``, each line wrapped at ``width`` columns
    (default: the terminal's, $COLUMNS; 100 where there is none) under its own indent, never cut."""
    import shutil

    from .analysis_report import Prose
    from .plain_text import NO_TERMINAL_WIDTH

    width = width or shutil.get_terminal_size((NO_TERMINAL_WIDTH, 24)).columns
    m, r, p, s = (w[k] for k in ("measured_wall_ns", "replayed_wall_ns", "predicted_wall_ns", "saving_ns"))
    e = w["ends_on"]
    lines = [(f"{name}: what if {change_text(w['change'])}", "", "  "),
             (f"measured wall    {format_ns(m)}", "  ", "    "),
             (f"replayed wall    {format_ns(r)} (the timeline replayed as measured"
              + (")" if r == m else f": {format_ns(r - m)} off the measured wall)"), "  ", "    "),
             (f"predicted wall   {format_ns(p)}", "  ", "    "),
             (f"saving           {format_ns(s)} ({s / r:.1%} of the wall)" if r else
              f"saving           {format_ns(s)}", "  ", "    "),
             (f"critical path before: {_path(w['path_before'], r)}", "  ", "    "),
             (f"critical path after:  {_path(w['path'], p)}", "  ", "    "),
             (f"ends on block {e['block']} group {e['group']} ({e['phase']}, instance {e['k']})", "  ", "    ")]
    return "\n".join(line for text, first, indent in lines for line in Prose(text, first, indent).lines(width))
