"""The numpy engine: every figure of the analysis, equal to the SQL package's, computed from a buffer's
decoded parts (ranges of whole blocks) one at a time, in bounded memory; a whole decoded buffer is one part
(``numpy_figures``).

Each part is reduced as it comes: what lives within a lane or a block (depth, each lane's previous top-level
slice, lane totals, block extents, the per-lane counts of each phase) is final once its part is read, and only
a few narrow columns per slice are kept (lane, k, phase, SM, depth, begin, end, previous slice). The figures
that span lanes (phase instances, the lanes' phase table, waits) are then computed over chunks of those
columns whose temporaries stay bounded by the chunk, and the critical path walks back one step at a time
through each slice's predecessor (one narrow code a slice, found beside the lanes' table). Definitions, tie
rules and arithmetic are the SQL package's (docs/analysis-schema.md); tests hold the two equal on every
capture, and the engine's figures the same whether a buffer comes as one part or many, in one chunk or many.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

import numpy as np

from ....export.launch_args import launch_facts
from ....core.model import Decoded, Summary
from ....core.progress import stage
from ....runtime.config import Parallelism, Slots, parallelism, thread_pool
from . import structure as st
from ...evidence.in_parts import finish_evidence, nested_waits, read_evidence
from ...evidence.keyed import distinct as _distinct  # np.unique by a sort: faster for many repeated values
from .phase_tables import figures_of, kernel_figures, phases_table
from ...model.results import Blocks, Figures, LaneTotals
from .growing import Growing, narrowest, narrowest_type
from .instances import Preds, _lane_cuts, critical_path, instance_sweeps, lanes_table, waits_table

__all__ = ["numpy_figures", "stream_figures", "decoder_figures", "CHUNK_ROWS"]

# Slices per chunk of the cross-lane sweeps. Their temporaries are ~250 bytes per slice: at 2^16 they stay in the
# caches. At 1e7 records in one process the phase instances took 1.55-1.68 s with 2^20, 1.12-1.25 s with 2^16.
CHUNK_ROWS = 1 << 16
EVIDENCE_CHUNKS = 16  # the evidence reads ranges of lanes of at least this many chunks' slices (2^20), and with
# workers no more ranges than twice the workers: each range sends back arrays as long as the instances (at 1e8
# records, 48 ranges of 2^20 sent 650 MB for the parent to merge), and none past 2^22 slices (its row list: 32 MB);
# each is read in pieces of a chunk (evidence_stream.PIECE_ROWS)
COPY_ROWS = 1 << 16  # with copy threads (``Parallelism.threads("copy")``), a part of this many slices has its
# columns copied out side by side (at 1e8 records on 8 workers of 16 cores: the parent's copies 0.54 -> 0.34 s, its
# CPU 0.53 -> 0.13 s; the stage stays bound by the workers' decoding); not where the workers take every core (on 2
# cores threads made the copies slower: 0.20 -> 0.25-0.38 s at 1e7, parts of 2^14 slices)
SLOTS_MAX_BYTES = 1 << 30  # the most address space the parts' shared-memory slots take (resident: what is written)


class Columns:
    """Every slice of the buffer, in (lane, begin sequence) order, as narrow columns; and what the parts
    reduced on the way (``add``)."""

    KEPT = ("lane", "k", "event", "sm", "depth", "begin", "end", "prev")

    def __init__(self, num_groups: int, capacity: int = 1 << 16, copier=None) -> None:
        self.num_groups = num_groups
        self._copier = copier  # threads that copy a large part's columns side by side (numpy lets go of the GIL)
        self.n = 0
        self._cols = {c: Growing(capacity) for c in self.KEPT}
        self.capacity = capacity
        self._lane_totals: list = []
        self._blocks: list = []
        self._event_lane: list = []
        self._durs: list = []
        self.per_k = np.zeros(0, np.int64)  # slices with each instance number k
        self.first_begin: dict[int, int] = {}
        self.lanes_with_slices = 0

    def take(self, r: "PartReduction | None") -> None:
        """Keep one part's reduction (``reduce_part``, in this process or a worker's)."""
        if r is None:
            return
        base, m = self.n, r.n
        self._lane_totals.append(r.lane_totals)
        self._blocks.append(r.blocks)
        self._event_lane.append(r.event_lane)
        self._durs.append(r.durs)
        if len(r.per_k) > len(self.per_k):
            self.per_k = np.r_[self.per_k, np.zeros(len(r.per_k) - len(self.per_k), np.int64)]
        self.per_k[:len(r.per_k)] += r.per_k
        if sum(map(len, self._durs)) > 1 << 22:  # merged as they come: held once, as distinct values
            self._durs = [_distinct(np.concatenate(self._durs))]
        for e, t in r.first_begin.items():
            self.first_begin[e] = min(t, self.first_begin.get(e, t))
        self.lanes_with_slices += r.lanes
        c = self._cols
        big = base + m
        ranges = {**r.ranges, "prev": (-1, max(big, self.capacity))}

        def append(name: str) -> None:
            c[name].append(getattr(r, name), *ranges[name])

        if self._copier is not None and m >= COPY_ROWS:  # each column's copy a thread (first touch of its pages)
            list(self._copier.map(append, self.KEPT))
        else:
            for name in self.KEPT:
                append(name)
        prev = c["prev"].array()[base:]  # rows within the part -> rows of the buffer, in place (a gather of the
        np.add(prev, base, out=prev, where=prev >= 0)  # rows with one, and an int64 copy: 1.2 s at 1e8 records)
        self.n = big

    def finish(self, event_name) -> None:
        """Take the filled columns and name the phases: two events of one name are one phase; phases are
        ordered by their first begin, then name (as the SQL package orders them)."""
        self._copier = None
        for name in self.KEPT:
            setattr(self, name, self._cols.pop(name).array())
        events = sorted(self.first_begin)
        names = [event_name(e) for e in events]
        self.names = sorted(set(names))
        lut = np.zeros(max(events) + 1 if events else 1, np.int64)
        for e, nm in zip(events, names):
            lut[e] = self.names.index(nm)
        self.code_of_event = lut
        self.code = lut.astype(narrowest_type(0, max(len(self.names) - 1, 0)))[self.event]
        del self.event
        first = {}
        for e, nm in zip(events, names):
            first[nm] = min(self.first_begin[e], first.get(nm, self.first_begin[e]))
        order = sorted(range(len(self.names)), key=lambda c: (first[self.names[c]], self.names[c]))
        self.phase_index = np.empty(len(self.names), np.int64)
        self.phase_index[order] = np.arange(len(self.names))

    def phase_name(self, codes: np.ndarray) -> list[str]:
        return [self.names[c] for c in np.asarray(codes).tolist()]

    # Whole-buffer reductions of the parts.
    def lane_totals(self) -> LaneTotals:
        return LaneTotals.concat(self._lane_totals) if self._lane_totals else LaneTotals.empty()

    def blocks(self) -> Blocks:
        return _blocks_from_partials(self._blocks)

    def code_pairs(self, parts: list, counts: bool = False):
        """Per-part distinct (event, x) pairs (with counts) as distinct (phase code, x) pairs (counts summed
        over the events of one phase and over parts)."""
        if not parts:
            empty = np.zeros((2, 0), np.int64)
            return (empty, np.zeros(0, np.int64)) if counts else empty
        pairs = np.concatenate([p[0] if counts else p for p in parts], axis=1)
        code, x = self.code_of_event[pairs[0]], pairs[1]
        span = int(x.max()) + 1
        u, inv = np.unique(code * span + x, return_inverse=True)
        out = np.stack([u // span, u % span])
        if not counts:
            return out
        n = np.concatenate([p[1] for p in parts])
        return out, np.bincount(inv.ravel(), weights=n, minlength=len(u)).astype(np.int64)

    def distinct_durations(self) -> np.ndarray:
        return _distinct(np.concatenate(self._durs)) if self._durs else np.zeros(0, np.int64)

    # Columns derived from the lane.
    def block_of(self, rows) -> np.ndarray:
        return self.lane[rows].astype(np.int64) // self.num_groups

    def group_of(self, rows) -> np.ndarray:
        return self.lane[rows].astype(np.int64) % self.num_groups


class PartReduction:
    """What one part (whole lanes) reduces to (``reduce_part``): its narrow columns (prev: row within the part,
    -1 none) with each one's value range, and its per-lane and per-block partial figures."""

    def __init__(self, d: Decoded) -> None:
        sl = d.slices
        self.n = len(sl)
        depth = st.slice_depth(sl.lane, sl.begin_seq, sl.end_seq, sl.overlap)
        top = depth == 0
        self.prev, _ = st.lane_neighbours(sl.lane, sl.begin_ns, sl.begin_seq, top)
        begin, end = sl.begin_ns.astype(np.int64, copy=False), sl.end_ns.astype(np.int64, copy=False)
        self.lane_totals = st.lane_totals(sl.lane, sl.block, sl.group, sl.sm, begin, end, top)
        self.blocks = st.block_extents(sl.block, sl.sm, sl.lane, begin, end)[:-1]
        self.event_lane = st.unique_columns(sl.event, sl.lane, return_counts=True)
        self.durs = _distinct(end - begin)
        self.per_k = np.bincount(sl.k)
        first = np.full(int(sl.event.max()) + 1, np.iinfo(np.int64).max)
        np.minimum.at(first, sl.event, begin)
        self.first_begin = {e: int(first[e]) for e in np.flatnonzero(first < np.iinfo(np.int64).max).tolist()}
        self.lanes = int(np.count_nonzero(sl.lane[1:] != sl.lane[:-1])) + 1  # the slices are in lane order
        self.lane, self.k, self.event, self.sm, self.depth, self.begin, self.end = (
            sl.lane, sl.k, sl.event, sl.sm, depth, begin, end)
        self.ranges = {"lane": (0, int(sl.lane.max())), "k": (0, int(sl.k.max())), "event": (0, int(sl.event.max())),
                       "sm": (-1, int(sl.sm.max())), "depth": (0, int(depth.max())),
                       "begin": (int(begin.min()), int(begin.max())), "end": (int(end.min()), int(end.max()))}
        for name, (lo, hi) in self.ranges.items():  # narrow before it crosses a pipe
            setattr(self, name, narrowest(getattr(self, name), lo, hi))
        self.prev = narrowest(self.prev, -1, self.n)
        self._slot = None

    def to_slot(self, slots: Slots, slot: int) -> None:
        """In a worker: moves the columns into the shared slot (if they fit), so that they do not cross a pipe."""
        where = slots.put(slot, {c: getattr(self, c) for c in Columns.KEPT})
        if where is not None:
            for c in Columns.KEPT:
                setattr(self, c, None)
            self._slot = (slot, where)

    def from_slot(self, slots: Slots) -> None:
        """In the parent: the columns as views of their slot (``Columns.take`` copies them out)."""
        if self._slot is not None:
            for c, a in slots.take(*self._slot).items():
                setattr(self, c, a)
            self._slot = None


