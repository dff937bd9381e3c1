"""A finding in plain words, short enough for the first screen: a headline of at most about 100 characters,
the one thing to do, and the evidence. Built from the finding's typed figures (``Finding.figures``), never by
cutting its message; the message stays the full account (``ktrace analyze --details``, the JSON).

    h = headline(finding, Vocabulary.of(analysis))
    h.text     # 'block 17 finishes compute last in 8 of 8 instances, 42.4 µs over the median block'
    h.action   # 'give block 17 less of the compute work, or split its items'

The words are docs/glossary.md's; a kernel with one warp group per block says "block" where the analysis says
"lane". A kind this module does not know reads as the message's first clause.
"""

from __future__ import annotations

import re

from ..model import notebook as nb
from . import kinds
from .kinds.base import first_clause
from .find import WHY_INFO, Finding, format_ns
from ...core.records import frozen

__all__ = ["Headline", "Vocabulary", "headline", "title_line", "roofline_line", "stake_text", "analysis_html", "HEADLINE_CHARS"]

HEADLINE_CHARS = 100  # a headline longer than this is cut at a word (the message has the rest)


@frozen
class Headline:
    """text: the claim in plain words; action: the one thing to do ('' when the finding asks nothing);
    evidence: what in the data shows it (the finding's evidence, as is)."""

    text: str
    action: str
    evidence: str


@frozen
class Vocabulary:
    """What the words depend on: whether blocks hold several warp groups (then "lane" means a block's warp
    group, and a lane is named "block B group G"), the kernel's wall (ns) and the warp groups' names."""

    several_groups: bool = False
    wall_ns: float = 0.0
    group_names: tuple = ()

    @classmethod
    def of(cls, a) -> "Vocabulary":
        """The vocabulary of an Analysis."""
        groups = {g for gs in a.phases.groups.tolist() for g in (gs or "").split(",") if g}
        names = a.launch.get("group_names")
        names = tuple(names.split(",")) if isinstance(names, str) and names else ()
        return cls(len(groups) > 1, float(a.kernel.wall_ns or 0), names)

    @property
    def unit(self) -> str:  # what one lane is called
        return "lane" if self.several_groups else "block"

    @property
    def warps(self) -> bool:
        """The lanes are single warps (a Proton or IKET trace read with --lanes warp): say "warp W"."""
        return bool(self.group_names) and all(_WARP.fullmatch(n) for n in self.group_names)

    def who(self, block, group=None) -> str:
        if block is None:
            return f"one {self.unit}"
        word = "warp" if self.warps else "group"
        return f"block {block}" + (f" {word} {group}" if self.several_groups and group is not None else "")

    def group(self, g) -> str:
        name = self.group_names[g] if isinstance(g, int) and 0 <= g < len(self.group_names) else ""
        if self.warps:
            return f"warp {g}"
        return f"warp group {g}" + (f" ({name})" if name else "")


_WARP = re.compile(r"warp \d+")
KERNEL_CHARS = 120  # the kernel's name on the first line, at most


def _t(ns) -> str:
    return format_ns(ns)


def _cut(text: str, limit: int = HEADLINE_CHARS) -> str:
    if len(text) <= limit:
        return text
    cut = text[:limit - 1].rsplit(" ", 1)[0].rstrip(",;:(")
    return cut + "…"


def headline(f: Finding, v: Vocabulary | None = None) -> Headline:
    """The finding in plain words: a headline of at most HEADLINE_CHARS characters, the one thing to do and
    the evidence. From the typed figures; the message's first clause where they lack what the kind needs."""
    v = v or Vocabulary()
    kind = kinds.get(f.kind)  # each kind's module builds its headline from its figures
    try:
        text, action = kind.headline(f, v) if kind else (first_clause(f.message), "")
    except (KeyError, TypeError, ValueError, IndexError, ZeroDivisionError):
        text, action = first_clause(f.message), ""
    return Headline(_cut(text), action, f.evidence)


def title_line(a) -> str:
    """The kernel and its launch shape in one line: blocks x warp groups, SMs and waves, phases, wall."""
    L, k = a.launch, a.kernel
    groups = L.get("num_groups", "?")
    names = L.get("group_names")
    unit = "warp" if isinstance(names, str) and names and all(_WARP.fullmatch(n) for n in names.split(",")) else \
        "warp group"
    shape = f"{L.get('num_blocks', '?')} blocks x {groups} {unit}{'' if groups == 1 else 's'}"
    o = a.occupancy
    if o and o.get("sms"):
        waves = a.slots.get("waves") if a.slots else o.get("waves")
        if waves is not None:
            w = f"{waves:.2f}".rstrip("0").rstrip(".")
            shape += f" on {o['sms']} SMs ({w} wave{'' if w == '1' else 's'})"
        else:
            shape += f" on {o['sms']} SMs"
    name = str(L.get("kernel", "kernel"))
    if len(name) > KERNEL_CHARS:  # a generated name (CuTe DSL mangles its arguments into it): its start says it
        name = name[:KERNEL_CHARS - 3] + "..."
    return f"{name}: {shape}, {k.phases} phase{'' if k.phases == 1 else 's'}, wall {_t(k.wall_ns)}"


def _size(n: float, unit: str) -> str:
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if n >= scale:
            return f"{n / scale:.3g} {prefix}{unit}"
    return f"{n:.3g} {unit}"


