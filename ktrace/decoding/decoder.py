"""Decoding a profiler buffer: records by position, layout, unwrap, pairing, and every record accounted for.

``BufferDecoder`` settles what needs the whole buffer first (header, launch, trailer, layout, the time
reference), then decodes ranges of lanes independently (``part.py``): every rule (unwrap, pairing, overlaps,
instants, notes) works within a lane, so a huge buffer streams through in bounded memory. Reading lanes
from a file, a mapping or an array is ``lanes.py``'s.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..core.errors import InputError
from ..core.model import Decoded, LayoutMatch, Slices, Summary
from .lanes import LaneReader, lane_ranges
from .launch import build_launch
from .layouts import (FINALIZE, HEADER_WORDS, LAYOUTS, choose, detect_layout, get_layout, record_tag,
                      record_ts_lo, record_type, timer_anchor, trailer_start)
from .part import FINALIZE_EVENT, decode_part
from .options import decode_options
from .source import load_buffer, parse_header
from .unwrap import signed32

__all__ = ["decode", "BufferDecoder", "FINALIZE_EVENT"]


def _valid(lay, w: np.ndarray, lane: np.ndarray, ng: int, known_events: int | None = None) -> np.ndarray:
    """Words the decoder keeps (before pairing): non-empty, the tag agrees with the lane's position, the
    type is one the layout defines and, when the sidecar names the events, the event is named."""
    tag = record_tag(w)
    ok = (w != 0) & lay.position_matches(tag, lane // ng, lane % ng, ng) & (record_type(tag) <= lay.max_type)
    if known_events is not None:
        ok &= (record_type(tag) == FINALIZE) | (lay.event(tag) < known_events)
    return ok


class BufferDecoder:
    """A buffer opened for decoding. Arguments as ``decode``; ``part(lo, hi)`` decodes lanes [lo, hi),
    ``parts()`` all of them in ranges of about PART_RECORDS slots, ``decode()`` all at once."""

    # Buffers bigger than this, read from a file, that a part (a range of lanes) cannot cover whole, are
    # first copied lane-major into a temporary file, so each part reads one contiguous stretch of it.
    TRANSPOSE_MIN_BYTES = 256 << 20
    PART_RECORDS = 1 << 17  # slots decoded at a time: bounds memory and keeps the arrays cache-sized (faster)

    def __init__(self, source, *, sidecar=None, events=None, groups=None, layout: str | None = None,
                 num_blocks: int | None = None, num_groups: int | None = None, name: str | None = None,
                 work_bytes=None, work_flops=None, peak_gbps=None, peak_tflops=None, **aliases):
        if aliases:  # event_names / group_names, or a misspelt option: one message listing what is accepted
            opts = decode_options(dict(aliases, events=events, groups=groups), where="BufferDecoder")
            events, groups = opts["events"], opts["groups"]
        self.buf = load_buffer(source, name)
        nb, ng = parse_header(self.buf, num_blocks, num_groups)
        self.launch = build_launch(nb, ng, buffer_path=self.buf.path, sidecar=sidecar, events=events, groups=groups,
                                   work_bytes=work_bytes, work_flops=work_flops, peak_gbps=peak_gbps,
                                   peak_tflops=peak_tflops)
        self.lanes = nb * ng
        self.body, self.overflow = self._split_trailer()
        self.reader = LaneReader(self.buf, self.body, self.lanes)
        self._check_claim()
        self.rows, self.rem, self.capacity_per_lane = self.reader.rows, self.reader.rem, self.reader.capacity_per_lane
        scores = detect_layout(*self._sample(), ng)
        self.layout = get_layout(layout) if layout else LAYOUTS[choose(scores)]
        self.match = LayoutMatch(self.layout.name, "forced" if layout else "detected", scores)
        if self._worth_transposing():
            from ..runtime.config import Parallelism

            self.reader.copy_lane_major(Parallelism.build().threads("transpose"))
        self._time_reference()

    # Lanes always allowed; past them, a lane needs records: every lane costs memory in the figures whether it
    # holds records or not, so a header claiming 268M lanes over a sparse 2 GiB file (6.6 GB) is refused.
    LANES_FREE = 1 << 22
    LANES_PER_RECORD = 16

    def _check_claim(self) -> None:
        if self.lanes <= self.LANES_FREE:
            return
        present = self.reader.present()
        if self.lanes > self.LANES_FREE + self.LANES_PER_RECORD * present:
            L = self.launch
            raise InputError(
                f"{self.buf.name}: its header claims {L.num_blocks:,} blocks x {L.num_groups:,} groups = "
                f"{self.lanes:,} lanes, but the buffer holds {present:,} records (at most {self.LANES_FREE:,} lanes "
                f"+ {self.LANES_PER_RECORD} per record): a damaged header or a file of empty slots, not a "
                "capture; pass --num-blocks and --num-groups if the header was never written")

    @property
    def _lane_major(self):
        return self.reader.lane_major

    def _worth_transposing(self) -> bool:
        return (
            self.reader.from_file
            and self.body.nbytes >= self.TRANSPOSE_MIN_BYTES
            and len(self.part_ranges()) > 1
            and self.lanes <= 1 << 16
        )

    def _split_trailer(self) -> tuple[np.ndarray, np.ndarray | None]:
        """The record area, and per-lane overflow counts when ktrace's header wrote a trailer (whose last
        word, a 64-bit timer read at launch, becomes the launch's time anchor)."""
        L, words = self.launch, self.buf.words
        if not (L.trailer and L.capacity_per_lane):
            return words[HEADER_WORDS:], None
        end = trailer_start(self.lanes, L.capacity_per_lane)
        if len(words) != end + self.lanes + 1:
            raise InputError(
                f"{self.buf.name}: the sidecar describes ktrace's layout with {L.capacity_per_lane} records per lane "
                f"for {self.lanes} lanes and a trailer ({end + self.lanes + 1} words), but the buffer has "
                f"{len(words)} words (truncated copy, or the wrong sidecar?)"
            )
        anchor = timer_anchor(words)
        if L.timer_anchor_ns is None and anchor:
            if not 2**31 <= anchor < 2**63:  # see sidecar.MIN_ANCHOR_NS
                raise InputError(f"{self.buf.name}: the trailer's timer anchor (the last word) is {anchor:,}, not a "
                                 "%globaltimer read in Unix ns (a damaged buffer, or the wrong sidecar?); pass "
                                 "--no-sidecar to decode it without the trailer")
            self.launch = replace(L, timer_anchor_ns=anchor)
        return words[HEADER_WORDS:end], words[end:end + self.lanes]

    def _sample(self):
        """Tags and positions (block, group) of a sample of the non-empty slots, for layout detection."""
        pos, words = self.reader.sample()
        lane = pos % self.lanes
        ng = self.launch.num_groups
        return record_tag(words), lane // ng, lane % ng

    # Lanes whose first records are looked for at a time: a header claiming 268M lanes over a sparse file
    # costs memory for this many, not for all of them.
    FIRSTS_LANES = 1 << 22

    def _lane_firsts(self) -> np.ndarray:
        """Low 32 timer bits of each lane's first valid record, for the lanes that have one, in lane order
        (FIRSTS_LANES lanes at a time: memory bounded whatever the header claims)."""
        parts = [self._lane_firsts_in(lo, min(lo + self.FIRSTS_LANES, self.lanes))
                 for lo in range(0, self.lanes, self.FIRSTS_LANES)]
        return np.concatenate(parts) if parts else np.zeros(0, np.int64)

    def _lane_firsts_in(self, lo: int, hi: int) -> np.ndarray:
        ng = self.launch.num_groups
        todo = np.arange(lo, hi, dtype=np.int64)
        found = []
        for r in range(self.capacity_per_lane):  # usually the first row settles every lane
            todo = todo[todo < (self.lanes if r < self.rows else self.rem)]
            if len(todo) == 0:
                break
            if r == 8:  # lanes still open after a few rows are mostly empty: scan them column-wise
                found.append(self._scan_columns(todo, r))
                break
            width = min(hi, self.lanes if r < self.rows else self.rem) - lo
            w = self.reader.read(r * self.lanes + lo, width)[todo - lo]
            nz = np.flatnonzero(w)  # empty slots (most of a sparse buffer) are never valid: skip them cheaply
            ok = np.zeros(len(w), bool)
            ok[nz[_valid(self.layout, w[nz], todo[nz], ng, self._known_events)]] = True
            found.append(np.stack([todo[ok], record_ts_lo(w[ok])]))
            todo = todo[~ok]
        if not found:
            return np.zeros(0, np.int64)
        lane, ts = np.concatenate(found, axis=1)
        return ts[np.argsort(lane, kind="stable")]

    def _scan_columns(self, lanes: np.ndarray, row0: int) -> np.ndarray:
        """(lane, low timer bits) of the first valid record at or after row0, for the given lanes. Only the
        non-empty slots are looked at: a lane of 64M slots that are nearly all empty (a one-lane .bin.gz that
        inflates to 512 MiB) costs memory for its records, not for its slots."""
        ng = self.launch.num_groups
        out = [np.zeros((2, 0), np.int64)]
        for lo, hi in self.part_ranges(1 << 22):
            ln = lanes[(lanes >= lo) & (lanes < hi)]
            if len(ln) == 0:
                continue
            w = self.reader.block(lo, hi)[:, row0:]  # a view where it can be: no copy of the empty slots
            rows, cols = np.nonzero(w)  # row-major: each lane's slots in order
            wanted = np.zeros(hi - lo, bool)
            wanted[ln - lo] = True
            rows, cols = rows[wanted[rows]], cols[wanted[rows]]
            words = w[rows, cols]
            ok = _valid(self.layout, words, rows + lo, ng, self._known_events)
            rows, words = rows[ok], words[ok]
            hit, first = np.unique(rows, return_index=True)
            out.append(np.stack([hit + lo, record_ts_lo(words[first])]))
        return np.concatenate(out, axis=1)

    @property
    def _known_events(self) -> int | None:
        """With names from the sidecar, records of unnamed events are anomalies, not kept."""
        return len(self.launch.event_names) if self.launch.names_source == "sidecar" else None

    def _time_reference(self) -> None:
        """One reference for all lanes: the kernel's 64-bit timer read, or the host clock at launch, when
        the capture recorded one; else the first record of the lowest lane, and the earliest lane start is
        trace time 0. Each lane's first record is placed within 2.1 s of the reference."""
        L = self.launch
        firsts = self._lane_firsts()
        anchor = L.timer_anchor_ns if L.timer_anchor_ns is not None else L.host_launch_unix_ns
        if anchor is not None:
            self.ref_lo = anchor & 0xFFFFFFFF
            self.origin_ns = -anchor
            self.time_origin = "kernel timer anchor" if L.timer_anchor_ns is not None else "host clock at launch"
        else:
            self.ref_lo = int(firsts[0]) if len(firsts) else 0
            self.origin_ns = int(signed32(firsts - self.ref_lo).min()) if len(firsts) else 0
            self.time_origin = "first record"

    def part_ranges(self, records_per_part: int | None = None) -> list[tuple[int, int]]:
        """Lane ranges [lo, hi) of about ``records_per_part`` slots each."""
        return lane_ranges(self.lanes, self.capacity_per_lane, self.launch.num_groups,
                           records_per_part or self.PART_RECORDS)

    def parts(self, records_per_part: int | None = None):
        """Decoded parts, one per lane range, in lane order."""
        for lo, hi in self.part_ranges(records_per_part):
            yield self.part(lo, hi)

    def part(self, lo: int, hi: int) -> Decoded:
        """Decode lanes [lo, hi)."""
        return decode_part(self, lo, hi)

    def decode(self) -> Decoded:
        """The whole buffer as one Decoded."""
        return self.part(0, self.lanes)

    def slices_and_summary(self, records_per_part: int | None = None) -> tuple[Decoded, Summary]:
        """(every slice of the buffer, the whole buffer's Summary), decoding a range of lanes at a time: the
        records' temporaries stay bounded by one range, and only the slices are kept. The Decoded holds all
        slices (in (lane, begin sequence) order; begin_rec/end_rec count within their own range) but no
        instants or anomalies: their counts, and the notes, are the Summary's."""
        columns: dict[str, list] = {f: [] for f in Slices.__dataclass_fields__}
        first, total = None, Summary()
        for d in self.parts(records_per_part):
            first = first or d
            total = total.merge(Summary.of(d))
            for f, col in columns.items():
                col.append(getattr(d.slices, f))
            del d  # the part's records go now, not when the next range is decoded
        # One column at a time, so that only one column is ever held twice.
        slices = Slices(**{f: np.concatenate(columns.pop(f)) for f in list(columns)})
        return replace(first, slices=slices, instants=_none_of(first.instants), anomalies=_none_of(first.anomalies),
                       records=total.records, lanes_with_records=total.lanes_with_records, notes=total.notes,
                       note_examples=total.note_examples, aliasing=total.aliasing, min_step_ns=total.min_step_ns,
                       seen_events=total.seen_events, lane_range=(0, self.lanes),
                       dropped_records=total.dropped_records), total


def _none_of(table):
    """The same columnar table with no rows."""
    return replace(table, **{f: getattr(table, f)[:0] for f in table.__dataclass_fields__})


def decode(source, **options) -> Decoded:
    """Decode a FlashInfer-format profiler buffer, all of it at once.

    source: a path (.bin raw little-endian uint64, .npy), bytes, a numpy array, a torch.Tensor on the CPU or
    a GPU (int64/uint64, copied to the host once), or anything with ``__dlpack__`` or ``__array__``.
    options: sidecar (metadata JSON path; None: ``<buffer>.json`` if present; False: none), events/groups
    (also accepted as event_names/group_names; names as a list, a comma-separated string or ``@file``), layout (force a tag layout, else detected),
    num_blocks/num_groups (override the header), name (a label for messages).
    Returns a Decoded whose times are ns: Unix-epoch ns when the capture anchored them, else relative to
    the earliest record.
    """
    return BufferDecoder(source, **decode_options(options, where="decode")).decode()