def reduce_part(d: Decoded) -> PartReduction | None:
    """One part's reduction, None for a part without slices."""
    return PartReduction(d) if len(d.slices) else None


def _blocks_from_partials(parts: list) -> Blocks:
    if not parts:
        return Blocks.empty()
    ub_all, sm, begin, end, slices, lanes = (np.concatenate(c) for c in zip(*parts))
    ub, inv = np.unique(ub_all, return_inverse=True)
    nb = len(ub)

    def reduce(op, init, v):
        out = np.full(nb, init, np.int64)
        op.at(out, inv, v)
        return out

    i64 = np.iinfo(np.int64)
    return st.finish_blocks(ub, reduce(np.maximum, i64.min, sm), reduce(np.minimum, i64.max, begin),
                            reduce(np.maximum, i64.min, end), reduce(np.add, 0, slices), reduce(np.add, 0, lanes))


def numpy_figures(d: Decoded, summary: Summary | None = None) -> Figures:
    """Every figure of the analysis for the decoded buffer ``d`` (one part); summary: the buffer's Summary
    when ``d`` holds only its slices (``BufferDecoder.slices_and_summary``), else Summary.of(d)."""
    return stream_figures([d], summary=summary, max_slices=len(d.slices))


def stream_figures(parts: Iterable[Decoded], *, chunk_rows: int = CHUNK_ROWS, progress=None,
                   max_slices: int | None = None, summary: Summary | None = None,
                   jobs: int | Parallelism = 1) -> Figures:
    """Every figure of the analysis from a buffer's decoded parts, in lane order (``BufferDecoder.parts``).
    progress: told each stage after decoding (``ktrace.core.progress``). max_slices: at most how many slices the
    parts hold (half the record slots): the columns are allocated once at that size. summary: the buffer's
    Summary when the parts hold only its slices, else the parts' Summaries merged. jobs: worker processes
    for the cross-lane sweeps, or the command's Parallelism (the figures are the same for any number)."""
    return _figures((_reduced(d) for d in parts), chunk_rows, progress, max_slices, summary, parallelism(jobs))


