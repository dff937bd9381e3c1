"""Lane I/O: a buffer's record area read lane by lane, from a file, a mapped file or an array.

Producers write the record area row-major (record k of every lane, then record k + 1), and the decoder wants
it lane by lane: ``LaneReader`` makes the strided reads, and for a huge file first copies the area lane-major
into a temporary file, so each range of lanes is one contiguous read.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from ..core.outputs import temporary_folder
from .layouts import HEADER_WORDS
from .source import Buffer

BLOCK_WORDS = 1 << 20  # copying the record area lane-major: 8 MB read at a time

__all__ = ["LaneReader", "lane_ranges"]


def lane_ranges(lanes: int, capacity_per_lane: int, num_groups: int, records_per_part: int) -> list[tuple[int, int]]:
    """Lane ranges [lo, hi) of about ``records_per_part`` slots each, in whole blocks."""
    per = max(1, records_per_part // max(1, capacity_per_lane * num_groups)) * num_groups
    return [(lo, min(lanes, lo + per)) for lo in range(0, lanes, per)]


class LaneReader:
    """The record area ``body`` (slots, row-major) of ``buf`` for ``lanes`` lanes.

    rows: full rows (every lane has a slot); rem: lanes with one more slot in the partial last row;
    capacity_per_lane: slots of the longest lanes.
    """

    SAMPLE_WINDOW = 1 << 16  # slots per sample window: 64 of them, whatever the header claims of its lanes
    BAND_BYTES = 4 << 20  # lanes copied lane-major at a time from a row-major record area (and a worker's batch)

    def __init__(self, buf: Buffer, body: np.ndarray, lanes: int):
        self.buf, self.body, self.lanes = buf, body, lanes
        self.rows, self.rem = divmod(len(body), lanes)
        self.capacity_per_lane = self.rows + (1 if self.rem else 0)
        self.lane_major: Path | None = None  # the lane-major copy, once made
        self._band: tuple = (0, 0, None)  # (lo, hi, slots): the lanes last copied lane-major
        self._nonzero: np.ndarray | None = None  # positions of the non-empty slots of a record area in memory
        self._sparse: tuple | bool | None = None  # every lane's records of a sparse area (False: not sparse)

    @property
    def from_file(self) -> bool:
        """The words are mapped from a file (and read from it, not through the mapping)."""
        return self.buf.file_offset is not None

    def read(self, start: int, count: int) -> np.ndarray:
        """Slots [start, start + count) of the record area. From a mapped file they are read, not mapped:
        a touched page of a mapping can bring megabytes of its neighbours into the process's memory."""
        if self.from_file:
            return np.fromfile(self.buf.path, dtype="<u8", count=count,
                               offset=self.buf.file_offset + (HEADER_WORDS + start) * 8).astype(np.uint64)
        return np.asarray(self.body[start:start + count])

    def row(self, r: int) -> np.ndarray:
        """Slot r of every lane (the partial last row is shorter)."""
        return self.read(r * self.lanes, self.lanes)

    def sample(self) -> tuple[np.ndarray, np.ndarray]:
        """(position, word) of the non-empty slots in 64 windows spread over the record area (for layout
        detection): contiguous reads, so a mapped file is touched in 64 places only."""
        n = len(self.body)
        width = min(max(self.lanes, 16384), self.SAMPLE_WINDOW)
        if n <= 64 * width:
            pos = self._nonzero_slots()
            return pos, np.asarray(self.body)[pos]
        else:  # 64 non-overlapping windows, evenly spread
            starts = np.linspace(0, n - width, 64).astype(np.int64)
            pos = (starts[:, None] + np.arange(width, dtype=np.int64)[None, :]).ravel()
            words = np.concatenate([self.read(s, width) for s in starts.tolist()])
        nz = words != 0
        return pos[nz], words[nz]

    def block(self, lo: int, hi: int) -> np.ndarray:
        """The slots of lanes [lo, hi) as a (lanes, capacity) array; slots past the buffer's end read 0."""
        cap, lanes, rows, rem = self.capacity_per_lane, self.lanes, self.rows, self.rem
        if self.lane_major is not None:
            return np.fromfile(self.lane_major, dtype=np.uint64, count=(hi - lo) * cap,
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

    def records(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Non-empty slots of lanes [lo, hi) in (lane, sequence) order: (lane, seq, raw)."""
        cap = self.capacity_per_lane
        sparse = self._sparse_records()
        if sparse is not None:  # few records in a small area in memory: a range of them, sorted by lane once
            lane, seq, raw = sparse
            a, b = np.searchsorted(lane, [lo, hi]).tolist()
            return lane[a:b].copy(), seq[a:b].copy(), raw[a:b].copy()
        lanes = self._lanes(lo, hi)
        flat = lanes.reshape(-1)
        full = flat != 0  # one pass over the lane-major slots (nonzero of the mask: several times faster)
        at = np.flatnonzero(full)
        raw = flat[at]
        per_lane = np.count_nonzero(full.reshape(lanes.shape), axis=1) if len(at) else np.zeros(hi - lo, np.int64)
        first = np.arange(lo, hi, dtype=np.int64)
        return np.repeat(first, per_lane), at - np.repeat((first - lo) * cap, per_lane), raw

    def present(self, chunk: int = 1 << 23) -> int:
        """How many slots of the record area hold a record (are not 0), read ``chunk`` slots at a time: memory
        bounded whatever the area's size."""
        return sum(int(np.count_nonzero(self.read(s, min(chunk, len(self.body) - s))))
                   for s in range(0, len(self.body), chunk))

    SPARSE = 8  # a record area in memory with a record in at most one slot in this many is read in place ...
    SPARSE_SLOTS = 1 << 22  # ... when it holds at most this many slots (all its records sorted at once)

    def _nonzero_slots(self) -> np.ndarray:
        """Positions of the non-empty slots of the record area (kept, for ``records``, where it is read in
        place: a small, sparse area in memory)."""
        if self._nonzero is not None:
            return self._nonzero
        pos = np.flatnonzero(np.asarray(self.body) != 0)  # through a mask: several times faster than on the words
        if not self.from_file and len(self.body) <= self.SPARSE_SLOTS and len(pos) * self.SPARSE <= len(self.body):
            self._nonzero = pos
        return pos

    def sparse_records(self) -> int | None:
        """How many records a small, sparse record area in memory holds (read in place, ``records``); None for
        any other area (its records are not counted ahead)."""
        sparse = self._sparse_records()
        return None if sparse is None else len(sparse[0])

    def _sparse_records(self) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """``records`` of every lane of a small, sparse record area in memory (None for any other), from the
        non-empty slots' row-major positions: slot = row * lanes + lane, so a stable sort by lane (a radix
        sort for 16-bit lanes) gives (lane, sequence) order, with no lane-major copy of the area."""
        if self._sparse is None:
            self._sparse = False
            if self.lane_major is None and not self.from_file and len(self.body) <= self.SPARSE_SLOTS:
                pos = self._nonzero_slots()
                if len(pos) * self.SPARSE <= len(self.body):
                    seq, lane = np.divmod(pos, self.lanes)
                    order = np.argsort(lane.astype(np.uint16) if self.lanes <= 1 << 16 else lane, kind="stable")
                    self._sparse = lane[order], seq[order], np.asarray(self.body)[pos[order]]
        return self._sparse or None

    def _lanes(self, lo: int, hi: int) -> np.ndarray:
        """The slots of lanes [lo, hi), lane-major and contiguous. From a row-major record area, a band of
        lanes a few MB wide is copied lane-major at once and kept for the next ranges: a range of one or
        two lanes would use a few bytes of every cache line it reads, a band uses them all."""
        if self.lane_major is not None:
            return self.block(lo, hi)
        b0, b1, band = self._band
        if not (b0 <= lo and hi <= b1):
            b0, b1 = lo, max(hi, min(self.lanes, lo + self.BAND_BYTES // (8 * max(1, self.capacity_per_lane))))
            band = _tiled_copy(self.block(b0, b1))
            self._band = b0, b1, band
        return band[lo - b0:hi - b0]

    def copy_lane_major(self, threads: int = 1) -> None:
        """Copy the record area lane-major into a temporary file, which ``block`` reads from then on; blocks of
        rows side by side in ``threads`` threads (the runtime's ``transpose`` stage: the same file for any
        number)."""
        cap, lanes = self.capacity_per_lane, self.lanes
        self._tmpdir = temporary_folder("ktrace-")
        self.lane_major = Path(self._tmpdir.name) / "lanes.u64"
        rows_per_block = max(1, BLOCK_WORDS // lanes)
        with open(self.lane_major, "wb") as out:
            out.truncate(cap * lanes * 8)
            fd = out.fileno()

            def copy_rows(r0: int) -> None:
                r1 = min(cap, r0 + rows_per_block)
                n = min(len(self.body), r1 * lanes) - r0 * lanes
                block = np.fromfile(self.buf.path, dtype="<u8", count=n,
                                    offset=self.buf.file_offset + (HEADER_WORDS + r0 * lanes) * 8)
                if len(block) < (r1 - r0) * lanes:  # the partial last row: missing slots read 0
                    block = np.concatenate([block, np.zeros((r1 - r0) * lanes - len(block), np.uint64)])
                cols = _tiled_copy(block.reshape(r1 - r0, lanes).T)
                for ln in range(lanes):  # a loop over lanes, each writing one contiguous run
                    os.pwrite(fd, memoryview(cols[ln]), (ln * cap + r0) * 8)

            starts = range(0, cap, rows_per_block)
            threads = min(threads, len(starts))
            if threads > 1:  # blocks of rows side by side: reads, copies and writes let go of the GIL
                from ..runtime.config import thread_pool

                with thread_pool(threads, "ktrace-transpose") as pool:
                    list(pool.map(copy_rows, starts))
            else:
                for r0 in starts:
                    copy_rows(r0)


def _tiled_copy(a: np.ndarray, step: int = 1024) -> np.ndarray:
    """``np.ascontiguousarray(a)`` of a 2-D view across a row-major area (lanes x slots, each slot a row
    apart), copied ``step`` slots at a time: a tile's cache lines are read once for all its lanes (half the
    time of one copy of the whole view, which reads each line once per lane)."""
    if a.flags.c_contiguous or a.ndim != 2:
        return np.ascontiguousarray(a)
    out = np.empty(a.shape, a.dtype)
    for r0 in range(0, a.shape[1], step):
        out[:, r0:r0 + step] = a[:, r0:r0 + step]
    return out

