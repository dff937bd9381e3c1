"""What ``ktrace analyze A.bin B.bin`` and ``ktrace merge`` show across GPUs: the clocks and their
alignment, a summary per phase (which GPU finishes it last, the skews between GPUs) and a table of phase
instances with each GPU's end. Text (rich renderables) and Markdown; nothing here computes a figure.
"""

from __future__ import annotations

import math

from ..analysis.findings.find import format_ns
from ..analysis.figures.across_gpus import CrossGpu
from ..decoding.align import Alignment
from .safe_text import md_cell, md_text, printable

__all__ = ["alignment_lines", "cross_gpu_text", "cross_gpu_markdown", "uncertainty_notes", "MAX_INSTANCE_ROWS"]

MAX_INSTANCE_ROWS = 48  # longer tables show the first and last rows (the JSON has all)
_HEAD, _TAIL = 40, 8


def _ns(v) -> str:
    return "—" if _nan_or_none(v) else format_ns(v)


_HOW = {"offset": "by the clock offsets measured at capture", "start": "by each buffer's first record",
        "merged": "as ktrace merge placed them on one axis"}


def alignment_lines(al: Alignment) -> list[str]:
    """One line per GPU: label, buffer, measured offset, shift; then the notes."""
    given = any(c.offset_source.startswith(("--offset", "--clocks")) for c in al.clocks)
    how = ("by the clock offsets given" if given else
           _HOW.get(al.mode, f"by {al.mode}"))
    out = [f"{len(al.clocks)} GPU(s), aligned {how}" +
           (f"; offsets known to ±{format_ns(al.spread_ns)} (the measurement's spread): smaller skews are noise"
            if al.spread_ns is not None else "")]
    for c in al.clocks:
        off = ("offset not measured" if c.offset_to_reference_ns is None else
               f"clock {c.offset_to_reference_ns:+,} ns vs the reference"
               + (f" (spread {c.offset_spread_ns:,} ns)" if c.offset_spread_ns is not None else ""))
        if c.offset_source:
            off += f", from {c.offset_source}"
        out.append(printable(f"  {c.label}: {c.source}; {off}; shifted {c.shift_ns:+,} ns"))
    out += [printable(f"note: {n}") for n in al.notes]
    return out


def _phase_rows(x: CrossGpu) -> tuple[list[str], list[list[str]]]:
    head = ["phase", "inst.", "finished last: GPU n/inst. (distinct)", "end skew mean", "end skew max",
            "start skew mean", "start skew max"]
    rows = []
    for p in x.phases.rows():
        unsure = _within_uncertainty(x, p["max_end_skew_ns"])
        rows.append([p["phase"], str(p["instances"]),
                     f"{x.label(p['top_last_gpu'])}: {p['top_last_count']}/{p['instances']} "
                     f"({p['distinct_last_gpus']})" + (" (within clock uncertainty)" if unsure else ""),
                     _ns(p["mean_end_skew_ns"]), _ns(p["max_end_skew_ns"]), _ns(p["mean_start_skew_ns"]),
                     _ns(p["max_start_skew_ns"])])
    return head, rows


def _within_uncertainty(x: CrossGpu, skew_ns) -> bool:
    """A skew between GPUs smaller than how well their clocks' offsets are known: which GPU was last is noise."""
    spread = x.alignment.spread_ns
    return spread is not None and skew_ns is not None and not _nan_or_none(skew_ns) and abs(skew_ns) <= spread


def _nan_or_none(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def uncertainty_notes(x: CrossGpu) -> list[str]:
    """One line per phase whose GPUs end closer together than the clocks' offsets are known."""
    spread = x.alignment.spread_ns
    return [f"note: {p['phase']}: every end skew between GPUs (at most {_ns(p['max_end_skew_ns'])}) is within the "
            f"clocks' uncertainty (±{_ns(spread)}): which GPU finishes last is not known, only that they end together"
            for p in x.phases.rows() if _within_uncertainty(x, p["max_end_skew_ns"])]


def _instance_rows(x: CrossGpu) -> tuple[list[str], list[list[str]], int]:
    """Each instance: every GPU's end after the instance's first begin, the last GPU and its lead, skews."""
    gpus = len(x.alignment.clocks)
    ends: dict[tuple, dict[int, int]] = {}
    pg = x.per_gpu
    for ph, k, g, e in zip(pg.phase_index.tolist(), pg.k.tolist(), pg.gpu.tolist(), pg.end_ns.tolist()):
        ends.setdefault((ph, k), {})[g] = e
    head = ["phase", "k"] + [f"{x.label(g).split(' (')[0]} end" for g in range(gpus)] + \
        ["last", "lead", "end skew", "start skew"]
    rows = []
    t = x.instances
    for r in t.rows():
        mine = ends.get((r["phase_index"], r["k"]), {})
        cells = [_ns(mine[g] - r["begin_ns"]) if g in mine else "—" for g in range(gpus)]
        last = x.label(r["last_gpu"]).split(" (")[0] + (f" (tie x{r['tied_last_gpus']})" if r["tied_last_gpus"] > 1 else "")
        rows.append([r["phase"], str(r["k"]), *cells, last, _ns(r["last_lead_ns"]), _ns(r["end_skew_ns"]),
                     _ns(r["start_skew_ns"])])
    hidden = 0
    if len(rows) > MAX_INSTANCE_ROWS:
        hidden = len(rows) - _HEAD - _TAIL
        rows = rows[:_HEAD] + [["…"] * len(head)] + rows[-_TAIL:]
    return head, rows, hidden


def cross_gpu_text(x: CrossGpu) -> list:
    """Rich renderables: the alignment, the per-phase summary and the instance table."""
    from rich.table import Table
    from rich.text import Text

    out: list = [Text("across GPUs", style="bold"), *alignment_lines(x.alignment)]
    if not len(x.instances):
        return out + ["no phase slices in these buffers"]
    head, rows = _phase_rows(x)
    t = Table(title="phases across GPUs", title_justify="left")
    for h in head:
        t.add_column(h, justify="left" if h in ("phase",) or h.startswith("finished") else "right")
    for r in rows:
        t.add_row(*map(printable, r))
    out.append(t)
    out += [printable(n) for n in uncertainty_notes(x)]
    head, rows, hidden = _instance_rows(x)
    t = Table(title="phase instances: each GPU's end after the instance's first begin",
              caption=f"{hidden:,} rows not shown (--json has them)" if hidden else None, title_justify="left",
              caption_justify="left")
    for h in head:
        t.add_column(h, justify="left" if h in ("phase", "last") else "right")
    for r in rows:
        t.add_row(*map(printable, r))
    out.append(t)
    return out


def cross_gpu_markdown(x: CrossGpu) -> str:
    """The same as Markdown."""
    lines = ["### across GPUs", ""]
    lines += [f"- {md_text(ln.strip())}" for ln in alignment_lines(x.alignment)]
    if not len(x.instances):
        return printable("\n".join(lines + ["", "no phase slices in these buffers", ""]), keep_newlines=True)
    for title, (head, rows) in (("phases", _phase_rows(x)), ("instances", _instance_rows(x)[:2])):
        lines += ["", f"**{title}**", "", "| " + " | ".join(map(md_cell, head)) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(map(md_cell, r)) + " |" for r in rows]
        if title == "phases":
            lines += [""] + [f"- {md_text(n)}" for n in uncertainty_notes(x)]
    return printable("\n".join(lines) + "\n", keep_newlines=True)
