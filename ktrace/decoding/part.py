"""Decoding one range of lanes: the steps of ``BufferDecoder.part``, in order.

1. fields: each record's block and group (from its position), tag, type, event and low timer bits;
2. classify: what the tag alone shows (a tag that disagrees with its position, an undefined type, an
   unnamed event) and which records are 'finalize';
3. times: unwrap each lane's kept records against the common reference (records that run backwards become
   anomalies), place the rest beside their lane's neighbours, shift to the trace's origin;
4. SM ids; 5. pair BEGIN/END into slices; 6. instants; 7. anomalies; 8. notes; all into one ``Decoded``.
Every step works within a lane, so parts decode independently.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core.errors import InputError
from ..core.model import ANOMALY_KINDS, Anomalies, Decoded, Instants, Slices
from .layouts import FINALIZE, record_tag, record_ts_lo, record_type
from .notes import aliasing, lane_notes, min_step, overflow_notes
from .pairing import alternating, alternating_k, instance_index, pair_records, partial_overlaps
from .unwrap import backwards_mask, segment_starts, signed32, unwrap_lanes

__all__ = ["decode_part", "FINALIZE_EVENT"]

FINALIZE_EVENT = -1  # event index given to type-3 'finalize' records
_KIND = {k: i for i, k in enumerate(ANOMALY_KINDS)}


@dataclass
class _Records:
    """The part's non-empty slots in (lane, sequence) order, one column each."""

    lane: np.ndarray
    seq: np.ndarray
    raw: np.ndarray
    block: np.ndarray
    group: np.ndarray
    tag: np.ndarray
    ts_lo: np.ndarray
    rtype: np.ndarray
    event: np.ndarray
    kind: np.ndarray  # anomaly kind (index in ANOMALY_KINDS); -1: not an anomaly


def decode_part(dec, lo: int, hi: int) -> Decoded:
    """Decode lanes [lo, hi) of ``dec`` (a BufferDecoder: its launch, layout, reader and time reference)."""
    r = _fields(dec, *dec.reader.records(lo, hi))
    pos_ok = _classify(dec, r)
    t, keep = _times(dec, r)
    sm = _sm(dec, r)
    slices = _slices(r, keep, t, sm)
    notes, examples = lane_notes(dec.launch, r.lane, r.seq, r.rtype, keep, dec.rows, dec.rem, slices)
    dropped = overflow_notes(dec.overflow, lo, hi, notes, examples)
    ev_ok = r.event[pos_ok & (r.event >= 0)]
    n = len(r.lane)
    return Decoded(
        source=dec.buf.name,
        launch=dec.launch,
        layout=dec.match,
        records=n,
        capacity_per_lane=dec.capacity_per_lane,
        lanes_with_records=int(np.count_nonzero(segment_starts(r.lane))) if n else 0,
        slices=slices,
        instants=_instants(r, keep, t, sm),
        anomalies=_anomalies(r, t, sm),
        notes=notes,
        note_examples=examples,
        aliasing=aliasing(dec.layout, r.block, sm, keep, dec.launch.num_blocks),
        time_origin=dec.time_origin,
        origin_ns=dec.origin_ns,
        min_step_ns=min_step(r.lane, t) if keep.all() else min_step(r.lane[keep], t[keep]),
        seen_events=frozenset(np.flatnonzero(np.bincount(ev_ok)).tolist()) if len(ev_ok) else frozenset(),
        lane_range=(lo, hi),
        dropped_records=dropped,
    )


def _fields(dec, lane: np.ndarray, seq: np.ndarray, raw: np.ndarray) -> _Records:
    ng = dec.launch.num_groups
    tag = record_tag(raw)
    return _Records(
        lane=lane, seq=seq, raw=raw, block=lane // ng, group=lane % ng, tag=tag, ts_lo=record_ts_lo(raw),
        rtype=record_type(tag).astype(np.int8), event=dec.layout.event(tag), kind=np.full(len(lane), -1, np.int8),
    )


def _classify(dec, r: _Records) -> np.ndarray:
    """Marks the anomalies a tag shows by itself and gives 'finalize' records FINALIZE_EVENT; returns
    whether each tag agrees with its position."""
    lay, launch = dec.layout, dec.launch
    pos_ok = lay.position_matches(r.tag, r.block, r.group, launch.num_groups)
    r.kind[~pos_ok] = _KIND["tag_mismatch"]
    r.kind[pos_ok & (r.rtype > lay.max_type)] = _KIND["unknown_type"]
    is_finalize = (r.rtype == FINALIZE) & (r.kind < 0)
    r.event = np.where(is_finalize, FINALIZE_EVENT, r.event)
    _check_names(dec.buf.name, launch, r.event[(r.kind < 0) & ~is_finalize])
    if launch.names_source == "sidecar":
        unknown = (r.kind < 0) & ~is_finalize & (r.event >= len(launch.event_names))
        r.kind[unknown] = _KIND["unknown_event"]
    return pos_ok


