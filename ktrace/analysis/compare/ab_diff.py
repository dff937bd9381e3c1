"""``ktrace diff`` of the two captures of an A/B session: the kernel verdict from the session's paired timing.

The record (``ktrace.core.abrecord``; ``ktrace run --ab`` wrote it) timed the two unprofiled builds against each
other, interleaved; each capture's own ``control_us`` comes from a separate timing. So the diff's
``control_us`` becomes the record's: the paired means before and after, judged by the paired test ('paired';
an inconclusive one is not judged), and the headline leads with the test's verdict (``Diff.paired``).
"""

from __future__ import annotations

from dataclasses import replace

from ...core.abrecord import Found
from .catalog import KERNEL_FIGURES
from .diff_result import Change, Diff

__all__ = ["with_record"]


def with_record(d: Diff, found: Found) -> Diff:
    """``d`` with the record's paired timing as its kernel verdict (or, for a record named but unusable, with
    the note saying why)."""
    if found.record is None:
        return replace(d, notes=(found.note,) + tuple(d.notes)) if found.note else d
    t = found.test
    rec = found.record
    decided = t.change in ("slower", "faster")
    c = Change("control_us", KERNEL_FIGURES["control_us"].unit, t.before_mean_us, t.after_mean_us,
               (t.ci_us[1] - t.ci_us[0]) / 2, KERNEL_FIGURES["control_us"].lower_is_better, decided,
               "none" if t.change == "inconclusive" else "paired", t.p_value)
    kernel = list(d.kernel)
    at = next((i for i, k in enumerate(kernel) if k.figure == "control_us"), None)
    own = None
    if at is None:
        kernel.insert(1, c)
    else:
        own = kernel[at]
        kernel[at] = c
    order = " (given in the other order: read after -> before)" if found.flipped else ""
    note = (f"A/B record {rec.path}{order}: the two unprofiled builds timed against each other in one session, "
            f"{t.pairs} interleaved pairs; kernel.control_us is its means and the verdict its paired test")
    if own is not None and None not in (own.before, own.after):
        note += (f" (each capture's own control timing, a separate measurement: {own.before:,.2f} -> "
                 f"{own.after:,.2f} µs)")
    return replace(d, kernel=tuple(kernel), notes=(note,) + tuple(d.notes), paired=t, paired_record=str(rec.path))