def roofline_line(a) -> str | None:
    """'work: 156 MB in 92.9 µs = 1.68 TB/s, 35% of the H200's peak 4.8 TB/s; the least wall it allows 32.4 µs'
    (analysis/model/roofline.py), None without work."""
    r = a.roofline
    if r is None:
        return None
    parts = []
    for amount, rate, peak, unit, rate_unit, scale in ((r.bytes, r.achieved_gbps, r.peak_gbps, "B", "B/s", 1e9),
                                                        (r.flops, r.achieved_tflops, r.peak_tflops, "FLOP", "FLOP/s",
                                                         1e12)):
        if amount is None or rate is None:
            continue
        text = f"{_size(amount, unit)} in {_t(r.wall_ns)} = {_size(rate * scale, rate_unit)}"
        if peak:
            who = f"the {r.device}'s" if r.peaks_source == "table" else "the given"
            text += f", {rate / peak:.0%} of {who} peak {_size(peak * scale, rate_unit)}"
        parts.append(text)
    floor = r.floor_ns
    tail = (f"; the least wall it allows {_t(floor)}" if floor is not None else
            "; the device's peaks are unknown (--peak-gbps, --peak-tflops)")
    return "work: " + "; ".join(parts) + tail


def stake_text(f: Finding) -> str:
    """'stake 338 µs (56% of the wall)': the kernel time a finding accounts for."""
    share = f" ({f.impact_share:.0%} of the wall)" if f.impact_share is not None else ""
    cap = ", capped by the roofline" if f.figures.get("roofline_cap_ns") is not None else ""
    m = f.figures.get("marginal")
    close = "; marginal: within the run-to-run noise of its threshold" if isinstance(m, dict) else ""
    why = getattr(f, "why_info", None)
    why = f"; info: {WHY_INFO[why]}" if why in WHY_INFO and why != "marginal" else ""
    return f"stake {_t(f.impact_ns)}{share}{cap}{close}{why}"


# -- the short report as HTML (the notebook's repr of an Analysis) -----------------------------------------

_PHASE_COLUMNS = (("phase", "phase", None), ("groups", "groups", None), ("instances", "inst.", None),
                  ("mean_max_dur_ns", "slowest", "ns"), ("mean_dur_ns", "mean", "ns"), ("imbalance", "imbalance", "x"),
                  ("mean_excess_ns", "excess", "ns"), ("mean_start_skew_ns", "start skew", "ns"),
                  ("mean_end_skew_ns", "end skew", "ns"), ("top_last_block", "last block", None))


def _phase_rows(a) -> tuple[list, list]:
    rows = a.phases.rows()
    have = [c for c in _PHASE_COLUMNS if rows and c[0] in rows[0]]
    out = []
    for r in rows:
        line = []
        for key, _, unit in have:
            v = r[key]
            line.append(nb.ns_text(v) if unit == "ns" else f"{v:.2f}x" if unit == "x" and v is not None else v)
        out.append(line)
    return [h for _, h, _ in have], out


def _findings_table(findings) -> str:
    rows = []
    for f in findings:
        share = f" ({f.impact_share:.1%} of wall)" if f.impact_share is not None else ""
        rows.append(f"<tr><td class='{nb.escape(f.severity)}'>{nb.escape(f.severity)}</td><td style='text-align:left'>"
                    f"{nb.escape(f.message)}</td><td style='text-align:left'>{nb.escape(f.evidence)}</td>"
                    f"<td>{nb.escape(nb.ns_text(f.impact_ns))}{nb.escape(share)}</td></tr>")
    return ("<table><tr><th>severity</th><th>finding</th><th>evidence</th><th>impact</th></tr>"
            + "".join(rows) + "</table>")


def analysis_html(a) -> str:
    """An Analysis as HTML, the short report's structure (``ktrace analyze``): the kernel's line, the clock
    (Proton traces), data-quality warnings, each warning's headline with its stake, action and evidence; then,
    folded, every finding in full and the per-phase table."""
    v = Vocabulary.of(a)
    parts = [f"<div class='ktrace'>{nb.STYLE}<p><b>{nb.escape(title_line(a))}</b><br><small>{nb.escape(str(a.source))} "
             f"({nb.escape(a.engine)})</small></p>"]
    L = a.launch
    if L.get("producer") == "proton":
        parts.append(f"<p>clock: {nb.escape(str(L.get('time_origin', '')))}</p>")
    if roofline_line(a):
        parts.append(f"<p>{nb.escape(roofline_line(a))}</p>")
    for w in a.data_quality.warnings:
        parts.append(f"<p class='warning'>data quality: {nb.escape(w)}</p>")
    warn = [f for f in a.findings if f.severity == "warning"]
    info = [f for f in a.findings if f.severity != "warning"]
    if not warn:
        parts.append("<p class='pass'>no warnings: nothing costs the kernel enough time to act on</p>")
    else:
        items = []
        for f in warn:
            h = headline(f, v)
            do = f"; do: {nb.escape(h.action)}" if h.action else ""
            items.append(f"<li><b class='warning'>{nb.escape(h.text)}</b><br>{nb.escape(stake_text(f))}{do}<br>"
                         f"<small>evidence: {nb.escape(h.evidence)}</small></li>")
        parts.append(f"<p><b>{len(warn)} warning{'' if len(warn) == 1 else 's'}</b> (by kernel time at stake)</p>"
                     "<ol>" + "".join(items) + "</ol>")
    if warn or info:
        parts.append(f"<details><summary>every finding in full ({len(warn)} warning(s), {len(info)} info)</summary>"
                     + _findings_table(warn + info) + "</details>")
    ph_head, ph_rows = _phase_rows(a)
    if ph_rows:
        parts.append("<details><summary>phases (means over instances)</summary>"
                     + nb.html_table(ph_head, ph_rows, "phases (means over instances)") + "</details>")
    parts.append("</div>")
    return "".join(parts)
