"""NVIDIA IKET's JSON trace (``run-iket ... profile --postprocess json|all`` writes ``iket_pid_<pid>.trace.json``)
read into ktrace's model: a Decoded of phase slices and instants.

Checked against the traces of ``nvidia-cutlass-dsl`` 4.8.1 (IKET's JSON ``meta.version`` 1) on an H200, and NVIDIA's
documented shape ("JSON Trace Shape" in CUTLASS's ``iket_profiling.rst``). What the format holds: ``stringTable``
(names) and ``locationTable`` (per warp: ``smId``, ``tpcId``, ``gpcId``, ``ctaId`` [x, y, z], ``warpId``), then per
launch (``launches[]``, and ``graphLaunches`` for CUDA graphs) its grid and block shape, ``ranges[]`` (a name, a
start and end stamp, the warps that took part: ``warpLocIdxs``, start first), ``markers[]`` (a name, a stamp, a
warp, an optional scalar payload) and ``warpLifetimes[]`` (each warp's first and last stamp). Stamps are
``%globaltimer`` nanoseconds at a 32 ns step.

Into the model: a CTA is a block (its linear id x + X * (y + Y * z)), a warp (``lanes="warp"``, the default) or a
warp group of 4 warps (``lanes="warpgroup"``) a lane, a range a slice of the phase its name gives (stack and token
ranges alike, nesting kept), a marker an instant (its payload counted, not kept: the model has no value), and
each warp's lifetime two instants, ``warp start`` and ``warp exit``: the lane's true begin and end (a warp that
idles before its first range, or a warp with no range at all, shows as it is) without a phase of its own that
would compete with the kernel's phases in the findings. Times are from the launch's first stamp. Every record is
counted: a range is two records, a marker one, a lifetime two; a range that ends on another warp than it
started on is counted under its note and kept on its starting warp; one that ends before it starts is two
``backwards`` anomalies.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

from ..core.errors import InputError
from ..core.filetypes import is_iket
from ..core.model import ANOMALY_KINDS, Anomalies, Decoded, Instants, Launch, LayoutMatch
from ..core.names import cut_names
from ..core.terminal import excerpt
from .inflate import open_regular, read_bounded
from .launch import _work_value
from .options import IKET_OPTIONS
from .proton import _merge_groups, _slices, refuse_buffer_options  # one reading of a warp group's slices

__all__ = ["read_iket", "is_iket", "IKET_OPTIONS", "WARP_START", "WARP_EXIT"]

WARP_START, WARP_EXIT = "warp start", "warp exit"  # the instants each warp's lifetime becomes
LANE_MODES = ("warp", "warpgroup")
WARPS_PER_GROUP = 4
MAX_TRACE_BYTES = 256 << 20  # JSON parsed whole takes about 6 times its size: 1.5 GB at most
MAX_INFLATE_RATIO = 200
MIN_INFLATE_LIMIT = 16 << 20
MAX_WARPS = 64  # 2048 threads: more than any CTA holds
MAX_CTAS = 1 << 31  # CUDA's grid limit in x; y and z are smaller, and the product is bounded below
LANES_FREE = 1 << 22  # lanes always allowed; past it, a lane needs records (as for a Proton trace)
KERNEL_CHARS = 80  # the kernel's name as ktrace shows it, at most (IKET's JSON keeps the whole)
MAX_SPAN_NS = 10**12  # a launch longer than 1000 s is not one kernel's trace
_FIX = "copy the .trace.json run-iket wrote again (or redo it: run-iket postprocess)"


def _read(path: Path) -> bytes:
    return read_bounded(path, "an IKET trace", _FIX, max_bytes=MAX_TRACE_BYTES, ratio=MAX_INFLATE_RATIO,
                        min_limit=MIN_INFLATE_LIMIT, too_big="not one IKET trace of a few launches (profile fewer "
                        "launches, or one cluster: --enabled-cluster)")


def _bad(path, what: str) -> InputError:
    return InputError(f"{path}: {what}: not IKET's JSON trace as nvidia-cutlass-dsl 4.8 writes it; {_FIX}")


def _ints(path, rows: list, key: str, what: str, lo: int = 0, hi: int = (1 << 63) - 1) -> np.ndarray:
    """The ``key`` of every row as int64, each checked to be an integer in [lo, hi]."""
    try:
        vals = [r[key] for r in rows]
    except (KeyError, TypeError):
        raise _bad(path, f"a {what} without {key!r}") from None
    if not all(type(v) is int for v in vals):
        raise _bad(path, f"a {what}'s {key!r} is not an integer")
    if vals and (min(vals) < lo or max(vals) > hi):
        bad = next(v for v in vals if not lo <= v <= hi)
        raise _bad(path, f"a {what}'s {key!r} is {str(bad)[:24]}, outside {lo:,}..{hi:,}")
    return np.array(vals, dtype=np.int64)


def _table(path, doc: dict, key: str) -> list:
    t = doc.get(key)
    if not isinstance(t, list):
        raise _bad(path, f"no {key!r} list")
    return t


def _launches(path, doc: dict) -> list:
    out = list(_table(path, doc, "launches"))
    graphs = doc.get("graphLaunches") or {}
    if not isinstance(graphs, dict):
        raise _bad(path, "'graphLaunches' is not an object")
    for key in sorted(graphs):
        if not isinstance(graphs[key], list):
            raise _bad(path, f"graphLaunches[{str(key)[:40]!r}] is not a list")
        out.extend(graphs[key])
    if not all(isinstance(x, dict) for x in out):
        raise _bad(path, "a launch is not an object")
    return out


def _locations(path, table: list) -> dict:
    """The location table as columns: cta (x, y, z), warp, sm, tpc, gpc."""
    if not all(isinstance(r, dict) for r in table):
        raise _bad(path, "a locationTable entry is not an object")
    try:
        cta = [r["ctaId"] for r in table]
    except KeyError:
        raise _bad(path, "a location without 'ctaId'") from None
    if not all(isinstance(c, list) and len(c) == 3 and all(type(v) is int and 0 <= v < MAX_CTAS for v in c)
               for c in cta):
        raise _bad(path, "a location's 'ctaId' is not three CTA indices")
    cta = np.array(cta, dtype=np.int64).reshape(-1, 3)
    return {"cta": cta, "warp": _ints(path, table, "warpId", "location", 0, MAX_WARPS - 1),
            "sm": _ints(path, table, "smId", "location", 0, 1 << 16),
            "tpc": _ints(path, table, "tpcId", "location", 0, 1 << 16),
            "gpc": _ints(path, table, "gpcId", "location", 0, 1 << 16)}


def read_iket(path, *, lanes: str | None = None, launch=None, sidecar=None, events=None, groups=None,
              name: str | None = None, work_bytes=None, work_flops=None, peak_gbps=None, peak_tflops=None,
              **ignored) -> Decoded:
    """The Decoded of one launch of an IKET JSON trace (``launch``: its index among the trace's launches, graph
    launches after the others; needed when there are several; the work and peaks as for a buffer: the
    roofline's, over the sidecar's ``work``). Raises InputError with the file, the problem and what to do."""
    work = {k: _work_value(k, v) for k, v in (("work_bytes", work_bytes), ("work_flops", work_flops),
                                               ("peak_gbps", peak_gbps), ("peak_tflops", peak_tflops))}
    path = Path(str(path))
    lanes = lanes or "warp"
    if lanes not in LANE_MODES:
        raise InputError(f"--lanes {lanes!r}: one of {', '.join(LANE_MODES)}")
    refuse_buffer_options(path, dict(ignored, events=events, groups=groups),
                          "IKET traces (their CTAs, warps and range names are in the trace)")
    raw = _read(path)
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError) as e:
        raise _bad(path, f"not valid JSON ({str(e)[:80]})") from None
    del raw
    if not isinstance(doc, dict):
        raise _bad(path, "not a JSON object")
    strings = _table(path, doc, "stringTable")
    if not all(isinstance(s, str) for s in strings):
        raise _bad(path, "a stringTable entry is not a string")
    loc = _locations(path, _table(path, doc, "locationTable"))
    runs = _launches(path, doc)
    if not runs:
        raise InputError(f"{path}: holds no launch: no instrumented kernel ran under run-iket (see IKET's "
                         "'Empty or missing trace': the kernel must be JIT-compiled in the profiled process)")
    if launch is None:
        if len(runs) > 1:
            names = ", ".join(f"{i}: {excerpt(_text(r.get('kernelName', '?')))}" for i, r in enumerate(runs[:4]))
            raise InputError(f"{path}: holds {len(runs)} launches ({names}{', ...' if len(runs) > 4 else ''}): "
                             "ktrace reads one; pick it with --launch N")
        launch = 0
    try:
        index = int(launch)
    except (TypeError, ValueError):
        raise InputError(f"--launch {str(launch)[:24]!r}: give a launch's index, 0 to {len(runs) - 1}") from None
    if not 0 <= index < len(runs):
        raise InputError(f"--launch {index}: {path} holds {len(runs)} launch(es), 0 to {len(runs) - 1}")
    run = runs[index]
    version = doc.get("meta", {}).get("version") if isinstance(doc.get("meta"), dict) else None
    return _decoded(path, run, strings, loc, lanes, index, len(runs), version, sidecar, name, work)


def _clean(s: str) -> str:
    return "".join(c if c.isprintable() else "?" for c in s)


def _text(v, chars: int = 4096) -> str:
    """A value of the trace as text of at most ``chars`` characters (cut before it is looked at: a name of the
    trace may have hundreds of millions)."""
    return (v if isinstance(v, str) else str(v)[:chars] if isinstance(v, (int, float, bool)) or v is None
            else f"<{type(v).__name__}>")[:chars]


def _dims(path, run: dict, prefix: str) -> tuple[int, int, int]:
    dims = tuple(run.get(f"{prefix}Dim{a}") for a in "XYZ")
    if not all(type(d) is int and 1 <= d < MAX_CTAS for d in dims):
        raise _bad(path, f"the launch's {prefix}Dim is not three positive integers")
    return dims


def _rows(path, run: dict, key: str) -> list:
    rows = run.get(key, [])
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise _bad(path, f"the launch's {key!r} is not a list of objects")
    return rows


def _decoded(path, run, strings, loc, lanes, index, count, version, sidecar, name, work) -> Decoded:
    grid, block = _dims(path, run, "grid"), _dims(path, run, "block")
    nloc = len(loc["warp"])
    ranges, markers, lifes = _rows(path, run, "ranges"), _rows(path, run, "markers"), _rows(path, run, "warpLifetimes")
    records = 2 * len(ranges) + len(markers) + 2 * len(lifes)
    ncta = grid[0] * grid[1] * grid[2]
    nwarps = -(-(block[0] * block[1] * block[2]) // 32)
    if nwarps > MAX_WARPS:
        raise _bad(path, f"a block of {block[0] * block[1] * block[2]:,} threads")
    ng = nwarps if lanes == "warp" else -(-nwarps // WARPS_PER_GROUP)
    if ncta * ng > LANES_FREE + 16 * records:
        raise _bad(path, f"a grid of {ncta:,} CTAs x {ng} lanes for {records:,} records")
    cx, cy, cz = loc["cta"].T
    if nloc and ((cx >= grid[0]).any() or (cy >= grid[1]).any() or (cz >= grid[2]).any()):
        raise _bad(path, f"a location's ctaId lies outside the launch's grid {grid}")
    loc_block = cx + grid[0] * (cy + grid[1] * cz)
    loc_group = loc["warp"] if lanes == "warp" else loc["warp"] // WARPS_PER_GROUP

    # ranges: name, start, end, the warps (first = where it started)
    r_name = _ints(path, ranges, "rangeNameIdx", "range", 0, max(len(strings) - 1, 0))
    r_begin = _ints(path, ranges, "startTs", "range")
    r_end = _ints(path, ranges, "endTs", "range")
    try:
        warps = [r["warpLocIdxs"] for r in ranges]
    except KeyError:
        raise _bad(path, "a range without 'warpLocIdxs'") from None
    if not all(isinstance(w, list) and w and all(type(i) is int and 0 <= i < nloc for i in w) for w in warps):
        raise _bad(path, "a range's warpLocIdxs is not a list of locationTable indices")
    r_loc = np.array([w[0] for w in warps], dtype=np.int64)
    r_last = np.array([w[-1] for w in warps], dtype=np.int64)
    internal = sum(max(0, len(r.get("internalEvents") or ()) - 2) for r in ranges)
    del warps
    m_name = _ints(path, markers, "markerNameIdx", "marker", 0, max(len(strings) - 1, 0))
    m_ts = _ints(path, markers, "timestamp", "marker")
    m_loc = _ints(path, markers, "locIdx", "marker", 0, max(nloc - 1, 0))
    l_begin = _ints(path, lifes, "startTs", "warp lifetime")
    l_end = _ints(path, lifes, "endTs", "warp lifetime")
    l_loc = _ints(path, lifes, "locIdx", "warp lifetime", 0, max(nloc - 1, 0))

    stamps = [a for a in (r_begin, m_ts, l_begin) if len(a)]
    if not stamps:
        raise InputError(f"{path}: launch {index} holds no range, marker or warp lifetime: nothing to analyze")
    origin = int(min(a.min() for a in stamps))
    last = int(max(a.max() for a in (r_end, m_ts, l_end) if len(a)))
    if last - origin > MAX_SPAN_NS:
        raise _bad(path, f"stamps {last - origin:,} ns apart in one launch")

    notes: dict = {}
    examples: dict = {}
    backwards = r_end < r_begin
    if backwards.any():
        notes["iket_backwards"] = int(backwards.sum())
        examples["iket_backwards"] = [f"'{excerpt(strings[int(r_name[i])], 32)}' ends {int(r_begin[i] - r_end[i])} ns "
                                      "before it starts" for i in np.flatnonzero(backwards)[:3]]
    crossed = (r_last != r_loc) & ~backwards
    if crossed.any():
        notes["iket_cross_warp"] = int(crossed.sum())
    if internal:
        notes["iket_internal_events"] = internal
    keep = ~backwards
    # phases: the range names in order of first begin
    used = np.unique(r_name[keep])
    first = np.array([r_begin[keep][r_name[keep] == u].min() for u in used], dtype=np.int64) if len(used) else used
    order = used[np.argsort(first, kind="stable")]
    remap = np.full(max(len(strings), 1), -1, np.int64)
    remap[order] = np.arange(len(order))
    # every name bounded before anything is sized from it (its clean copy, the trace's interned names)
    raw_names = [strings[int(i)] for i in order] + [strings[int(i)] for i in np.unique(m_name)]
    names, cut = cut_names(raw_names)
    if cut:
        notes["names_cut"] = len(cut)
        examples["names_cut"] = [excerpt(raw_names[i], 32) for i in cut[:3]]
    del raw_names
    names = [_clean(n) for n in names]
    phase_names = names[:len(order)]
    # instants after the phases: each warp's start and exit (its lifetime), then the markers' names
    start_event, exit_event = len(phase_names), len(phase_names) + 1
    m_used = np.unique(m_name)
    m_remap = np.full(max(len(strings), 1), -1, np.int64)
    m_remap[m_used] = np.arange(len(phase_names) + 2, len(phase_names) + 2 + len(m_used))
    instant_names = [WARP_START, WARP_EXIT] + names[len(order):]

    s_loc = r_loc[keep]
    s_ev = remap[r_name[keep]]
    s_begin = r_begin[keep] - origin
    s_end = r_end[keep] - origin
    blk, grp = loc_block[s_loc], loc_group[s_loc]
    sm = loc["sm"][s_loc]
    if lanes == "warpgroup":
        blk, grp, sm, s_ev, s_begin, s_end = _merge_groups(blk, loc["warp"][s_loc], grp, sm, s_ev, s_begin, s_end)
    slices = _slices(blk * ng + grp, blk, grp, sm, s_ev, s_begin, s_end)

    i_loc = np.concatenate([m_loc, l_loc, l_loc])
    i_ev = np.concatenate([m_remap[m_name], np.full(len(l_loc), start_event, np.int64),
                           np.full(len(l_loc), exit_event, np.int64)])
    i_ts = np.concatenate([m_ts, l_begin, l_end]) - origin
    instants = _instants(loc_block[i_loc] * ng + loc_group[i_loc], loc_block[i_loc], loc_group[i_loc], loc["sm"][i_loc],
                         i_ev, i_ts)
    bad = np.flatnonzero(backwards)
    b_loc = np.repeat(r_loc[bad], 2)
    anomalies = Anomalies(
        kind=np.full(len(b_loc), list(ANOMALY_KINDS).index("backwards"), np.int8), lane=loc_block[b_loc] * ng +
        loc_group[b_loc], block=loc_block[b_loc], group=loc_group[b_loc], sm=loc["sm"][b_loc],
        event=np.full(len(b_loc), -1, np.int64), seq=np.zeros(len(b_loc), np.int64), raw=np.zeros(len(b_loc), np.uint64),
        ts_ns=np.stack([r_begin[bad], r_end[bad]], axis=1).reshape(-1) - origin, rec=np.zeros(len(b_loc), np.int64))
    slices, instants, anomalies = _number_records(slices, instants, anomalies)
    payloads = [r.get("payloadVal") for r in markers]
    if any(p is not None for p in payloads):
        notes["iket_payloads"] = sum(p is not None for p in payloads)
        examples["iket_payloads"] = [f"{excerpt(strings[int(m_name[i])], 32)}={excerpt(_text(payloads[i], 64), 24)}"
                                     for i in range(len(payloads)) if payloads[i] is not None][:3]
    kept = np.bincount(slices.lane, minlength=ncta * ng) * 2 + np.bincount(instants.lane, minlength=ncta * ng)
    gpc_of_block = np.full(ncta, -1, np.int64)
    gpc_of_block[loc_block] = loc["gpc"]
    seen_gpc = tuple(gpc_of_block.tolist()) if ncta <= 1 << 20 else None
    group_names = (tuple(f"warp {w}" for w in range(ng)) if lanes == "warp" else
                   tuple(f"warps {g * WARPS_PER_GROUP}-{min(nwarps, (g + 1) * WARPS_PER_GROUP) - 1}"
                         for g in range(ng)))
    kernel = _clean(_text(run.get("kernelName", "kernel"), KERNEL_CHARS + 1)) or "kernel"
    if len(kernel) > KERNEL_CHARS:  # CuTe DSL mangles the arguments into the name: its start says which kernel
        kernel = kernel[:KERNEL_CHARS - 3] + "..."
    meta = _sidecar(path, sidecar)
    launch = Launch(
        num_blocks=ncta, num_groups=ng, kernel=kernel, grid=grid, block_dim=block,
        device=meta.get("device") if isinstance(meta.get("device"), str) else None,
        num_sms=meta.get("num_sms") if type(meta.get("num_sms")) is int and 0 < meta["num_sms"] <= 1 << 16 else None,
        control_median_us=_positive(meta.get("control_median_us")), block_gpc=seen_gpc,
        **_work(meta, work, side=meta.get("_path")),
        event_names=tuple(phase_names + instant_names), group_names=group_names, names_source="file",
        sidecar=meta.get("_path"), producer="iket", producer_version=_version(version, meta, index, count, len(np.unique(loc["gpc"]))), timer_tick_ns=32, capacity_per_lane=int(kept.max()) if len(kept)
        else 0)
    return Decoded(
        source=name or str(path), launch=launch, layout=LayoutMatch("iket", "detected", {"iket": 1.0}),
        records=records, capacity_per_lane=launch.capacity_per_lane,
        lanes_with_records=int(np.count_nonzero(kept)), slices=slices, instants=instants, anomalies=anomalies,
        notes=notes, note_examples=examples, time_origin="IKET's %globaltimer stamps, from the launch's first",
        origin_ns=0, min_step_ns=32, seen_events=frozenset(range(len(phase_names) + len(instant_names))),
        lane_range=(0, ncta * ng))


def _work(meta: dict, given: dict, side) -> dict:
    """The roofline's figures: the options over the sidecar's ``work`` ({"bytes": N, "flops": N}), each checked."""
    w = meta.get("work") if isinstance(meta.get("work"), dict) else {}
    out = {}
    for key, field in (("work_bytes", "bytes"), ("work_flops", "flops")):
        v = given.get(key)
        if v is None and w.get(field) is not None:
            try:
                v = _work_value(key, w[field])
            except InputError as e:
                raise InputError(f"{side}: work.{field}: {str(e).split(': ', 1)[-1]}; fix the sidecar, or give "
                                 f"--{field}") from None
        out[key] = v
    out["peak_gbps"], out["peak_tflops"] = given.get("peak_gbps"), given.get("peak_tflops")
    return out


def _positive(v) -> float | None:
    return float(v) if type(v) in (int, float) and 0 < v < 1e9 else None


def _version(fmt, meta: dict, index: int, count: int, gpcs: int) -> str:
    """IKET's JSON format version, the CuTe DSL's (the sidecar's ``iket_version``) when known, which launch was
    read and on how many GPCs it ran."""
    dsl = meta.get("iket_version")
    return (f"JSON format {_clean(_text(fmt, 16))}" +
            (f", nvidia-cutlass-dsl {_clean(dsl[:32])}" if isinstance(dsl, str) else ", CuTe DSL version not said") +
            f"; launch {index} of {count}, on {gpcs} GPC{'s' if gpcs != 1 else ''}")


def _sidecar(path: Path, sidecar) -> dict:
    """The sidecar (``<stem>.json`` beside ``<stem>.trace.json``), if any: device, num_sms, iket_version."""
    if sidecar is False:
        return {}
    if sidecar in (None, True):
        stem = re.sub(r"(\.trace)?\.json(\.gz)?$", "", path.name, flags=re.I)
        side = path.with_name(stem + ".json")
        if side == path or not side.is_file():
            return {}
    else:
        side = Path(sidecar)
    try:
        with open_regular(side, "a sidecar", "give --sidecar PATH or --no-sidecar") as f:
            meta = json.loads(f.read(1 << 24))
    except OSError as e:
        raise InputError(f"{side}: the sidecar cannot be read ({e}); give --sidecar PATH or --no-sidecar") from None
    except ValueError as e:
        raise InputError(f"{side}: the sidecar is not valid JSON ({str(e)[:80]}); fix it, or pass --no-sidecar") from None
    if not isinstance(meta, dict):
        raise InputError(f"{side}: the sidecar is not a JSON object; fix it, or pass --no-sidecar")
    meta["_path"] = str(side)
    return meta


def _instants(lane, block, group, sm, event, ts) -> Instants:
    o = np.lexsort((ts, lane))
    lane, block, group, sm, event, ts = (x[o] for x in (lane, block, group, sm, event, ts))
    n = len(lane)
    ko = np.lexsort((np.arange(n), event, lane))
    key = np.stack([lane[ko], event[ko]]) if n else np.zeros((2, 0), np.int64)
    new = np.ones(n, bool)
    if n:
        new[1:] = (key[:, 1:] != key[:, :-1]).any(axis=0)
    s = np.flatnonzero(new)
    k = np.empty(n, np.int64)
    k[ko] = np.arange(n) - np.repeat(s, np.diff(np.append(s, n)))
    seq = np.zeros(n, np.int64)
    return Instants(lane=lane, block=block, group=group, sm=sm, event=event, k=k, seq=seq, ts_ns=ts,
                    rec=np.arange(n, dtype=np.int64))


def _number_records(slices, instants, anomalies):
    """Every record's place in (lane, time) order, one numbering for slices' BEGINs and ENDs, instants and
    anomalies (at one time: an END, then an instant or anomaly, then a BEGIN; an inner END before its outer
    one, an outer BEGIN before its inner one), and each record's sequence number within its lane."""
    n, m, a = len(slices.lane), len(instants.lane), len(anomalies.lane)
    idx = np.arange(n)
    lane = np.concatenate([slices.lane, slices.lane, instants.lane, anomalies.lane])
    time = np.concatenate([slices.begin_ns, slices.end_ns, instants.ts_ns, anomalies.ts_ns])
    kind = np.concatenate([np.full(n, 2), np.zeros(n, np.int64), np.ones(m + a, np.int64)])
    tie = np.concatenate([idx, -idx, np.arange(m + a)])
    order = np.lexsort((tie, kind, time, lane))
    rank = np.empty(len(lane), np.int64)
    rank[order] = np.arange(len(lane))
    first = np.searchsorted(lane[order], lane, side="left")
    seq = rank - first
    from dataclasses import replace

    slices = replace(slices, begin_rec=rank[:n], end_rec=rank[n:2 * n], begin_seq=seq[:n], end_seq=seq[n:2 * n])
    instants = replace(instants, rec=rank[2 * n:2 * n + m], seq=seq[2 * n:2 * n + m])
    anomalies = replace(anomalies, rec=rank[2 * n + m:], seq=seq[2 * n + m:])
    return slices, instants, anomalies
