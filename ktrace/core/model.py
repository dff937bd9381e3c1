"""What the decoder produces: columnar numpy arrays with units in their names, and frozen summaries.

Every record of a buffer ends up in exactly one of three places: a phase slice (two records), an instant
(one record) or an anomaly (one record). ``Decoded.accounted`` checks that.
"""

from __future__ import annotations

from dataclasses import field

import numpy as np
from .records import frozen

__all__ = [
    "Summary",
    "ANOMALY_KINDS",
    "LANE_NOTES",
    "Launch",
    "Slices",
    "Instants",
    "Anomalies",
    "LayoutMatch",
    "Decoded",
]

# Record-level anomalies: each such record is neither in a slice nor an instant.
ANOMALY_KINDS = {
    "tag_mismatch": "the tag's block/lane field disagrees with the record's position (stale data, garbage "
    "or a write past another lane's end)",
    "unknown_type": "record type not defined by the layout",
    "unknown_event": "event index has no name in the sidecar's event list",
    "backwards": "timestamp earlier than an earlier record of the same lane",
    "end_without_begin": "END with no open BEGIN of the same event on its lane",
    "begin_without_end": "BEGIN never closed by an END of the same event on its lane",
}

# Lane-level observations: not records, but things a user must know.
LANE_NOTES = {
    "lane_full": "the lane's last slot is written: the producer has no bounds check, so records after it "
    "may have been written past the buffer (possible overflow)",
    "holes": "an empty (zero) slot followed by records on the same lane",
    "trailing_instant": "the lane ends with an instant: FlashInfer's PROFILER_EVENT_INSTANT does not advance "
    "the write pointer, so only a lane's last instant survives; earlier ones were overwritten by the next "
    "record and cannot be recovered or counted",
    "partial_overlap": "slices that partially overlap another slice of the lane (drawn on their own child "
    "track)",
    "proton_dropped": "Proton's circular buffer was full: the lane's first records were overwritten (Proton's "
    "'first N events are dropped' warning counts them), and Proton placed the CTA's earliest kept scope at the "
    "CTA's start, so the lane's times are shifted",
    "proton_unused": "events of the Proton trace that are not read (counted here in events, not lanes): not "
    "complete events, or an id, ts or dur that is damaged or past its limit; they are in no figure",
    "overflow": "the lane was full and ktrace's capacity guard dropped records instead of writing past the "
    "buffer (see 'records lost'); give the capture more records per lane",
    "iket_cross_warp": "IKET ranges that ended on another warp than they started on (ranges across warps): "
    "each is kept on the warp that started it",
    "iket_internal_events": "IKET range events between a range's start and end (multi-event ranges): counted, "
    "not drawn",
    "iket_payloads": "IKET markers carrying a payload (the payloads are in the JSON trace, not in ktrace's model)",
    "iket_backwards": "IKET ranges that end before they start: each kept as two 'backwards' anomalies",
    "names_cut": "names (phases, instants, the kernel) longer than 256 characters, cut to 256 (their last "
    "character '\u2026'): counted in names, not lanes; the trace read keeps the whole",
}


@frozen
class Launch:
    """Facts about the launch, from the buffer header and the metadata sidecar (when there is one)."""

    num_blocks: int
    num_groups: int
    kernel: str = "kernel"
    grid: tuple[int, ...] | None = None
    block_dim: tuple[int, ...] | None = None
    device: str | None = None
    num_sms: int | None = None
    event_names: tuple[str, ...] = ()
    group_names: tuple[str, ...] = ()
    names_source: str = "default"  # "cli", "file", "sidecar" or "default"
    timer_tick_ns: int | None = None
    host_launch_unix_ns: int | None = None  # host clock at launch, to recover the timer's high bits
    timer_anchor_ns: int | None = None  # one 64-bit %globaltimer read by the kernel: exact anchor
    sidecar: str | None = None  # path of the sidecar read, if any
    producer: str | None = None  # "flashinfer" or "ktrace" (ktrace's header), when the sidecar says
    producer_version: str | None = None  # what made the trace, with its version (IKET: JSON format, CuTe DSL)
    block_gpc: tuple | None = None  # each block's GPC (-1 unknown), when the producer says (IKET's locations)
    capacity_per_lane: int | None = None  # records per lane the buffer was sized for, when known
    trailer: bool = False  # ktrace's header: per-lane overflow counts and a 64-bit timer anchor follow
    probe_cost_ns: float | None = None  # one probe's cost measured by `ktrace calibrate`
    profiled_median_us: float | None = None  # the instrumented build's median kernel time
    control_median_us: float | None = None  # the unprofiled control's median kernel time
    records_written: int | None = None  # the non-empty slots the sidecar says the capture read back
    work_bytes: float | None = None  # the kernel's DRAM bytes (sidecar ``work.bytes`` or --bytes): the roofline's
    work_flops: float | None = None  # the kernel's FLOPs (sidecar ``work.flops`` or --flops)
    peak_gbps: float | None = None  # the device's peak bandwidth, given (--peak-gbps); else the roofline's table
    peak_tflops: float | None = None  # the device's peak FLOP rate, given (--peak-tflops)

    @property
    def instants_advance(self) -> bool:
        """ktrace's header advances the write pointer after an instant; FlashInfer's does not."""
        return self.producer == "ktrace"

    def event_name(self, i: int) -> str:
        return self.event_names[i] if 0 <= i < len(self.event_names) and self.event_names[i] else f"event_{i}"

    def group_name(self, g: int) -> str:
        if 0 <= g < len(self.group_names) and self.group_names[g]:
            return f"group {g} ({self.group_names[g]})"
        return f"group {g}"


