"""Triton Proton's intra-kernel trace (``proton.start(NAME, data="trace", backend="instrumentation")``, the
``NAME.chrome_trace`` it writes) read into ktrace's model: a Decoded of phase slices.

What the format holds: one Chrome "process" per CTA, ``KERNEL CoreN CTAm`` (SM N, block m), one "thread"
per warp and display line, ``warp i (line j)``, and one complete event (``"ph": "X"``) per scope instance,
named by the scope. Its times mix two clocks: each CTA's first scope starts at the CTA's %globaltimer time
(ns, from the earliest CTA), and everything inside a CTA is SM cycles (``%clock64``) printed as if the SM
ran at 1 GHz (``"Frequency (MHz)": 1000``), as float32 microseconds. So a CTA's start is exact to the
timer's step; its scopes are ``cycles / clock`` after it, converted here with the SM clock (``sm_clock_mhz``;
else the sidecar's; else ``ktrace calibrate``'s cache; else Proton's 1 GHz, said so).

What it lacks: instants, the grid's shape and the SM count (a sidecar may add them), which launch an
event is from when a kernel ran twice in one session, and what Proton's circular buffer dropped: Proton
prints ``Warning (ctaC, warpW): first N events are dropped ...`` on stderr (a sidecar's
``proton_warnings``/``proton_dropped``, or ``proton_log``, a file of those lines, gives the counts). With
drops, Proton also moves a CTA's earliest kept scope to the CTA's start, so that CTA's times are shifted.

Lanes: ``lanes="warp"`` (one lane per warp, group = warp) or ``"warpgroup"`` (group = warp // 4; each
scope instance spans its warps' earliest begin to their latest end).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np

from ..core.errors import InputError
from ..core.filetypes import is_proton
from ..core.model import Anomalies, Decoded, Instants, Launch, LayoutMatch, Slices
from ..core.terminal import excerpt
from .options import PROTON_OPTIONS
from .proton_events import LANES_FREE, LANES_PER_EVENT, read_events

__all__ = ["is_proton", "read_proton", "PROTON_OPTIONS", "LANE_MODES", "PROTON_MHZ", "parse_drops"]

LANE_MODES = ("warp", "warpgroup")
PROTON_MHZ = 1000.0  # the clock Proton's writer assumes when it prints cycles as time
WARPS_PER_GROUP = 4
_DROP = re.compile(r"\(cta(\d+), warp(\d+)\): first (\d+) events are dropped[^(]*\((\d+)/(\d+)\)")


def parse_drops(text: str) -> dict:
    """{(cta, warp): (dropped, kept, count)} from Proton's ``first N events are dropped`` warnings."""
    return {(int(c), int(w)): (int(n), int(k), int(t)) for c, w, n, k, t in _DROP.findall(text)}


def _sidecar(path: Path, sidecar) -> tuple[dict, Path | None]:
    if sidecar is False:
        return {}, None
    if sidecar in (None, True):
        name = path.name
        stem = re.sub(r"(\.chrome_trace|\.json)?(\.gz)?$", "", name, flags=re.I)
        side = path.with_name(stem + ".json")
        if side == path or not side.is_file():
            return {}, None
    else:
        side = Path(sidecar)
    try:
        meta = json.loads(side.read_text())
    except OSError as e:
        raise InputError(f"{side}: the sidecar cannot be read ({e.strerror}); give --sidecar PATH or --no-sidecar") from None
    except ValueError as e:
        raise InputError(f"{side}: the sidecar is not valid JSON ({e}); fix it, or pass --no-sidecar") from None
    if not isinstance(meta, dict):
        raise InputError(f"{side}: the sidecar is not a JSON object; fix it, or pass --no-sidecar")
    return meta, side