def decoder_figures(dec, *, jobs: int | Parallelism = 1, chunk_rows: int = CHUNK_ROWS, progress=None, on_part=None,
                    records_per_part: int | None = None) -> Figures:
    """``stream_figures`` of a BufferDecoder's parts (``records_per_part``: their size, ``part_ranges``), each
    decoded and reduced by one of ``jobs`` forked worker processes (in this process for 1; or the command's
    Parallelism: its ``parts`` stage), as are the cross-lane sweeps' chunks: the same figures for any number.
    on_part(lane_range) after each part."""
    par = parallelism(jobs)
    decode = par.stage("parts")
    jobs = decode.jobs
    if records_per_part is None and (held := dec.reader.sparse_records()) is not None:
        # A sparse area read in place: parts of about PART_RECORDS records, not slots (a small capture in one)
        records_per_part = dec.PART_RECORDS * (int(dec.body.size) // max(held, 1))
    ranges = dec.part_ranges(records_per_part)
    # Each part's columns come back through a ring of shared-memory slots, each large enough for the most
    # slices a part can hold (half its record slots) at 8 bytes a column; by pipe where the ring would be
    # larger than SLOTS_MAX_BYTES (parts of a few very long lanes) or cannot be had.
    window = 2 * jobs + 2
    slots = None
    if jobs > 1 and len(ranges) > 1:
        most = max((hi - lo) for lo, hi in ranges) * (dec.capacity_per_lane + 1) // 2 + 1
        size = (most * 8 + Slots.ALIGN) * len(Columns.KEPT)
        if window * size <= SLOTS_MAX_BYTES:
            try:
                slots = Slots(window, size)
            except (OSError, ValueError):
                slots = None

    def parts():
        items = [(i % window, r) for i, r in enumerate(ranges)]
        for h, summary, r in decode.imap(_decode_reduced_slot, (dec, slots), items, window=window):
            if r is not None:
                r.from_slot(slots)
            yield h, summary, r  # taken (copied out of its slot) before the next part is asked for
            if on_part is not None:
                on_part(h.lane_range)

    return _figures(parts(), chunk_rows, progress, int(dec.body.size) // 2 + 1, None, par)


def balanced_chunk_rows(n: int, chunk_rows: int, jobs: int) -> int:
    """Rows per chunk of the cross-lane sweeps for ``jobs`` workers: at most chunk_rows, and, where that makes
    several chunks, as many as a multiple of jobs, of about equal size (5 chunks on 2 workers would leave one
    worker a chunk behind; 5 on 16 would leave 11 idle). Rows that fit one chunk stay one. The figures are the
    same for any chunking."""
    if jobs <= 1 or n <= chunk_rows:
        return chunk_rows
    rounds = -(-n // (jobs * max(chunk_rows, 1)))  # chunks per worker
    return max(-(-n // (jobs * rounds)), 1)


def _critical_path(state, _):
    cols, preds, kernel = state
    return critical_path(cols, preds, kernel.begin_ns, kernel.end_ns)


def _reduced(d: Decoded) -> tuple[Decoded, Summary, PartReduction | None]:
    """A part as the engine keeps it: its head (the part without its records' columns), its Summary and its
    reduction."""
    return _emptied(d), Summary.of(d), reduce_part(d)


def _decode_reduced_slot(state, item: tuple[int, tuple[int, int]]):
    """A part decoded and reduced (in a worker: its columns written into its shared slot)."""
    (dec, slots), (slot, lanes) = state, item
    h, summary, r = _reduced(dec.part(*lanes))
    if r is not None and slots is not None:
        r.to_slot(slots, slot)
    return h, summary, r


def _emptied(d: Decoded) -> Decoded:
    def empty(x):
        return replace(x, **{f: getattr(x, f)[:0] for f in x.__dataclass_fields__})

    return replace(d, slices=empty(d.slices), instants=empty(d.instants), anomalies=empty(d.anomalies))


def _figures(parts, chunk_rows: int, progress, max_slices: int | None, summary: Summary | None,
             par: Parallelism) -> Figures:
    cols, head, given, summary = None, None, summary, Summary() if summary is None else summary
    threads = par.threads("copy")
    with thread_pool(threads if threads > 1 else 0, "ktrace-copy") as pool:
        copier = pool if threads > 1 else None
        for h, part_summary, r in parts:
            if head is None:
                head = h
                cols = Columns(h.launch.num_groups, max(max_slices, 1) if max_slices is not None else 1 << 16,
                               copier)
            if given is None:
                summary = summary.merge(part_summary)
            cols.take(r)
            del r
    if head is None:
        raise ValueError("stream_figures: no parts")
    cols.finish(head.launch.event_name)
    sweeps = par.stage("sweeps", size=cols.n)
    chunk_rows = balanced_chunk_rows(cols.n, chunk_rows, sweeps.jobs)
    blocks = cols.blocks()
    lane_totals = cols.lane_totals()
    kernel = kernel_figures(head.launch, summary, cols.distinct_durations(),
                            int(cols.begin.min()) if cols.n else None, int(cols.end.max()) if cols.n else None,
                            cols.n, cols.lanes_with_slices, len(cols.names))
    stage(progress, "phase instances")
    inst = instance_sweeps(cols, blocks, chunk_rows, sweeps)
    groups = cols.code_pairs([np.stack([p[0][0], p[0][1] % cols.num_groups]) for p in cols._event_lane])
    lane_pairs, per_lane = cols.code_pairs(cols._event_lane, counts=True)
    phases = phases_table(cols, inst, lane_totals, groups, lane_pairs, per_lane)
    # The evidence's tests (on a sample) run one step at a time: with workers, in a thread of this process
    # (numpy lets go of the GIL; a forked worker made every temporary of fresh pages, 0.85 s against 0.5 s at
    # 1e7 records), beside the lanes and the waits; so does the critical path's walk, in a worker of its own,
    # once the workers have found each slice's predecessor (Preds).
    stage(progress, "wait evidence")
    names = dict(zip(phases.phase_index.tolist(), phases.phase.tolist()))
    per_range = EVIDENCE_CHUNKS * chunk_rows
    if sweeps.parallel:  # no more ranges than twice the workers, none past 2^22 slices
        per_range = max(per_range, min(-(-cols.n // (2 * sweeps.jobs)), 1 << 22))
    cuts = _lane_cuts(cols, balanced_chunk_rows(cols.n, per_range, sweeps.jobs))
    read = read_evidence(cols, cuts, kernel.tick_ns, names, head.launch.num_blocks, inst.table, sweeps)
    top = read[0][0] if not read[1] else None  # every top-level slice (not a sample): what the replay reads
    timed = nested_waits(cols) if top is not None else None  # the timed waits in the lanes' work: the replay's too
    with thread_pool(1 if par.stage("evidence_tests").parallel else 0, "ktrace-evidence") as beside:
        # Its boundaries side by side on the cores the workers leave, at most Parallelism.evidence_threads (on
        # 16 cores with 8 workers, at 1e8 records: 1.4-1.5 s in one thread, 0.9 s in 4, 0.9-1.0 s in 8 with
        # 0.45 GB more memory; where the workers take every core, more threads only contend).
        threads = par.threads("evidence_tests")
        tests = beside.submit(finish_evidence, read, threads)
        del read
        stage(progress, "lanes and waits")
        preds = Preds(cols, blocks, sweeps).fill(cols, inst)
        with par.stage("critical_path").later(_critical_path, (cols, preds, kernel), None) as walk:
            lanes = lanes_table(cols, inst, chunk_rows, sweeps)
            waits = waits_table(cols, chunk_rows, sweeps)
            stage(progress, "critical path")
            evidence, cp = tests.result(), walk.result()
    return figures_of(kernel, launch_facts(head, summary), phases, inst.table, lanes, waits, cp, blocks, lane_totals,
                      evidence, top=top, timed=timed)