def _times(dec, r: _Records) -> tuple[np.ndarray, np.ndarray]:
    """(t, keep): every record's time on the trace's axis (ns), and which records are kept (not anomalies)."""
    lane, ts_lo = r.lane, r.ts_lo
    keep = r.kind < 0
    if keep.all():  # no record is an anomaly yet (the usual buffer): no gathers
        t = unwrap_lanes(lane, ts_lo, dec.ref_lo)
        back = backwards_mask(lane, t)
    else:
        t = np.zeros(len(lane), np.int64)
        t[keep] = unwrap_lanes(lane[keep], ts_lo[keep], dec.ref_lo)
        back = np.zeros(len(lane), dtype=bool)
        back[keep] = backwards_mask(lane[keep], t[keep])
    r.kind[back] = _KIND["backwards"]
    keep &= ~back
    # Anomalous records are placed next to their lane's neighbours, for display.
    if (~keep).any():
        t[~keep] = _place(lane, keep, ts_lo, t, dec.ref_lo)
    t -= dec.origin_ns
    if dec.time_origin == "first record":
        # Kept records start at 0 or later by construction; a damaged record placed near them may not.
        np.maximum(t, 0, out=t)
    return t, keep


def _sm(dec, r: _Records) -> np.ndarray:
    """SM id per record; -1 where the layout has none or it cannot be trusted."""
    lay, launch = dec.layout, dec.launch
    if not lay.has_sm:
        return np.full(len(r.lane), -1, np.int64)
    if launch.producer == "ktrace":  # its block field is masked: the SM byte is exact
        return lay.sm_field(r.tag)
    return _sm_ids(lay, r.tag, r.block, launch.num_sms)


def _slices(r: _Records, keep: np.ndarray, t: np.ndarray, sm: np.ndarray) -> Slices:
    """BEGIN/END pairs of kept records, in (lane, begin sequence) order; unpaired ones become anomalies."""
    if len(r.lane) and keep.all() and alternating(r.lane, r.event, r.rtype):
        return _record_pairs(r, t, sm)
    be = np.flatnonzero(keep & (r.rtype <= 1))
    bi, ei, k, ub, ue = pair_records(r.lane[be], r.event[be], r.seq[be], r.rtype[be])
    bi, ei, ub, ue = be[bi], be[ei], be[ub], be[ue]
    r.kind[ub] = _KIND["begin_without_end"]
    r.kind[ue] = _KIND["end_without_begin"]
    o = np.argsort(bi, kind="stable")
    bi, ei, k = bi[o], ei[o], k[o]
    return Slices(
        lane=r.lane[bi], block=r.block[bi], group=r.group[bi], sm=sm[bi], event=r.event[bi], k=k,
        begin_seq=r.seq[bi], end_seq=r.seq[ei], begin_ns=t[bi], end_ns=t[ei], overlap=partial_overlaps(bi, ei),
        begin_rec=bi, end_rec=ei,
    )


def _record_pairs(r: _Records, t: np.ndarray, sm: np.ndarray) -> Slices:
    """The slices of a part whose records are all BEGIN, END, BEGIN, END... (the usual buffer): each record pair,
    read with a stride rather than gathered; none nests in another."""
    b, e = slice(0, None, 2), slice(1, None, 2)
    bi = np.arange(0, len(r.lane), 2)

    def col(a, at):
        return np.ascontiguousarray(a[at])

    return Slices(
        lane=col(r.lane, b), block=col(r.block, b), group=col(r.group, b), sm=col(sm, b), event=col(r.event, b),
        k=alternating_k(r.lane[b], r.event[b]), begin_seq=col(r.seq, b), end_seq=col(r.seq, e),
        begin_ns=col(t, b), end_ns=col(t, e), overlap=np.zeros(len(bi), dtype=bool), begin_rec=bi, end_rec=bi + 1,
    )


def _instants(r: _Records, keep: np.ndarray, t: np.ndarray, sm: np.ndarray) -> Instants:
    """Kept records of type 2 (and 3 'finalize' where the layout defines it), numbered per (lane, event)."""
    ii = np.flatnonzero(keep & (r.rtype >= 2))
    lane, event = r.lane[ii], r.event[ii]
    io = np.lexsort((r.seq[ii], event, lane))
    ik = np.empty(len(ii), np.int64)
    ik[io] = instance_index(_run_starts(lane[io], event[io]))
    return Instants(
        lane=lane, block=r.block[ii], group=r.group[ii], sm=sm[ii], event=event, k=ik, seq=r.seq[ii], ts_ns=t[ii],
        rec=ii,
    )


def _anomalies(r: _Records, t: np.ndarray, sm: np.ndarray) -> Anomalies:
    ai = np.flatnonzero(r.kind >= 0)
    return Anomalies(
        kind=r.kind[ai], lane=r.lane[ai], block=r.block[ai], group=r.group[ai], sm=sm[ai], event=r.event[ai],
        seq=r.seq[ai], raw=r.raw[ai], ts_ns=t[ai], rec=ai,
    )


def _check_names(source: str, launch, used_events: np.ndarray) -> None:
    """Names given on the command line (or in a file) must cover every event index the buffer uses."""
    if launch.names_source not in ("cli", "file") or len(used_events) == 0:
        return
    top = int(used_events.max())
    if top >= len(launch.event_names):
        missing = sorted(set(np.unique(used_events[used_events >= len(launch.event_names)]).tolist()))
        raise InputError(
            f"{source}: {len(launch.event_names)} event names given, but the buffer uses event indices up to "
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
