"""The track tree of a trace: launch, then SM, block, warp group (or flatter), with numeric sibling order.

What belongs to a lane is said once, on its track, not on every record: the lane track's ``description`` is
``block B · group G · SM S`` (``SM ?`` when the SM id cannot be trusted), which the SQL package reads back
(``ktrace.lanes``). A record whose SM differs from its block's (a damaged tag) carries its own ``sm`` arg.

Track uuids are small for lane tracks (they are written with every event) and tagged by kind otherwise. A
trace holding several GPUs' launches (``ktrace merge``) gives each its own range: every uuid plus
``uuid_offset`` (a multiple of ``GPU_UUID_STRIDE``), under a per-GPU process track.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..core.choices import TRACK_MODES
from ..core.model import Decoded
from ..core.records import frozen

__all__ = ["TrackTree", "TrackState", "build_tracks", "launch_track", "lane_description", "TRACK_MODES", "LAUNCH_UUID",
           "PROCESS_UUID", "GPU_UUID_STRIDE"]

LAUNCH_UUID = 1 << 44
PROCESS_UUID = 1 << 45  # a merged trace's per-GPU process track (plus the GPU's uuid_offset)
GPU_UUID_STRIDE = 1 << 48  # uuid_offset of the i-th GPU of a merged trace: i * GPU_UUID_STRIDE
BLOCK_BASE = 1 << 42  # a block's track, when its warp groups have tracks of their own
SM_BASE = 1 << 43  # an SM's track: SM_BASE + sm + 1 (sm = -1: SM ids that cannot be trusted)


@frozen
class Track:
    uuid: int
    parent: int | None
    name: str
    rank: int | None  # sibling_order_rank under an EXPLICIT parent
    description: str = ""  # a lane track's block, group and SM (lane_description)


@frozen
class TrackTree:
    tracks: list  # Track, parents before children
    lane_uuid: np.ndarray  # uuid of each lane's track, indexed by lane
    overlap_uuid: dict  # (lane, event) -> uuid of the child track for partially overlapping slices
    block_sm: np.ndarray  # the SM its lane tracks say, per block (-1: untrusted); a record differing says its own


def lane_description(block: int, group: int, sm: int) -> str:
    """A lane track's description: what every record of the lane shares (docs/trace-format.md, "Tracks")."""
    return f"block {block} · group {group} · {_sm_label(sm)}"


def _sm_label(sm: int) -> str:
    return f"SM {sm}" if sm >= 0 else "SM ?"


@dataclass
class TrackState:
    """What earlier parts of a streamed trace already declared: SM tracks and overlap track uuids."""

    sms: set
    next_uuid: int

    @staticmethod
    def new(d) -> "TrackState":
        """Nothing declared yet; d: anything with the ``launch`` (a Decoded, a BufferDecoder)."""
        return TrackState(set(), d.launch.num_blocks * d.launch.num_groups + 1)


def launch_track(d, uuid_offset: int = 0, parent: int | None = None) -> Track:
    return Track(LAUNCH_UUID + uuid_offset, parent, _launch_name(d), None)


def build_tracks(d: Decoded, mode: str = "sm", state: TrackState | None = None, uuid_offset: int = 0) -> TrackTree:
    """The tracks for a decoded buffer or part of one (not the launch track). Only lanes with records get
    tracks; with a ``state``, SM tracks already declared by earlier parts are not declared again.
    uuid_offset is added to every uuid (a merged trace's GPU range)."""
    tree = _build_tracks(d, mode, state)
    if not uuid_offset:
        return tree
    return TrackTree([replace(t, uuid=t.uuid + uuid_offset, parent=None if t.parent is None else t.parent + uuid_offset)
                      for t in tree.tracks],
                     tree.lane_uuid + uuid_offset, {k: u + uuid_offset for k, u in tree.overlap_uuid.items()},
                     tree.block_sm)


def _build_tracks(d: Decoded, mode: str, state: TrackState | None) -> TrackTree:
    L = d.launch
    ng = L.num_groups
    state = state or TrackState.new(d)
    lanes_present = _present(np.concatenate([d.slices.lane, d.instants.lane, d.anomalies.lane]))
    lane_uuid = np.zeros(L.num_blocks * ng, np.int64)
    tracks = []
    # The SM of a block: from its first slice/instant/anomaly record (all its records carry the same).
    block_sm = _block_sm(d)
    blocks = _present(lanes_present // ng)
    if mode == "sm":
        for sm in (_present(block_sm[blocks] + 1) - 1).tolist():
            if sm in state.sms:
                continue
            state.sms.add(sm)
            rank = sm if sm >= 0 else 1 << 20
            tracks.append(Track(SM_BASE + sm + 1, LAUNCH_UUID, _sm_label(sm), rank))
    for b in blocks.tolist():
        lanes = lanes_present[lanes_present // ng == b] if ng > 1 else np.array([b])
        # Without SM tracks, the block's track name says its SM (slices carry no sm arg to say it).
        block_name = f"block {b}" if mode == "sm" else f"block {b} · {_sm_label(int(block_sm[b]))}"
        if mode == "flat":
            for ln in lanes.tolist():
                g = ln % ng
                name = block_name if ng == 1 else f"{block_name} / {L.group_name(g)}"
                tracks.append(Track(ln + 1, LAUNCH_UUID, name, ln, lane_description(b, g, int(block_sm[b]))))
                lane_uuid[ln] = ln + 1
            continue
        parent = SM_BASE + int(block_sm[b]) + 1 if mode == "sm" else LAUNCH_UUID
        if ng == 1:
            tracks.append(Track(b + 1, parent, block_name, b, lane_description(b, 0, int(block_sm[b]))))
            lane_uuid[b] = b + 1
            continue
        tracks.append(Track(BLOCK_BASE + b, parent, block_name, b))
        for ln in lanes.tolist():
            g = ln % ng
            tracks.append(Track(ln + 1, BLOCK_BASE + b, L.group_name(g), g, lane_description(b, g, int(block_sm[b]))))
            lane_uuid[ln] = ln + 1
    overlap_uuid = {}
    s = d.slices
    if s.overlap.any():
        pairs = np.unique(np.stack([s.lane[s.overlap], s.event[s.overlap]]), axis=1)
        for ln, ev in pairs.T.tolist():
            uuid = state.next_uuid
            state.next_uuid += 1
            lane_name = f"block {ln // ng}" if ng == 1 else f"block {ln // ng} / {L.group_name(ln % ng)}"
            tracks.append(Track(uuid, int(lane_uuid[ln]), f"{lane_name} · overlapping {L.event_name(ev)}", ev))
            overlap_uuid[(ln, ev)] = uuid
    return TrackTree(tracks, lane_uuid, overlap_uuid, block_sm)


def _present(x: np.ndarray) -> np.ndarray:
    """Sorted distinct values of non-negative ints in a narrow range (cheaper than np.unique)."""
    if len(x) == 0:
        return x.astype(np.int64)
    lo = int(x.min())
    return np.flatnonzero(np.bincount(x - lo)) + lo


def _block_sm(d: Decoded) -> np.ndarray:
    sm = np.full(d.launch.num_blocks, -1, np.int64)
    for part in (d.anomalies, d.instants, d.slices):  # later parts win: slices are the most trusted
        if len(part.block):
            sm[part.block] = part.sm
    return sm


def _launch_name(d) -> str:
    # Short, so the track list shows it whole; the grid and the rest are the launch slice's args.
    return f"{d.launch.kernel} launch"
