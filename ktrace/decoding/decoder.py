"""Decoding a profiler buffer: records by position, layout, unwrap, pairing, and every record accounted for.

``BufferDecoder`` settles what needs the whole buffer first (header, launch, layout, the time reference),
then decodes ranges of lanes independently: every rule (unwrap, pairing, overlaps, instants, notes) works
within a lane, so a huge buffer streams through in bounded memory.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np

from ..errors import InputError
from ..model import ANOMALY_KINDS, Decoded, Instants, LayoutMatch, Slices, Anomalies
from .launch import build_launch
from .layouts import LAYOUTS, choose, detect_layout, get_layout
from .pairing import instance_index, pair_records, partial_overlaps
from .source import Buffer, load_buffer, parse_header
from .unwrap import backwards_mask, segment_starts, signed32, unwrap_lanes

__all__ = ["decode", "BufferDecoder", "FINALIZE_EVENT"]

FINALIZE_EVENT = -1  # event index given to type-3 'finalize' records
_KIND = {k: i for i, k in enumerate(ANOMALY_KINDS)}
_EXAMPLES = 3


def _valid(lay, w: np.ndarray, lane: np.ndarray, ng: int, known_events: int | None = None) -> np.ndarray:
    """Words the decoder keeps (before pairing): non-empty, the tag agrees with the lane's position, the
    type is one the layout defines and, when the sidecar names the events, the event is named."""
    tag = (w & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    ok = (w != 0) & lay.position_matches(tag, lane // ng, lane % ng, ng) & ((tag & np.uint32(3)) <= lay.max_type)
    if known_events is not None:
        ok &= ((tag & np.uint32(3)) == 3) | (lay.event(tag) < known_events)
    return ok


class BufferDecoder:
    """A buffer opened for decoding. Arguments as ``decode``; ``part(lo, hi)`` decodes lanes [lo, hi),
    ``parts()`` all of them in ranges of about PART_RECORDS slots, ``decode()`` all at once."""

    def __init__(self, source, *, sidecar=None, events=None, groups=None, layout: str | None = None,
                 num_blocks: int | None = None, num_groups: int | None = None, name: str | None = None):
        self.buf = load_buffer(source, name)
        nb, ng = parse_header(self.buf, num_blocks, num_groups)
        self.launch = build_launch(nb, ng, buffer_path=self.buf.path, sidecar=sidecar, events=events, groups=groups)
        self.lanes = nb * ng
        self.body, self.overflow = self._split_trailer()
        self.rows, self.rem = divmod(len(self.body), self.lanes)
        self.capacity_per_lane = self.rows + (1 if self.rem else 0)
        tag, block, group = self._sample()
        scores = detect_layout(tag, block, group, ng)
        self.layout = get_layout(layout) if layout else LAYOUTS[choose(scores)]
        self.match = LayoutMatch(self.layout.name, "forced" if layout else "detected", scores)
        self._lane_major: Path | None = None
        if self._worth_transposing():
            self._transpose()
        self._time_reference()

    # Buffers bigger than this, read from a file, that a part (a range of lanes) cannot cover whole, are
    # first copied lane-major into a temporary file, so each part reads one contiguous stretch of it.
    TRANSPOSE_MIN_BYTES = 256 << 20

    def _worth_transposing(self) -> bool:
        return (
            self.buf.file_offset is not None
            and self.body.nbytes >= self.TRANSPOSE_MIN_BYTES
            and len(self.part_ranges()) > 1
            and self.lanes <= 1 << 16
        )

    def _transpose(self) -> None:
        cap, lanes = self.capacity_per_lane, self.lanes
        self._tmpdir = tempfile.TemporaryDirectory(prefix="ktrace-")
        self._lane_major = Path(self._tmpdir.name) / "lanes.u64"
        start = 1  # the record area follows the header word
        rows_per_block = max(1, (1 << 20) // lanes)  # 8 MB read at a time
        with open(self._lane_major, "wb") as out:
            out.truncate(cap * lanes * 8)
            fd = out.fileno()
            for r0 in range(0, cap, rows_per_block):
                r1 = min(cap, r0 + rows_per_block)
                n = min(len(self.body), r1 * lanes) - r0 * lanes
                block = np.fromfile(self.buf.path, dtype="<u8", count=n,
                                    offset=self.buf.file_offset + (start + r0 * lanes) * 8)
                if len(block) < (r1 - r0) * lanes:  # the partial last row: missing slots read 0
                    block = np.concatenate([block, np.zeros((r1 - r0) * lanes - len(block), np.uint64)])
                cols = np.ascontiguousarray(block.reshape(r1 - r0, lanes).T)
                for ln in range(lanes):  # a loop over lanes, each writing one contiguous run
                    os.pwrite(fd, memoryview(cols[ln]), (ln * cap + r0) * 8)

    def _split_trailer(self) -> tuple[np.ndarray, np.ndarray | None]:
        """The record area, and per-lane overflow counts when ktrace's header wrote a trailer (whose last
        word, a 64-bit timer read at launch, becomes the launch's time anchor)."""
        L, words = self.launch, self.buf.words
        if not (L.trailer and L.capacity_per_lane):
            return words[1:], None
        end = 1 + L.capacity_per_lane * self.lanes
        if len(words) != end + self.lanes + 1:
            raise InputError(
                f"{self.buf.name}: the sidecar describes ktrace's layout with {L.capacity_per_lane} records per lane "
                f"for {self.lanes} lanes and a trailer ({end + self.lanes + 1} words), but the buffer has "
                f"{len(words)} words (truncated copy, or the wrong sidecar?)"
            )
        if L.timer_anchor_ns is None and int(words[-1]):
            self.launch = replace(L, timer_anchor_ns=int(words[-1]))
        return words[1:end], words[end:end + self.lanes]

    def _sample(self):
        """Tags and positions of the non-empty slots in 64 windows spread over the buffer (for layout
        detection): contiguous reads, so a mapped file is touched in 64 places only."""
        n = len(self.body)
        width = max(self.lanes, 16384)
        if n <= 64 * width:
            pos = np.arange(n, dtype=np.int64)
            words = np.asarray(self.body)
        else:  # 64 non-overlapping windows, evenly spread
            starts = np.linspace(0, n - width, 64).astype(np.int64)
            pos = (starts[:, None] + np.arange(width, dtype=np.int64)[None, :]).ravel()
            words = np.concatenate([self._read(s, width) for s in starts.tolist()])
        nz = words != 0
        pos, words = pos[nz], words[nz]
        lane = pos % self.lanes
        tag = (words & np.uint64(0xFFFFFFFF)).astype(np.uint32)
        ng = self.launch.num_groups
        return tag, lane // ng, lane % ng

    def _read(self, start: int, count: int) -> np.ndarray:
        """Slots [start, start + count) of the record area. From a mapped file they are read, not mapped:
        a touched page of a mapping can bring megabytes of its neighbours into the process's memory."""
        if self.buf.file_offset is not None:
            return np.fromfile(self.buf.path, dtype="<u8", count=count,
                               offset=self.buf.file_offset + (1 + start) * 8).astype(np.uint64)
        return np.asarray(self.body[start:start + count])

    def _lane_firsts(self) -> np.ndarray:
        """Low 32 timer bits of each lane's first valid record, for the lanes that have one, in lane order."""
        ng = self.launch.num_groups
        todo = np.arange(self.lanes, dtype=np.int64)
        found = []
        for r in range(self.capacity_per_lane):  # usually the first row settles every lane
            todo = todo[todo < (self.lanes if r < self.rows else self.rem)]
            if len(todo) == 0:
                break
            if r == 8:  # lanes still open after a few rows are mostly empty: scan them column-wise
                found.append(self._scan_columns(todo, r))
                break
            w = self._read(r * self.lanes, self.lanes)[todo]
            ok = _valid(self.layout, w, todo, ng, self._known_events)
            found.append(np.stack([todo[ok], (w[ok] >> np.uint64(32)).astype(np.int64)]))
            todo = todo[~ok]
        if not found:
            return np.zeros(0, np.int64)
        lane, ts = np.concatenate(found, axis=1)
        return ts[np.argsort(lane, kind="stable")]

    def _scan_columns(self, lanes: np.ndarray, row0: int) -> np.ndarray:
        """(lane, low timer bits) of the first valid record at or after row0, for the given lanes."""
        ng = self.launch.num_groups
        out = [np.zeros((2, 0), np.int64)]
        for lo, hi in self.part_ranges(1 << 22):
            ln = lanes[(lanes >= lo) & (lanes < hi)]
            if len(ln) == 0:
                continue
            w = self._lane_block(lo, hi)[ln - lo, row0:]
            ok = _valid(self.layout, w, np.broadcast_to(ln[:, None], w.shape), ng, self._known_events)
            hit = ok.any(axis=1)
            first = ok.argmax(axis=1)[hit]
            out.append(np.stack([ln[hit], (w[np.flatnonzero(hit), first] >> np.uint64(32)).astype(np.int64)]))
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

    PART_RECORDS = 1 << 17  # slots decoded at a time: bounds memory and keeps the arrays cache-sized (faster)

    def part_ranges(self, records_per_part: int | None = None) -> list[tuple[int, int]]:
        """Lane ranges [lo, hi) of about ``records_per_part`` slots each."""
        ng = self.launch.num_groups
        records_per_part = records_per_part or self.PART_RECORDS
        per = max(1, records_per_part // max(1, self.capacity_per_lane * ng)) * ng  # whole blocks per range
        return [(lo, min(self.lanes, lo + per)) for lo in range(0, self.lanes, per)]

    def parts(self, records_per_part: int | None = None):
        """Decoded parts, one per lane range, in lane order."""
        for lo, hi in self.part_ranges(records_per_part):
            yield self.part(lo, hi)

    def decode(self) -> Decoded:
        """The whole buffer as one Decoded."""
        return self.part(0, self.lanes)

    def _lane_block(self, lo: int, hi: int) -> np.ndarray:
        """The slots of lanes [lo, hi) as a (lanes, capacity) array; slots past the buffer's end read 0."""
        cap, lanes, rows, rem = self.capacity_per_lane, self.lanes, self.rows, self.rem
        if self._lane_major is not None:
            return np.fromfile(self._lane_major, dtype=np.uint64, count=(hi - lo) * cap,
                               offset=lo * cap * 8).reshape(hi - lo, cap)
        sub = self.body[: rows * lanes].reshape(rows, lanes)[:, lo:hi].T
        if not rem:
            return sub
        full = np.zeros((hi - lo, cap), np.uint64)
        full[:, :rows] = sub
        top = min(hi, rem)
        if lo < top:
            full[: top - lo, rows] = self.body[rows * lanes + lo: rows * lanes + top]
        return full

    def _records(self, lo: int, hi: int):
        """Non-empty slots of lanes [lo, hi) in (lane, sequence) order: (lane, seq, raw)."""
        block = self._lane_block(lo, hi)
        li, seq = np.nonzero(block)
        raw = block[li, seq]
        return li.astype(np.int64) + lo, seq.astype(np.int64), raw

    def part(self, lo: int, hi: int) -> Decoded:
        """Decode lanes [lo, hi)."""
        launch, lay, ng = self.launch, self.layout, self.launch.num_groups
        lane, seq, raw = self._records(lo, hi)
        n = len(lane)
        block, group = lane // ng, lane % ng
        tag = (raw & np.uint64(0xFFFFFFFF)).astype(np.uint32)
        ts_lo = (raw >> np.uint64(32)).astype(np.int64)
        rtype = (tag & np.uint32(3)).astype(np.int8)
        event = lay.event(tag)

        kind = np.full(n, -1, np.int8)  # -1: not an anomaly
        pos_ok = lay.position_matches(tag, block, group, ng)
        kind[~pos_ok] = _KIND["tag_mismatch"]
        kind[pos_ok & (rtype > lay.max_type)] = _KIND["unknown_type"]
        is_finalize = (rtype == 3) & (kind < 0)
        event = np.where(is_finalize, FINALIZE_EVENT, event)

        _check_names(self.buf, launch, event[(kind < 0) & ~is_finalize])
        if launch.names_source == "sidecar":
            unknown = (kind < 0) & ~is_finalize & (event >= len(launch.event_names))
            kind[unknown] = _KIND["unknown_event"]

        # Unwrap the kept records; anomalous ones are placed next to their lane's neighbours, for display.
        keep = kind < 0
        t = np.zeros(n, np.int64)
        t[keep] = unwrap_lanes(lane[keep], ts_lo[keep], self.ref_lo)
        back = np.zeros(n, dtype=bool)
        back[keep] = backwards_mask(lane[keep], t[keep])
        kind[back] = _KIND["backwards"]
        keep &= ~back
        if (~keep).any():
            t[~keep] = _place(lane, keep, ts_lo, t, self.ref_lo)
        t -= self.origin_ns
        if self.time_origin == "first record":
            # Kept records start at 0 or later by construction; a damaged record placed near them may not.
            np.maximum(t, 0, out=t)

        if not lay.has_sm:
            sm = np.full(n, -1, np.int64)
        elif launch.producer == "ktrace":  # its block field is masked: the SM byte is exact
            sm = lay.sm_field(tag)
        else:
            sm = _sm_ids(lay, tag, block, launch.num_sms)

        # Pair BEGIN/END; instants are type 2 (and 3 'finalize' where the layout defines it).
        be = np.flatnonzero(keep & (rtype <= 1))
        bi, ei, k, ub, ue = pair_records(lane[be], event[be], seq[be], rtype[be])
        bi, ei, ub, ue = be[bi], be[ei], be[ub], be[ue]
        kind[ub] = _KIND["begin_without_end"]
        kind[ue] = _KIND["end_without_begin"]
        o = np.argsort(bi, kind="stable")  # slices in (lane, begin sequence) order
        bi, ei, k = bi[o], ei[o], k[o]
        overlap = partial_overlaps(bi, ei)
        slices = Slices(
            lane=lane[bi], block=block[bi], group=group[bi], sm=sm[bi], event=event[bi], k=k,
            begin_seq=seq[bi], end_seq=seq[ei], begin_ns=t[bi], end_ns=t[ei], overlap=overlap, begin_rec=bi, end_rec=ei,
        )

        ii = np.flatnonzero(keep & (rtype >= 2))
        io = np.lexsort((seq[ii], event[ii], lane[ii]))
        ik = np.empty(len(ii), np.int64)
        ik[io] = instance_index(_run_starts(lane[ii][io], event[ii][io]))
        instants = Instants(
            lane=lane[ii], block=block[ii], group=group[ii], sm=sm[ii], event=event[ii], k=ik, seq=seq[ii], ts_ns=t[ii],
            rec=ii,
        )

        ai = np.flatnonzero(kind >= 0)
        anomalies = Anomalies(
            kind=kind[ai], lane=lane[ai], block=block[ai], group=group[ai], sm=sm[ai], event=event[ai], seq=seq[ai],
            raw=raw[ai], ts_ns=t[ai], rec=ai,
        )
        notes, examples = _lane_notes(launch, lane, seq, rtype, keep, self.rows, self.rem, overlap, slices)
        dropped = 0
        if self.overflow is not None:
            over = self.overflow[lo:hi]
            lanes_over = np.flatnonzero(over) + lo
            if len(lanes_over):
                notes["overflow"] = int(len(lanes_over))
                examples["overflow"] = lanes_over[:_EXAMPLES].tolist()
                dropped = int(over.sum())
        ev_ok = event[pos_ok & (event >= 0)]
        seen = frozenset(np.flatnonzero(np.bincount(ev_ok)).tolist()) if len(ev_ok) else frozenset()
        return Decoded(
            source=self.buf.name,
            launch=launch,
            layout=self.match,
            records=n,
            capacity_per_lane=self.capacity_per_lane,
            lanes_with_records=int(np.count_nonzero(segment_starts(lane))) if n else 0,
            slices=slices,
            instants=instants,
            anomalies=anomalies,
            notes=notes,
            note_examples=examples,
            aliasing=_aliasing(lay, block, sm, keep, launch.num_blocks),
            time_origin=self.time_origin,
            origin_ns=self.origin_ns,
            min_step_ns=_min_step(lane[keep], t[keep]),
            seen_events=seen,
            lane_range=(lo, hi),
            dropped_records=dropped,
        )


def decode(source, **options) -> Decoded:
    """Decode a FlashInfer-format profiler buffer, all of it at once.

    source: a path (.bin raw little-endian uint64, .npy), bytes, a numpy array or a CPU tensor.
    options: sidecar (metadata JSON path; None: ``<buffer>.json`` if present; False: none), events/groups
    (names as a list, a comma-separated string or ``@file``), layout (force a tag layout, else detected),
    num_blocks/num_groups (override the header), name (a label for messages).
    Returns a Decoded whose times are ns: Unix-epoch ns when the capture anchored them, else relative to
    the earliest record.
    """
    return BufferDecoder(source, **options).decode()


def _check_names(buf: Buffer, launch, used_events: np.ndarray) -> None:
    if launch.names_source not in ("cli", "file") or len(used_events) == 0:
        return
    top = int(used_events.max())
    if top >= len(launch.event_names):
        missing = sorted(set(np.unique(used_events[used_events >= len(launch.event_names)]).tolist()))
        raise InputError(
            f"{buf.name}: {len(launch.event_names)} event names given, but the buffer uses event indices up to "
            f"{top} (unnamed: {', '.join(map(str, missing[:10]))}); give a name for every index from 0 to {top}"
        )


def _place(lane: np.ndarray, keep: np.ndarray, ts_lo: np.ndarray, t: np.ndarray, ref_lo: int) -> np.ndarray:
    """Best-effort times for records left out of the unwrap: next to the lane's last kept record before them."""
    idx = np.arange(len(lane))
    last_kept = np.maximum.accumulate(np.where(keep, idx, -1))
    bad = np.flatnonzero(~keep)
    prev = last_kept[bad]
    ok = (prev >= 0) & (lane[np.maximum(prev, 0)] == lane[bad])
    out = np.zeros(len(bad), np.int64)
    p = prev[ok]
    out[ok] = t[p] + signed32(ts_lo[bad[ok]] - ts_lo[p])
    if (~ok).any():  # nothing kept before it on its lane: place it against the common reference
        out[~ok] = signed32(ts_lo[bad[~ok]] - ref_lo)
    return out


def _run_starts(lane: np.ndarray, event: np.ndarray) -> np.ndarray:
    s = np.ones(len(lane), dtype=bool)
    if len(lane) > 1:
        s[1:] = (lane[1:] != lane[:-1]) | (event[1:] != event[:-1])
    return s


def _sm_ids(lay, tag: np.ndarray, block: np.ndarray, num_sms: int | None) -> np.ndarray:
    """SM id per record; for blocks >= 4096 the block's bit 12+ is OR-ed into the SM byte: undo it where
    only one SM id is possible, else -1 (untrusted)."""
    field = lay.sm_field(tag)
    high = (block >> 12) & 0xFF
    sm = field.copy()
    aliased = high != 0
    if not aliased.any():
        return sm
    limit = num_sms if num_sms else 256
    pairs, inv = np.unique(np.stack([high[aliased], field[aliased]]), axis=1, return_inverse=True)
    fixed = np.empty(pairs.shape[1], np.int64)
    for j in range(pairs.shape[1]):  # loop over distinct (high bits, SM byte) pairs, not records
        h, f = int(pairs[0, j]), int(pairs[1, j])
        cands = [s for s in range(limit) if (s | h) == f]
        fixed[j] = cands[0] if len(cands) == 1 else -1
    sm[aliased] = fixed[inv.reshape(-1)]
    return sm


def _aliasing(lay, block, sm, keep, nb) -> dict:
    if lay.name != "flashinfer" or nb <= 4096:
        return {}
    al = keep & (block >= 4096)
    blocks = np.unique(block[al])
    bad = np.unique(block[al & (sm < 0)])
    return {
        "blocks_over_4095": int(len(blocks)),
        "sm_repaired_blocks": int(len(blocks) - len(bad)),
        "sm_untrusted_blocks": int(len(bad)),
        "untrusted_examples": bad[:_EXAMPLES].tolist(),
    }  # counts add up across parts: a block's lanes are never split between parts


def _lane_notes(launch, lane, seq, rtype, keep, rows, rem, overlap, slices):
    notes: dict[str, int] = {}
    examples: dict[str, list] = {}
    if len(lane) == 0:
        return notes, examples
    last = np.ones(len(lane), dtype=bool)
    last[:-1] = lane[1:] != lane[:-1]
    cap = rows + (lane[last] < rem)
    full = lane[last][seq[last] == cap - 1]
    # A hole: a lane's records do not fill its first slots contiguously.
    count = np.diff(np.append(np.flatnonzero(segment_starts(lane)), len(lane)))
    holes = lane[last][seq[last] + 1 != count]
    trailing = lane[last][(rtype[last] == 2) & keep[last]] if not launch.instants_advance else lane[:0]
    for key, arr in (("lane_full", full), ("holes", holes), ("trailing_instant", trailing)):
        if len(arr):
            notes[key] = int(len(arr))
            examples[key] = arr[:_EXAMPLES].tolist()
    if overlap.any():
        notes["partial_overlap"] = int(np.count_nonzero(overlap))
        examples["partial_overlap"] = slices.lane[overlap][:_EXAMPLES].tolist()
    return notes, examples


def _min_step(lane: np.ndarray, t: np.ndarray) -> int | None:
    if len(t) < 2:
        return None
    d = np.diff(t)[lane[1:] == lane[:-1]]
    d = d[d > 0]
    return int(d.min()) if len(d) else None