def _calibrated_mhz(device: str | None) -> float | None:
    """The SM clock ``ktrace calibrate`` cached (its cache folder, read without a GPU): the device named by
    the sidecar, else the one device cached."""
    root = os.environ.get("KTRACE_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "ktrace")
    found = {}
    for f in sorted(Path(root, "calibration").glob("*.json")):
        try:
            c = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        mhz = c.get("sm_clock_mhz") if isinstance(c, dict) else None
        if isinstance(mhz, (int, float)) and mhz > 0:
            found.setdefault(str(c.get("device")), float(mhz))
    if device and device in found:
        return found[device]
    return next(iter(found.values())) if len(set(found.values())) == 1 else None


def _clock(path, meta: dict, side, given, device) -> tuple[float, str]:
    if given is not None:
        try:
            mhz = float(given)
        except (TypeError, ValueError):
            raise InputError(f"--sm-clock {given!r}: give the SM clock in MHz, e.g. --sm-clock 1980") from None
        if not 1.0 <= mhz <= 100_000.0:
            raise InputError(f"--sm-clock {given}: {mhz:g} MHz is no SM clock; give it in MHz, e.g. 1980")
        return mhz, "--sm-clock"
    mhz = meta.get("sm_clock_mhz")
    if mhz is not None:
        if not isinstance(mhz, (int, float)) or isinstance(mhz, bool) or not 1.0 <= mhz <= 100_000.0:
            raise InputError(f"{side}: sm_clock_mhz {excerpt(repr(mhz))} is no SM clock in MHz; fix it, or give "
                             "--sm-clock MHZ")
        return float(mhz), f"the sidecar ({Path(side).name})"
    mhz = _calibrated_mhz(device)
    if mhz:
        return mhz, "ktrace calibrate's cache"
    return PROTON_MHZ, ("Proton's assumed 1 GHz (no --sm-clock, sidecar or ktrace calibrate cache): durations "
                        "are cycles / 1000, too long by the SM clock's ratio to 1 GHz")


def refuse_buffer_options(path, options: dict, not_these: str) -> None:
    """InputError naming every option in ``options`` given a value (not None or False): they apply to profiler
    buffers, not to ``not_these`` (a trace whose lanes and names are in the trace itself)."""
    given = sorted(k for k, v in options.items() if v not in (None, False))
    if given:
        flags = ", ".join("--" + {"work_bytes": "bytes", "work_flops": "flops"}.get(k, k).replace("_", "-")
                          for k in given)
        raise InputError(f"{path}: {flags} {'apply' if len(given) > 1 else 'applies'} to profiler buffers, not "
                         f"{not_these}")


def read_proton(path, *, lanes: str | None = None, sm_clock_mhz=None, proton_log=None, sidecar=None,
                events=None, groups=None, name: str | None = None, **ignored) -> Decoded:
    """The Decoded of a Proton trace: a slice per scope instance, on lane (CTA, warp) or (CTA, warp group).

    Times in ns from the earliest CTA's start. Raises InputError for a file that is not one kernel's Proton
    trace, with the file, the problem and what to do."""
    path = Path(str(path))
    lanes = lanes or "warp"
    if lanes not in LANE_MODES:
        raise InputError(f"--lanes {lanes!r}: one of {', '.join(LANE_MODES)}")
    refuse_buffer_options(path, dict(ignored, events=events, groups=groups),
                          "Proton traces (their CTAs, warps and scope names are in the trace)")
    ts, dur, cta, core, warp, ev, names, kernels, unused, cut = read_events(path)
    ncta, nwarps = int(cta.max()) + 1, int(warp.max()) + 1
    if ncta * nwarps > LANES_FREE + LANES_PER_EVENT * len(ts):
        raise InputError(f"{path}: CTA ids up to {ncta - 1:,} and warp ids up to {nwarps - 1:,} make "
                         f"{ncta * nwarps:,} lanes for {len(ts):,} events: not Proton's numbering (CTAs and warps "
                         "are counted from 0); a damaged trace? Copy the one Proton wrote again")

    meta, side = _sidecar(path, sidecar)
    device = meta.get("device") if isinstance(meta.get("device"), str) else None
    mhz, clock_source = _clock(path, meta, side, sm_clock_mhz, device)

    # cycles since the CTA's earliest scope (Proton's print: cycles / 1000 as float32 us); each CTA's start is
    # a %globaltimer offset in ns
    b_cyc, d_cyc = np.rint(ts * 1000.0).astype(np.int64), np.rint(dur * 1000.0).astype(np.int64)
    base = np.full(ncta, np.iinfo(np.int64).max, np.int64)
    np.minimum.at(base, cta, b_cyc)
    scale = 1000.0 / mhz
    begin = base[cta] + np.rint((b_cyc - base[cta]) * scale).astype(np.int64)
    end = begin + np.rint(d_cyc * scale).astype(np.int64)

    drops = _drops(meta, proton_log, path)
    if lanes == "warpgroup":
        group = warp // WARPS_PER_GROUP
        ng = -(-nwarps // WARPS_PER_GROUP)
        cta, group, core, ev, begin, end = _merge_groups(cta, warp, group, core, ev, begin, end)
        group_names = tuple(f"warps {g * WARPS_PER_GROUP}-{min(nwarps, (g + 1) * WARPS_PER_GROUP) - 1}"
                            for g in range(ng))
    else:
        group, ng = warp, nwarps
        group_names = tuple(f"warp {w}" for w in range(ng))
    # event indices in order of first begin: the kernel's phases as they run
    first = np.full(len(names), np.iinfo(np.int64).max, np.int64)
    np.minimum.at(first, ev, begin)
    order = np.argsort(first, kind="stable")
    remap = np.empty(len(names), np.int64)
    remap[order] = np.arange(len(names))
    ev = remap[ev]
    names = [names[i] for i in order]

    slices = _slices(cta * ng + group, cta, group, core, ev, begin, end)
    kept = np.bincount(slices.lane, minlength=ncta * ng) * 2
    notes, examples, lost = _drop_notes(drops, lanes, ng, kept)
    if unused:
        notes["proton_unused"] = sum(unused.values())
        examples["proton_unused"] = [f"{n:,} {why}" for why, n in unused.items()]
    if cut:
        notes["names_cut"] = len(cut)
        examples["names_cut"] = cut[:3]
    launch = Launch(
        num_blocks=ncta, num_groups=ng, kernel=kernels[0],
        grid=tuple(meta["grid"]) if isinstance(meta.get("grid"), list) else (ncta,),
        device=device, num_sms=meta.get("num_sms") if isinstance(meta.get("num_sms"), int) else None,
        event_names=tuple(names), group_names=group_names, names_source="file",
        sidecar=str(side) if side else None, producer="proton",
        capacity_per_lane=int(kept.max()) if len(kept) else 0)
    origin = (f"CTA starts by %globaltimer (Proton); scope times SM cycles at {mhz:g} MHz, from {clock_source}")
    none = np.zeros(0, np.int64)
    return Decoded(
        source=name or str(path), launch=launch, layout=LayoutMatch("proton", "detected", {"proton": 1.0}),
        records=2 * len(slices), capacity_per_lane=launch.capacity_per_lane,
        lanes_with_records=int(np.count_nonzero(kept)), slices=slices,
        instants=Instants(*(none,) * 9),
        anomalies=Anomalies(np.zeros(0, np.int8), *(none,) * 6, np.zeros(0, np.uint64), none, none),
        notes=notes, note_examples=examples, time_origin=origin, origin_ns=0,
        min_step_ns=None, seen_events=frozenset(range(len(names))), lane_range=(0, ncta * ng),
        dropped_records=lost)


def _drops(meta: dict, proton_log, path) -> dict:
    text = ""
    if proton_log:
        try:
            text = Path(proton_log).read_text(errors="replace")
        except OSError as e:
            raise InputError(f"{proton_log}: Proton's log cannot be read ({e.strerror}); give the file its "
                             "stderr went to (--proton-log)") from None
    warnings = meta.get("proton_warnings")
    if isinstance(warnings, list):
        text += "\n" + "\n".join(map(str, warnings))
    out = parse_drops(text)
    for d in meta.get("proton_dropped") or []:
        if isinstance(d, dict) and all(isinstance(d.get(k), int) for k in ("cta", "warp", "dropped")):
            out.setdefault((d["cta"], d["warp"]), (d["dropped"], d.get("kept", 0), d.get("count", 0)))
    return out


def _drop_notes(drops: dict, lanes: str, ng: int, kept) -> tuple[dict, dict, int]:
    if not drops:
        return {}, {}, 0
    lane_drop: dict = {}
    for (c, w), (n, _, _) in sorted(drops.items()):
        g = w // WARPS_PER_GROUP if lanes == "warpgroup" else w
        lane_drop[(c, g)] = lane_drop.get((c, g), 0) + n
    ex = [{"block": c, "group": g, "dropped": n} for (c, g), n in list(lane_drop.items())[:3]]
    return {"proton_dropped": len(lane_drop)}, {"proton_dropped": ex}, sum(n for n, _, _ in drops.values())


def _merge_groups(cta, warp, group, core, ev, begin, end):
    """One slice per (CTA, warp group, scope, k-th instance): its warps' earliest begin to latest end."""
    o = np.lexsort((begin, ev, warp, cta))
    cta, warp, group, core, ev, begin, end = (x[o] for x in (cta, warp, group, core, ev, begin, end))
    key = np.stack([cta, warp, ev])
    new = np.ones(len(cta), bool)
    new[1:] = (key[:, 1:] != key[:, :-1]).any(axis=0)
    start = np.flatnonzero(new)
    k = np.arange(len(cta)) - np.repeat(start, np.diff(np.append(start, len(cta))))
    o = np.lexsort((k, ev, group, cta))
    cta, group, core, ev, begin, end, k = (x[o] for x in (cta, group, core, ev, begin, end, k))
    key = np.stack([cta, group, ev, k])
    new = np.ones(len(cta), bool)
    new[1:] = (key[:, 1:] != key[:, :-1]).any(axis=0)
    s = np.flatnonzero(new)
    return cta[s], group[s], core[s], ev[s], np.minimum.reduceat(begin, s), np.maximum.reduceat(end, s)


def _slices(lane, block, group, sm, ev, begin, end) -> Slices:
    """Slices sorted by (lane, begin; the outer first), with record sequence numbers that keep nesting: at
    one time an END comes before a BEGIN, an inner END before its outer one."""
    o = np.lexsort((-end, begin, lane))
    lane, block, group, sm, ev, begin, end = (x[o] for x in (lane, block, group, sm, ev, begin, end))
    n = len(lane)
    idx = np.arange(n)
    # records: 2n; sort by (lane, time, end-before-begin, tiebreak)
    r_lane = np.concatenate([lane, lane])
    r_time = np.concatenate([begin, end])
    r_kind = np.concatenate([np.ones(n, np.int64), np.zeros(n, np.int64)])
    r_tie = np.concatenate([idx, -idx])  # begins in slice order (outer first); ends inner (later begin) first
    ro = np.lexsort((r_tie, r_kind, r_time, r_lane))
    rank = np.empty(2 * n, np.int64)
    rank[ro] = np.arange(2 * n)
    lane_first = np.searchsorted(r_lane[ro], lane, side="left")
    begin_rec, end_rec = rank[:n], rank[n:]
    # k-th instance of its event on its lane, by begin
    ko = np.lexsort((idx, ev, lane))
    key = np.stack([lane[ko], ev[ko]])
    new = np.ones(n, bool)
    new[1:] = (key[:, 1:] != key[:, :-1]).any(axis=0)
    s = np.flatnonzero(new)
    k = np.empty(n, np.int64)
    k[ko] = np.arange(n) - np.repeat(s, np.diff(np.append(s, n)))
    same = np.zeros(n, bool)
    same[1:] = lane[1:] == lane[:-1]
    overlap = np.zeros(n, bool)
    overlap[1:] = same[1:] & (begin[:-1] < begin[1:]) & (begin[1:] < end[:-1]) & (end[:-1] < end[1:])
    return Slices(lane=lane, block=block, group=group, sm=sm, event=ev, k=k, begin_seq=begin_rec - lane_first,
                  end_seq=end_rec - lane_first, begin_ns=begin, end_ns=end, overlap=overlap, begin_rec=begin_rec,
                  end_rec=end_rec)