@frozen
class Slices:
    """Phase slices, one row each, sorted by (lane, begin sequence). Times in ns on the trace's axis."""

    lane: np.ndarray  # int64, block * num_groups + group
    block: np.ndarray  # int64
    group: np.ndarray  # int64
    sm: np.ndarray  # int64, -1 when the SM id cannot be trusted or the layout has none
    event: np.ndarray  # int64 event index
    k: np.ndarray  # int64 instance: k-th slice of this event on this lane
    begin_seq: np.ndarray  # int64 record sequence number of the BEGIN within its lane
    end_seq: np.ndarray  # int64
    begin_ns: np.ndarray  # int64
    end_ns: np.ndarray  # int64
    overlap: np.ndarray  # bool: partially overlaps another slice of the lane (own child track)
    begin_rec: np.ndarray  # int64 index of the BEGIN record in (lane, sequence) record order
    end_rec: np.ndarray

    def __len__(self) -> int:
        return len(self.lane)

    @property
    def dur_ns(self) -> np.ndarray:
        return self.end_ns - self.begin_ns


@frozen
class Instants:
    """Instant records (type 2, and type 3 'finalize' in layouts that define it)."""

    lane: np.ndarray
    block: np.ndarray
    group: np.ndarray
    sm: np.ndarray
    event: np.ndarray  # event index; -1 for 'finalize'
    k: np.ndarray  # k-th instant of this event on this lane
    seq: np.ndarray
    ts_ns: np.ndarray
    rec: np.ndarray  # int64 index of the record in (lane, sequence) record order

    def __len__(self) -> int:
        return len(self.lane)


@frozen
class Anomalies:
    """Records that are neither in a slice nor an instant, with the reason (an ANOMALY_KINDS key)."""

    kind: np.ndarray  # int8 index into KINDS
    lane: np.ndarray
    block: np.ndarray
    group: np.ndarray
    sm: np.ndarray
    event: np.ndarray
    seq: np.ndarray
    raw: np.ndarray  # uint64 record as stored
    ts_ns: np.ndarray  # best-effort time (unwrapped like its lane's records)
    rec: np.ndarray  # int64 index of the record in (lane, sequence) record order

    KINDS = tuple(ANOMALY_KINDS)

    def __len__(self) -> int:
        return len(self.kind)

    def counts(self) -> dict[str, int]:
        c = np.bincount(self.kind.astype(np.int64), minlength=len(self.KINDS))
        return {k: int(n) for k, n in zip(self.KINDS, c) if n}


@frozen
class LayoutMatch:
    """How well each candidate layout's tag fields agree with the records' positions (0..1)."""

    name: str
    chosen_by: str  # "detected" or "forced"
    scores: dict[str, float]

    @property
    def score(self) -> float:
        return self.scores.get(self.name, 0.0)


@frozen
class Decoded:
    """A decoded buffer: the launch, the records' fate, and what was noticed on the way."""

    source: str
    launch: Launch
    layout: LayoutMatch
    records: int  # non-empty slots
    capacity_per_lane: int
    lanes_with_records: int
    slices: Slices
    instants: Instants
    anomalies: Anomalies
    notes: dict[str, int] = field(default_factory=dict)  # LANE_NOTES key -> count
    note_examples: dict[str, list] = field(default_factory=dict)
    aliasing: dict = field(default_factory=dict)  # blocks >= 4096 under the current layout
    time_origin: str = "first record"  # or "host clock at launch" / "kernel timer anchor"
    origin_ns: int = 0  # unwrapped raw time that maps to trace ts 0 (relative mode)
    min_step_ns: int | None = None  # smallest nonzero step between consecutive records of a lane
    seen_events: frozenset = frozenset()  # event indices seen on records whose tag matches the position
    lane_range: tuple[int, int] = (0, 0)  # the lanes [lo, hi) this part covers
    dropped_records: int = 0  # records ktrace's capacity guard counted but could not store

    @property
    def accounted(self) -> bool:
        return 2 * len(self.slices) + len(self.instants) + len(self.anomalies) == self.records


