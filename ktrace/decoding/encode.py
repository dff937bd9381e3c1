"""Build profiler buffers with known contents, for tests, benchmarks and fuzzing.

The encoder side of the formats in ``layouts`` (see docs/buffer-formats in the README): each lane's records
are given as columns (type, event, timestamp in ns) and placed at the positions the producer would write them.
"""

from __future__ import annotations

import numpy as np

from .layouts import BEGIN, END, FINALIZE, HEADER_WORDS, INSTANT, header_word

__all__ = ["encode_tags", "place_records", "phase_buffer", "BEGIN", "END", "INSTANT", "FINALIZE"]


def encode_tags(layout: str, rtype, event, block, group, num_groups: int, sm=None, counter=None) -> np.ndarray:
    """Tag words (uint32) as the producer of ``layout`` writes them.

    layout: ``flashinfer`` (SM << 24 | block << 12, block not masked), ``flashinfer_legacy``
    (block*groups+group << 12) or ``mirage`` (22-31 counter, 11-21 lane id, 2-10 event).
    """
    rtype = np.asarray(rtype, np.uint64)
    event = np.asarray(event, np.uint64)
    block = np.asarray(block, np.uint64)
    group = np.asarray(group, np.uint64)
    if layout == "flashinfer":
        sm = np.zeros_like(block) if sm is None else np.asarray(sm, np.uint64)
        # The producer ORs the unmasked block index in: bit 12 of the block lands in the SM byte.
        tag = (sm << np.uint64(24)) | (block << np.uint64(12)) | (event << np.uint64(2)) | rtype
    elif layout == "flashinfer_legacy":
        lane = block * np.uint64(num_groups) + group
        tag = (lane << np.uint64(12)) | (event << np.uint64(2)) | rtype
    elif layout == "mirage":
        lane = block * np.uint64(num_groups) + group
        counter = np.zeros_like(block) if counter is None else np.asarray(counter, np.uint64)
        tag = ((counter & np.uint64(0x3FF)) << np.uint64(22)) | ((lane & np.uint64(0x7FF)) << np.uint64(11)) | (
            (event & np.uint64(0x1FF)) << np.uint64(2)
        ) | rtype
    else:
        raise ValueError(f"unknown layout {layout!r}")
    return (tag & np.uint64(0xFFFFFFFF)).astype(np.uint64)


def place_records(num_blocks: int, num_groups: int, block, group, seq, tag, ts_ns, capacity: int) -> np.ndarray:
    """A zeroed buffer of ``capacity`` records per lane with each record at its producer position.

    ts_ns are full nanosecond times; only their low 32 bits are stored, as ``%globaltimer_lo`` would be.
    """
    lanes = num_blocks * num_groups
    buf = np.zeros(HEADER_WORDS + capacity * lanes, dtype=np.uint64)
    buf[0] = np.uint64(header_word(num_blocks, num_groups))
    pos = HEADER_WORDS + np.asarray(seq, np.int64) * lanes + np.asarray(block, np.int64) * num_groups + np.asarray(group, np.int64)
    lo = np.asarray(ts_ns, np.uint64) & np.uint64(0xFFFFFFFF)
    buf[pos] = (lo << np.uint64(32)) | np.asarray(tag, np.uint64)
    return buf


def phase_buffer(
    begin_ns,
    end_ns,
    event,
    *,
    num_groups: int = 1,
    layout: str = "flashinfer",
    sm=None,
    spare: int = 0,
) -> np.ndarray:
    """A buffer where lane l (= block*num_groups + group) runs step j from begin_ns[l, j] to end_ns[l, j].

    begin_ns, end_ns: (lanes, steps) full ns times; event: (steps,) or (lanes, steps) event indices.
    Each step writes a BEGIN then an END record, in step order. sm: (blocks,) SM id per block for the
    current FlashInfer layout. spare: extra zeroed records per lane after the last one.
    """
    begin_ns = np.asarray(begin_ns, np.int64)
    end_ns = np.asarray(end_ns, np.int64)
    lanes, steps = begin_ns.shape
    num_blocks = lanes // num_groups
    ev = np.broadcast_to(np.asarray(event, np.int64), (lanes, steps))
    lane = np.repeat(np.arange(lanes, dtype=np.int64), 2 * steps)
    block, group = lane // num_groups, lane % num_groups
    seq = np.tile(np.arange(2 * steps, dtype=np.int64), lanes)
    rtype = seq % 2
    events = np.repeat(ev, 2, axis=1).ravel()
    ts = np.stack([begin_ns, end_ns], axis=2).reshape(lanes, 2 * steps).ravel()
    sm_rec = None if sm is None else np.asarray(sm, np.int64)[block]
    tag = encode_tags(layout, rtype, events, block, group, num_groups, sm=sm_rec, counter=seq // 2)
    return place_records(num_blocks, num_groups, block, group, seq, tag, ts, 2 * steps + spare)
