"""Decoding a profiler buffer: records by position, layout, unwrap, pairing, and every record accounted for."""

from __future__ import annotations

import numpy as np

from ..errors import InputError
from ..model import ANOMALY_KINDS, Anomalies, Decoded, Instants, LayoutMatch, Slices
from .launch import build_launch
from .layouts import LAYOUTS, choose, detect_layout, get_layout
from .pairing import instance_index, pair_records, partial_overlaps
from .source import Buffer, load_buffer, parse_header
from .unwrap import backwards_mask, segment_starts, signed32, unwrap_lanes

__all__ = ["decode", "FINALIZE_EVENT"]

FINALIZE_EVENT = -1  # event index given to type-3 'finalize' records
_KIND = {k: i for i, k in enumerate(ANOMALY_KINDS)}
_EXAMPLES = 3


def _records(words: np.ndarray, lanes: int):
    """Non-empty slots in (lane, sequence) order: (lane, seq, raw), plus per-lane capacity facts."""
    body = words[1:]
    slots = len(body)
    rows, rem = divmod(slots, lanes)
    if rem == 0:
        # Lane-major order straight from a transposed view: no sort needed.
        lane, seq = np.nonzero(body.reshape(rows, lanes).T)
        pos = seq * lanes + lane
    else:
        pos = np.flatnonzero(body)
        lane = pos % lanes
        o = np.argsort(lane, kind="stable")
        pos, lane = pos[o], lane[o]
        seq = pos // lanes
    return lane.astype(np.int64), seq.astype(np.int64), body[pos], rows, rem


