"""What ``ktrace run --ab`` prints about its A/B session: the pairs, the paired test, each side's overhead.

Nothing here computes a figure; ``ktrace.core.paired`` and ``ktrace.core.abrecord`` do.
"""

from __future__ import annotations

from ..core.abrecord import Record, placement
from ..analysis.compare.diff_result import paired_line
from .safe_text import printable

__all__ = ["ab_lines"]


def _overhead(side: dict) -> str:
    o = side.get("profiler_overhead") or {}
    ratio, us = o.get("overhead_ratio"), o.get("overhead_us")
    if not isinstance(ratio, (int, float)) or not isinstance(us, (int, float)):
        return "not timed"
    return f"x{ratio:.4f} ({us:+,.2f} µs)"


def _buffers(d: dict) -> str:
    p = placement(d)
    if p is None:
        why = (d.get("timing") or {}).get("buffers_note") or "each variant on its own buffers"
        return f"buffers: each variant on its own ({why}); where they lie is part of the difference"
    own = (d.get("timing") or {}).get("own_contents") or []
    data = (f" (each with its own contents of argument(s) {', '.join(str(i) for i in own)}, copied in before its "
            "launch)") if own else ""
    return (f"buffers: both variants of each pair on the same ones{data}, before's and after's in turn; both ran "
            f"{p[0]:,.2f} µs on before's, {p[1]:,.2f} µs on after's ({p[1] / p[0] - 1:+.2%}: where the buffers lie, "
            "cancelled in every pair)")


def ab_lines(rec: Record) -> list[str]:
    """The session in a few lines: what ran, the times, the paired test and its verdict, the overheads."""
    d, t = rec.data, rec.test
    b, a, timing, dev = d["before"], d["after"], d["timing"], d.get("device") or {}
    where = dev.get("name", "this GPU") + (f" ({dev['pci_bus_id']})" if dev.get("pci_bus_id") else "")
    lines = [
        f"== A/B: {b.get('label', b['capture'])} -> {a.get('label', a['capture'])}",
        f"the unprofiled builds timed against each other on {where}: {t.pairs} pairs in alternating order "
        f"(A B, B A, ...) after {timing.get('warmup_pairs', '?')} warm-up pairs, a {timing.get('spin_us', 0):g} µs "
        "busy kernel before each launch, one process",
        f"before {t.before_mean_us:,.2f} µs, after {t.after_mean_us:,.2f} µs (means; medians "
        f"{t.before_median_us:,.2f} and {t.after_median_us:,.2f})",
        f"after - before, per pair: mean {t.mean_diff_us:+,.3f} µs, {t.confidence:.0%} interval {t.ci_us[0]:+,.3f} to "
        f"{t.ci_us[1]:+,.3f} µs ({t.interval_text}); t = {t.t:+.2f}, {t.dof} degrees of freedom, {t.p_text}; median "
        f"{t.median_diff_us:+,.3f} µs, {t.median_ci_us[0]:+,.3f} to {t.median_ci_us[1]:+,.3f} (sign test)",
        _buffers(d),
        f"verdict: {paired_line(t)}",
        f"profiler overhead (each side's instrumented build against its own control, interleaved): before "
        f"{_overhead(b)}, after {_overhead(a)}",
        f"record: {rec.path} (captures {rec.capture_path('before')}, {rec.capture_path('after')})",
    ]
    return [printable(x) for x in lines]