_EXAMPLES = 3


@frozen
class Summary:
    """Counts and examples over a whole buffer, merged from its decoded parts (lane ranges)."""

    records: int = 0
    slices: int = 0
    instants: int = 0
    anomalies: dict = field(default_factory=dict)  # kind -> count
    anomaly_examples: dict = field(default_factory=dict)  # kind -> [dict]
    notes: dict = field(default_factory=dict)  # LANE_NOTES key -> count
    note_examples: dict = field(default_factory=dict)
    lanes_with_records: int = 0
    slices_per_event: dict = field(default_factory=dict)  # event index -> count
    seen_events: frozenset = frozenset()
    aliasing: dict = field(default_factory=dict)
    min_step_ns: int | None = None
    first_ns: int | None = None
    last_ns: int | None = None
    dropped_records: int = 0

    @property
    def anomalous_records(self) -> int:
        return sum(self.anomalies.values())

    @property
    def accounted(self) -> bool:
        return 2 * self.slices + self.instants + self.anomalous_records == self.records

    @property
    def span_ns(self) -> int:
        return 0 if self.first_ns is None else self.last_ns - self.first_ns

    @staticmethod
    def of(d: "Decoded") -> "Summary":
        a = d.anomalies
        examples = {}
        for kind in a.counts():
            rows = np.flatnonzero(a.kind == Anomalies.KINDS.index(kind))[:_EXAMPLES]
            examples[kind] = [
                {"block": int(a.block[r]), "group": int(a.group[r]), "seq": int(a.seq[r]), "event": int(a.event[r]),
                 "raw": f"{int(a.raw[r]):#018x}"}
                for r in rows.tolist()
            ]
        cnt = np.bincount(d.slices.event) if len(d.slices) else np.zeros(0, np.int64)
        ev = np.flatnonzero(cnt)
        cnt = cnt[ev]
        ts = [x for x in (d.slices.begin_ns, d.slices.end_ns, d.instants.ts_ns) if len(x)]
        return Summary(
            records=d.records,
            slices=len(d.slices),
            instants=len(d.instants),
            anomalies=a.counts(),
            anomaly_examples=examples,
            notes=dict(d.notes),
            note_examples={k: list(v) for k, v in d.note_examples.items()},
            lanes_with_records=d.lanes_with_records,
            slices_per_event=dict(zip(ev.tolist(), cnt.tolist())),
            seen_events=frozenset(d.seen_events),
            aliasing=dict(d.aliasing),
            min_step_ns=d.min_step_ns,
            first_ns=int(min(x.min() for x in ts)) if ts else None,
            last_ns=int(max(x.max() for x in ts)) if ts else None,
            dropped_records=d.dropped_records,
        )

    def merge(self, o: "Summary") -> "Summary":
        def add(a: dict, b: dict) -> dict:
            out = dict(a)
            for k, v in b.items():
                out[k] = out.get(k, 0) + v
            return out

        def ex(a: dict, b: dict) -> dict:
            out = {k: list(v) for k, v in a.items()}
            for k, v in b.items():
                out[k] = (out.get(k, []) + list(v))[:_EXAMPLES]
            return out

        def opt(f, x, y):
            return y if x is None else x if y is None else f(x, y)

        al = dict(self.aliasing)
        for k, v in o.aliasing.items():
            al[k] = (al.get(k, []) + v)[:_EXAMPLES] if isinstance(v, list) else al.get(k, 0) + v
        return Summary(
            records=self.records + o.records,
            slices=self.slices + o.slices,
            instants=self.instants + o.instants,
            anomalies=add(self.anomalies, o.anomalies),
            anomaly_examples=ex(self.anomaly_examples, o.anomaly_examples),
            notes=add(self.notes, o.notes),
            note_examples=ex(self.note_examples, o.note_examples),
            lanes_with_records=self.lanes_with_records + o.lanes_with_records,
            slices_per_event=add(self.slices_per_event, o.slices_per_event),
            seen_events=self.seen_events | o.seen_events,
            aliasing=al,
            min_step_ns=opt(min, self.min_step_ns, o.min_step_ns),
            first_ns=opt(min, self.first_ns, o.first_ns),
            last_ns=opt(max, self.last_ns, o.last_ns),
            dropped_records=self.dropped_records + o.dropped_records,
        )
