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
        p, b = (p, block) if isinstance(p, str) else p
        who = f" of block {b}" if b is not None else ""
        parts.append(f"{p}'s slices{who} longer than their instance's median cut to it")
    if change.get("no_late_start"):
        parts.append(f"no late start{of} (late lanes begin at their group's median first begin"
                     + (", and wait no longer than the median before every later instance)" if of else ")"))
    for b, p in change.get("start_on_time", []):
        who = f"block {b}" if b is not None else "any block"
        parts.append(f"no late start of {who}" + (f" in {p}" if p is not None else "") + " (before every instance, "
                     "no longer than the instance's median)")
    if "barrier_cost_ns" in change:
        own = "own release (its median; a later lane keeps its excess)" if change.get("barrier_own_only") \
            else "release"
        parts.append(f"every barrier's {own} at most {format_ns(change['barrier_cost_ns'])}")
    for p in change.get("spread", []):
        parts.append(f"{p} spread over every lane of its warp groups")
    for p, f in change.get("speedup", []):
        parts.append(f"{p} {f:g}x as fast")
    if "blocks" in change:
        per = f", {change['per_sm']} resident per SM" if "per_sm" in change else ""
        parts.append(f"the same work in {change['blocks']:,} equal blocks{per}")
    for g in change.get("balance_lanes", []):
        parts.append(f"{'every warp group' if g is None else f'warp group {g}'}'s lanes balanced (each the mean "
                     "total over the phases, no item cut)")
    for p, q in change.get("no_gap", []):
        parts.append(f"no untimed work between {p} and {q}")
    for g, f in change.get("group_speedup", []):
        parts.append(f"warp group {g} {f:.3g}x as fast")
    blocks = change.get("block_speedup", [])
    for b, f in blocks[:8]:
        parts.append(f"block {b} {f:.3g}x as fast")
    if len(blocks) > 8:
        parts.append(f"{len(blocks) - 8:,} more blocks as fast")
    return "; ".join(parts) or "nothing changed"


def _path(parts: list, wall: float) -> str:
    out = []
    for x in parts:
        name = x["name"] if x["part"] == "phase" else _WAITS.get(x["name"], x["name"])  # a phase: the capture's name
        out.append(f"{name} {format_ns(x['ns'])} ({x['ns'] / wall:.0%})" if wall else name)
    return ", ".join(out)


def _fix_lines(fix: dict | None, saving: float) -> list[str]:
    """The warnings a --fix replayed: each one's stake, and what cut a stake below the saving."""
    from ..analysis.replay.whatif import CUTS

    if not fix:
        return []
    out = []
    for r in fix["warnings"]:
        where = f", {r['phase']}" if r["phase"] is not None else ""
        line = f"  fixes warning {r['number']} ({r['kind']}{where}): stake {format_ns(r['stake_ns'])}"
        if r["cut"] is None:
            line += " (the saving of its change" + (")" if len(fix["warnings"]) == 1 else " alone)")
        else:
            line += f"; below its change's saving ({format_ns(r['replayed_saving_ns'] or 0)}) by " \
                if r["replayed_saving_ns"] is not None else "; "
            line += CUTS[r["cut"]]
        out.append(line)
    return out


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
             (f"critical path before: {_path(w['path_before'], r)}", "  ", "    ")]
    if e:
        lines += [(f"critical path after:  {_path(w['path'], p)}", "  ", "    "),
                  (f"ends on block {e['block']} group {e['group']} ({e['phase']}, instance {e['k']})", "  ", "    ")]
    else:  # a resized grid: blocks scheduled into the measured slots, no slice of the capture's own
        lines.append(("(a resized grid: blocks scheduled into the measured slots; no critical path of slices)", "  ",
                      "    "))
    lines += [(x[2:], "  ", "    ") for x in _fix_lines(w.get("fix"), s)]
    return "\n".join(line for text, first, indent in lines for line in Prose(text, first, indent).lines(width))
