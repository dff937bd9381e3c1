"""What the figures are missing: records lost, unpaired, overwritten or unreadable, read from the launch
facts (the launch slice's args, written by ``export.writer.launch_facts``; a buffer analyzed with numpy has
the same facts). Every figure and finding is computed from the records that decoded into slices, so a report
must say, before its findings, how much of the capture that is (docs/analysis-schema.md, "Data quality").
"""

from __future__ import annotations

from dataclasses import field, fields
from ...core.records import frozen

__all__ = ["DataQuality", "data_quality", "records_written_warning", "LAYOUT_FLOOR", "LAYOUT_WARN", "UNREADABLE_KINDS", "UNPAIRED_KINDS", "refusal"]

# Below this share of records agreeing with their position under the layout, a buffer is not analyzed (it is
# not a profiler buffer of that layout, or its header is wrong) unless --layout names the layout.
LAYOUT_FLOOR = 0.5
# Below this share, the analysis says so first.
LAYOUT_WARN = 0.99
UNPAIRED_KINDS = ("begin_without_end", "end_without_begin")
UNREADABLE_KINDS = ("tag_mismatch", "unknown_type", "unknown_event", "backwards")


@frozen
class DataQuality:
    """The capture's records that are not in the figures, by cause (counts of records unless named lanes).

    known: False for a trace with no launch facts (not written by ktrace): nothing can be said. lost_records:
    dropped by ktrace's capacity guard (None when the buffer has no guard to count them); full_lanes: lanes
    whose last slot is written with no guard counting (records after it may be lost, or written past the
    buffer); overwritten_lanes: lanes ending with a FlashInfer instant (earlier instants were overwritten,
    uncountable); unread_events: events of a Proton trace not read; anomalies: record-level anomaly kind -> count. warnings: one sentence per problem, with the
    counts and what to do, in the order a report shows them.
    """

    known: bool
    records: int | None = None
    layout: str | None = None
    layout_match: float | None = None
    lost_records: int | None = None
    unpaired_records: int = 0
    unreadable_records: int = 0
    full_lanes: int = 0
    overwritten_lanes: int = 0
    unread_events: int = 0  # events of a Proton trace that could not be read (not complete events, damaged)
    records_written: int | None = None  # what the sidecar says the capture read back (None: not said)
    unknown_sm_blocks: int = 0  # blocks whose SM is unknown (sm = -1) in a launch whose other blocks' SMs are known
    anomalies: dict = field(default_factory=dict)
    warnings: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.warnings

    def to_dict(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["anomalies"] = dict(sorted(self.anomalies.items()))
        d["warnings"] = list(self.warnings)
        return d


def _int(v) -> int:
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else 0


# A measured wall cannot beat the device's peak: work whose rate over the wall is more than this many times the
# table's (or the given) peak is said to be implausible (an FP8 or FP4 kernel may run 2 to 4 times the FP16 peak
# of the table; beyond that the work's figures are wrong: bits for bytes, a whole model's FLOPs for one kernel).
IMPLAUSIBLE_RATE = 4.0


def data_quality(launch: dict, wall_ns: float | None = None, unknown_sm_blocks: int = 0,
                 blocks: int = 0) -> DataQuality:
    """The DataQuality of a capture from its launch facts (``Analysis.launch``); with the kernel's wall, the
    work's rate over it is also checked against the device's peak (``implausible_work``); ``unknown_sm_blocks``
    of its ``blocks`` (the occupancy's) have an unknown SM while others' are known."""
    if "records" not in launch:
        return DataQuality(known=False)
    records = _int(launch.get("records"))
    anomalies = {k[len("anomaly_"):]: _int(v) for k, v in launch.items() if k.startswith("anomaly_") and _int(v)}
    match = launch.get("layout_match")
    match = float(match) if isinstance(match, (int, float)) else None
    lost = launch.get("records_lost")
    lost = _int(lost) if lost is not None else None
    unpaired = sum(anomalies.get(k, 0) for k in UNPAIRED_KINDS)
    unreadable = sum(anomalies.get(k, 0) for k in UNREADABLE_KINDS)
    overflow_lanes = _int(launch.get("note_overflow"))
    proton = launch.get("producer") == "proton"
    proton_lanes = _int(launch.get("note_proton_dropped"))
    full = 0 if lost is not None or overflow_lanes else _int(launch.get("note_lane_full"))
    overwritten = _int(launch.get("note_trailing_instant"))
    layout = launch.get("layout") if isinstance(launch.get("layout"), str) else None
    w: list[str] = []
    if match is not None and match < LAYOUT_WARN and records:
        w.append(f"only {_pct(match)} of the records agree with their position under the {layout} layout: the "
                 "header's block and group counts or the layout may be wrong (ktrace inspect shows each layout's "
                 "match; --layout, --num-blocks, --num-groups)")
    if proton and "assumed 1 GHz" in str(launch.get("time_origin", "")):
        w.append("Proton's trace holds SM cycles printed as ns at an assumed 1 GHz and no SM clock was given: every "
                 "duration is cycles / 1000 ns; give --sm-clock MHZ (or sm_clock_mhz in the sidecar, or run ktrace "
                 "calibrate on the GPU) for true times")
    written = launch.get("records_written")
    written = _int(written) if written is not None else None
    if written is not None and written != records:
        w.append(records_written_warning(records, written))
    unused = _int(launch.get("note_proton_unused"))
    if unused:
        w.append(f"{unused:,} events of the Proton trace not read (not complete events, or a damaged id, ts or dur): "
                 "they are in no figure (ktrace inspect says why, by cause)")
    w.extend(implausible_work(launch, wall_ns))
    cut = _int(launch.get("note_names_cut"))
    if cut:
        w.append(f"{cut:,} name(s) longer than 256 characters cut to 256 (ending in '\u2026'): the figures count "
                 "every record; only the names are shortened (ktrace inspect shows how long each was)")
    if lost and proton:
        w.append(f"{lost:,} records lost: Proton's circular buffer was full on {proton_lanes:,} lane(s) and dropped "
                 "their first records (Proton's 'first N events are dropped' warnings), and Proton placed each such "
                 "CTA's earliest kept scope at the CTA's start, so those lanes' times are shifted; capture with a "
                 "larger buffer (proton.mode.Default(buffer_size=...)) or fewer scopes")
    elif lost:
        w.append(f"{lost:,} records lost: {overflow_lanes:,} lane(s) were full and ktrace's capacity guard "
                 "dropped the records after their last slot; capture with more records per lane")
    if full:
        w.append(f"{full:,} lane(s) full: their last slot is written and the producer has no bounds check, so "
                 "records after it may be lost or written past the buffer (a truncated copy, or too few records "
                 "per lane?)")
    if unpaired:
        parts = ", ".join(f"{anomalies[k]:,} {_WORDS[k]}" for k in UNPAIRED_KINDS if anomalies.get(k))
        w.append(f"{unpaired:,} unpaired records ({parts}): their slices are not in the figures (a lane cut short?)")
    if unreadable:
        parts = ", ".join(f"{anomalies[k]:,} {_WORDS[k]}" for k in UNREADABLE_KINDS if anomalies.get(k))
        w.append(f"{unreadable:,} of {records:,} records unreadable ({parts}): not in the figures (ktrace inspect "
                 "shows examples)")
    if unknown_sm_blocks:
        why = ("the tag's SM id cannot tell which SM ran them (FlashInfer's tag ORs the block index's bits 12 and up "
               "into the SM byte past block 4095; ktrace inspect lists them)" if layout == "flashinfer" else
               "the capture does not say which SM ran them")
        w.append(f"{unknown_sm_blocks:,} of {blocks:,} blocks have no SM in the figures: {why}. They count as busy "
                 "SMs while they run, never idle ones, and in no SM's slots"
                 + ("; ktrace's own header records every block's SM" if layout == "flashinfer" else ""))
    if overwritten:
        w.append(f"{overwritten:,} lane(s) end with an instant: FlashInfer's PROFILER_EVENT_INSTANT does not "
                 "advance the write pointer, so earlier instants on them were overwritten (how many cannot be "
                 "known)")
    return DataQuality(known=True, records=records, layout=layout, layout_match=match, lost_records=lost,
                       unpaired_records=unpaired, unreadable_records=unreadable, full_lanes=full,
                       overwritten_lanes=overwritten, unread_events=unused, records_written=written,
                       unknown_sm_blocks=int(unknown_sm_blocks), anomalies=anomalies, warnings=tuple(w))


def implausible_work(launch: dict, wall_ns: float | None) -> list[str]:
    """The sentences for work (the sidecar's ``work``, ``--bytes``, ``--flops``) whose rate over the wall is
    more than IMPLAUSIBLE_RATE times the device's peak: a roofline on it would be wrong."""
    if not wall_ns or wall_ns <= 0:
        return []
    from .roofline import roofline_of

    r = roofline_of(launch, float(wall_ns))
    if r is None:
        return []
    out = []
    for what, rate, peak, unit, option in (("bytes", r.achieved_gbps, r.peak_gbps, "GB/s", "--bytes"),
                                           ("FLOPs", r.achieved_tflops, r.peak_tflops, "TFLOP/s", "--flops")):
        if rate is not None and peak and rate > IMPLAUSIBLE_RATE * peak:
            out.append(f"the work's {what} ({r.bytes if what == 'bytes' else r.flops:.3g}) over the "
                       f"{wall_ns / 1e3:,.3g} µs wall make {rate:.3g} {unit}, {rate / peak:,.3g} times the peak "
                       f"{peak:,.4g} {unit} ({r.device or 'given'}): implausible, and so is the roofline drawn "
                       f"from it; check the sidecar's work.{what.lower()} ({option}) and its units")
    return out


def records_written_warning(records: int, written: int) -> str:
    """The sentence for a buffer that holds other than the records its sidecar says were written."""
    if records < written:
        return (f"the sidecar says {written:,} records were written but the buffer holds {records:,}: "
                f"{written - records:,} missing (a copy cut short or zeroed in part, or the sidecar of another "
                "capture); copy the buffer again with its own sidecar")
    return (f"the buffer holds {records:,} records but the sidecar says {written:,} were written: "
            f"{records - written:,} more (stale data in a buffer not zeroed, or the sidecar of another capture)")


def _pct(x: float) -> str:
    return f"{x:.1%}" if x >= 0.001 or x == 0 else "<0.1%"


def refusal(dq: DataQuality, source: str) -> str | None:
    """Why a buffer whose records barely match its layout is not analyzed (None when it is): the message of
    the InputError, naming the file, the match and the ways out."""
    if not dq.known or dq.layout_match is None or not dq.records or dq.layout_match >= LAYOUT_FLOOR:
        return None
    return (f"{source}: only {_pct(dq.layout_match)} of its {dq.records:,} records agree with their position "
            f"under the best layout ({dq.layout}): not a profiler buffer, or its header's block and group counts "
            f"are wrong. ktrace inspect {source} shows what it holds; give --num-blocks and --num-groups, or "
            f"--layout {dq.layout} to analyze it anyway (with this warning first)")


_WORDS = {"begin_without_end": "BEGIN never closed", "end_without_begin": "END with no BEGIN",
          "tag_mismatch": "tag disagrees with its position", "unknown_type": "unknown record type",
          "unknown_event": "event with no name", "backwards": "time going backwards"}