def decode(
    source,
    *,
    sidecar=None,
    events=None,
    groups=None,
    layout: str | None = None,
    num_blocks: int | None = None,
    num_groups: int | None = None,
    name: str | None = None,
) -> Decoded:
    """Decode a FlashInfer-format profiler buffer.

    source: a path (.bin raw little-endian uint64, .npy), bytes, a numpy array or a CPU tensor.
    sidecar: metadata JSON (None: ``<buffer>.json`` if present; False: none). events/groups: names as a
    list, a comma-separated string or ``@file``. layout: force a tag layout (else detected).
    Returns a Decoded whose times are ns (Unix-epoch ns when the capture anchored them, else relative to
    the earliest record).
    """
    buf = load_buffer(source, name)
    nb, ng = parse_header(buf, num_blocks, num_groups)
    launch = build_launch(nb, ng, buffer_path=buf.path, sidecar=sidecar, events=events, groups=groups)
    lanes = nb * ng
    lane, seq, raw, rows, rem = _records(buf.words, lanes)
    n = len(lane)
    block, group = lane // ng, lane % ng
    tag = (raw & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    ts_lo = (raw >> np.uint64(32)).astype(np.int64)
    rtype = (tag & np.uint32(3)).astype(np.int8)

    scores = detect_layout(tag, block, group, ng)
    lay = get_layout(layout) if layout else LAYOUTS[choose(scores)]
    match = LayoutMatch(lay.name, "forced" if layout else "detected", scores)
    event = lay.event(tag)

    kind = np.full(n, -1, np.int8)  # -1: not an anomaly
    pos_ok = lay.position_matches(tag, block, group, ng)
    kind[~pos_ok] = _KIND["tag_mismatch"]
    kind[pos_ok & (rtype > lay.max_type)] = _KIND["unknown_type"]
    is_finalize = (rtype == 3) & (kind < 0)
    event = np.where(is_finalize, FINALIZE_EVENT, event)

    _check_names(buf, launch, event[(kind < 0) & ~is_finalize])
    if launch.names_source == "sidecar":
        unknown = (kind < 0) & ~is_finalize & (event >= len(launch.event_names))
        kind[unknown] = _KIND["unknown_event"]

    # Unwrap the kept records; anomalous ones are placed with their lane's neighbours for display only.
    keep = kind < 0
    ref_lo, base = _reference(launch, ts_lo[keep])
    t = np.zeros(n, np.int64)
    t[keep] = unwrap_lanes(lane[keep], ts_lo[keep], ref_lo)
    back = np.zeros(n, dtype=bool)
    back[keep] = backwards_mask(lane[keep], t[keep])
    kind[back] = _KIND["backwards"]
    keep &= ~back
    if (~keep).any():
        t[~keep] = _place(lane, keep, ts_lo, t)

    if base is None:  # relative time: the earliest kept record is 0
        origin = int(t[keep].min()) if keep.any() else 0
        time_origin = "first record"
    else:
        origin = -base
        time_origin = "host clock at launch" if launch.timer_anchor_ns is None else "kernel timer anchor"
    t -= origin

    sm = _sm_ids(lay, tag, block, launch.num_sms) if lay.has_sm else np.full(n, -1, np.int64)
    aliasing = _aliasing(lay, block, sm, keep, nb)

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
    ik_sorted = instance_index(_run_starts(lane[ii][io], event[ii][io]))
    ik = np.empty_like(ik_sorted)
    ik[io] = ik_sorted
    instants = Instants(
        lane=lane[ii], block=block[ii], group=group[ii], sm=sm[ii], event=event[ii], k=ik, seq=seq[ii], ts_ns=t[ii], rec=ii
    )

    ai = np.flatnonzero(kind >= 0)
    anomalies = Anomalies(
        kind=kind[ai], lane=lane[ai], block=block[ai], group=group[ai], sm=sm[ai], event=event[ai], seq=seq[ai],
        raw=raw[ai], ts_ns=t[ai], rec=ai,
    )
    notes, examples = _lane_notes(lay, lane, seq, rtype, keep, rows, rem, lanes, overlap, slices)
    seen = set(np.flatnonzero(np.bincount(event[pos_ok & (event >= 0)], minlength=1)).tolist())
    unused = tuple(nm for i, nm in enumerate(launch.event_names) if i not in seen)
    return Decoded(
        source=buf.name,
        launch=launch,
        layout=match,
        records=n,
        capacity_per_lane=rows + (1 if rem else 0),
        lanes_with_records=int(np.count_nonzero(segment_starts(lane))) if n else 0,
        slices=slices,
        instants=instants,
        anomalies=anomalies,
        notes=notes,
        note_examples=examples,
        aliasing=aliasing,
        time_origin=time_origin,
        origin_ns=origin,
        min_step_ns=_min_step(lane[keep], t[keep]),
        unused_names=unused,
    )


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


def _reference(launch, kept_ts_lo: np.ndarray) -> tuple[int, int | None]:
    """(reference low 32 bits, absolute ns of that reference or None for relative time)."""
    anchor = launch.timer_anchor_ns if launch.timer_anchor_ns is not None else launch.host_launch_unix_ns
    if anchor is not None:
        return anchor & 0xFFFFFFFF, anchor
    return (int(kept_ts_lo[0]) if len(kept_ts_lo) else 0), None


def _place(lane: np.ndarray, keep: np.ndarray, ts_lo: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Best-effort times for records left out of the unwrap: next to the lane's last kept record before them."""
    idx = np.arange(len(lane))
    last_kept = np.maximum.accumulate(np.where(keep, idx, -1))
    bad = np.flatnonzero(~keep)
    prev = last_kept[bad]
    ok = (prev >= 0) & (lane[np.maximum(prev, 0)] == lane[bad])
    out = np.zeros(len(bad), np.int64)
    p = prev[ok]
    out[ok] = t[p] + signed32(ts_lo[bad[ok]] - ts_lo[p])
    if (~ok).any():  # nothing kept before it on its lane: place it against the global reference
        ref = np.flatnonzero(keep)
        if len(ref):
            r = ref[0]
            out[~ok] = t[r] + signed32(ts_lo[bad[~ok]] - ts_lo[r])
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
    }


def _lane_notes(lay, lane, seq, rtype, keep, rows, rem, lanes, overlap, slices):
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
    trailing = lane[last][(rtype[last] == 2) & keep[last]] if not lay.instant_advances else lane[:0]
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
