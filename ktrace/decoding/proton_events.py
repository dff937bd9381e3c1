"""A Triton Proton trace's events read into checked columns, bounded like a buffer: only a regular file, a gzip
stream inflated a piece at a time under a stated ratio, the parsed events a small multiple of the file, and
every id and time checked against its limit before anything is sized by it. An event that cannot be read is
counted by cause (``read_events``' last answer), never silently dropped; ``proton.read_proton`` makes the
Decoded."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

from ..core.errors import InputError
from ..core.names import MAX_NAME_CHARS, cut_names
from ..core.terminal import excerpt
from .inflate import read_bounded

__all__ = ["read_events", "MAX_TRACE_BYTES", "MAX_INFLATE_RATIO", "MIN_INFLATE_LIMIT"]

MAX_TRACE_BYTES = 1 << 30  # a trace (inflated) past this is refused: not one kernel's trace, or a bomb
# A gzip trace is inflated a piece at a time and refused once it passes this many times its file (Proton's JSON
# compresses 25-40 times; gzip's own limit is about 1,030) or MIN_INFLATE_LIMIT, whichever is more.
MAX_INFLATE_RATIO = 200
MIN_INFLATE_LIMIT = 16 << 20

_PID = re.compile(r"^(?P<kernel>.*) Core(?P<core>\d+) CTA(?P<cta>\d+)$")
_TID = re.compile(r"^warp (?P<warp>\d+) \(line (?P<line>\d+)\)$")


_FIX = "copy the trace Proton wrote again"


def _read(path: Path) -> bytes:
    """The trace's bytes, inflated when gzip-compressed, within the bounds of ``inflate.read_bounded``."""
    return read_bounded(path, "a Proton trace", _FIX, max_bytes=MAX_TRACE_BYTES, ratio=MAX_INFLATE_RATIO,
                        min_limit=MIN_INFLATE_LIMIT, too_big="not one kernel's Proton trace (profile one kernel "
                        "per Proton session)")


# Proton's writer (nlohmann::json, keys sorted) prints every event's fields in this order; a file that is
# exactly that is read in one regex pass (about 4x faster than building a dict per event), else by json. Fields
# are bounded in length, so that the columns (fixed-width) stay a small multiple of the file
_FAST = re.compile(rb'"dur":([0-9.eE+-]{1,40}),"name":"([^"\\]{0,256})","ph":"X","pid":"([^"\\]{0,256})",'
                   rb'"tid":"([^"\\]{0,64})","ts":([0-9.eE+-]{1,40})')


def _fast_columns(raw):
    """_columns' answer straight from Proton's bytes, or None when they are not exactly its print."""
    if not raw[-64:].rstrip().endswith(b"]}") or b"\\" in raw:
        return None
    found = _FAST.findall(raw)
    if not found or len(found) != raw.count(b'"ph":'):
        return None
    dur, name, pid, tid, ts = (np.array(c) for c in zip(*found))
    del found
    try:
        ts, dur = ts.astype(np.float64), dur.astype(np.float64)
    except ValueError:
        return None
    out = [ts, dur]
    strings = []
    for col in (pid, tid, name):
        uniq, code = np.unique(col, return_inverse=True)
        out.append(code.astype(np.int64).reshape(-1))
        strings.append([u.decode("utf-8", "replace") for u in uniq.tolist()])
    return (*out, *strings, 0)


def _number(v) -> float:
    return float(v) if type(v) in (int, float) else np.nan


def _load(path: Path, raw) -> list:
    """The trace's events, each cut to (ph, pid, tid, name, ts, dur) as it is parsed (its args and other fields
    dropped, its strings shared), so that the parsed trace stays a small multiple of the file."""
    shared: dict = {}

    def key(v):
        if isinstance(v, str):
            return shared.setdefault(v, v)
        return None if v is None else f"<{type(v).__name__}>"  # not a string: never Proton's; hashable

    def event(d: dict):
        if "traceEvents" in d:
            return d
        if "ph" not in d:
            return None
        return (key(d["ph"]), key(d.get("pid")), key(d.get("tid")), key(d.get("name")), _number(d.get("ts")),
                _number(d.get("dur")))

    try:
        doc = json.loads(raw, object_hook=event, parse_int=float)
    except (ValueError, RecursionError) as e:
        where = f" at line {e.lineno}, column {e.colno}" if hasattr(e, "lineno") else ""
        raise InputError(f"{path}: not valid JSON{where} ({getattr(e, 'msg', e)}): a truncated copy? Proton "
                         "writes the whole trace at proton.finalize(); copy it again after that") from None
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    if not isinstance(events, list):
        raise InputError(f"{path}: JSON without a 'traceEvents' list: not a Chrome trace; Proton writes one with "
                         "proton.start(NAME, data='trace', backend='instrumentation')")
    return events


def _columns(path: Path, events: list):
    """(ts_us, dur_us, pid code, tid code, name code) arrays and the pid, tid and name strings, and how many
    entries are not complete events."""
    xs = [e for e in events if type(e) is tuple and e[0] == "X"]
    other = len(events) - len(xs)
    if not xs:
        raise InputError(f"{path}: no complete events ('ph': 'X'): not a Proton instrumentation trace, or its "
                         "kernel had no scopes (pl.scope / pl.enter_scope in the kernel, then proton.finalize())")
    pc: dict = {}
    tc: dict = {}
    nc: dict = {}
    pid = np.array([pc.setdefault(e[1], len(pc)) for e in xs], np.int64)
    tid = np.array([tc.setdefault(e[2], len(tc)) for e in xs], np.int64)
    name = np.array([nc.setdefault(e[3], len(nc)) for e in xs], np.int64)
    ts = np.array([e[4] for e in xs], np.float64)
    dur = np.array([e[5] for e in xs], np.float64)
    return ts, dur, pid, tid, name, list(pc), list(tc), [str(n) for n in nc], other


# Limits on what one event may say, checked before anything is sized by it: no GPU has 65,536 SMs, a grid
# 2^31 CTAs, a CTA 1,024 warps; and one kernel's trace spans less than a day.
MAX_CORE = (1 << 16) - 1
MAX_CTA = (1 << 31) - 1
MAX_WARP = 1023
MAX_TIME_US = 86_400e6
# A CTA or warp with no event still costs a lane: lanes (CTAs x warps) past this many per event are refused
LANES_FREE, LANES_PER_EVENT = 1 << 16, 16


def _ids(strings, rx, fields, limits):
    """Per string: the ids of the named fields (within their limits), and whether it parsed."""
    ids = np.zeros((len(strings), len(fields)), np.int64)
    ok = np.zeros(len(strings), bool)
    for i, s in enumerate(strings):
        m = rx.match(s) if isinstance(s, str) else None
        if m is None:
            continue
        digits = [m.group(f) for f in fields]
        if all(len(d) <= 10 for d in digits):  # int() of a longer one would only fail the limit, or not end
            vals = [int(d) for d in digits]
            if all(v <= hi for v, hi in zip(vals, limits)):
                ids[i], ok[i] = vals, True
    return ids, ok


def _escaped(s: str) -> str:
    """A name as text any terminal or file can take: lone surrogates (JSON's unpaired \\udXXX) escaped. Cut to
    a few characters past the name bound first (an escape is several characters; the bound is applied after)."""
    return s[:MAX_NAME_CHARS + 1].encode("utf-8", "backslashreplace").decode("utf-8")


# Why an event is not used, in the order a refusal names the first
_UNUSED = ("not a complete event ('ph' other than 'X')", "a process that is not 'KERNEL CoreN CTAm'",
           "a thread that is not 'warp i (line j)'", "a CTA, core or warp id past its limit",
           "ts or dur not a number", "negative ts or dur", "ts or dur past a day")


def _usable(path, cols):
    """The events that can be read, checked against the limits before any array is sized by them; the others
    counted by reason. Raises InputError when none can."""
    ts, dur, pid, tid, ev, pid_names, tid_names, names, other = cols
    pid_ids, pid_ok = _ids(pid_names, _PID, ("core", "cta"), (MAX_CORE, MAX_CTA))
    tid_ids, tid_ok = _ids(tid_names, _TID, ("warp",), (MAX_WARP,))
    pid_form = np.array([isinstance(s, str) and _PID.match(s) is not None for s in pid_names], bool)
    tid_form = np.array([isinstance(s, str) and _TID.match(s) is not None for s in tid_names], bool)
    with np.errstate(invalid="ignore"):
        reasons = [
            np.zeros(len(ts), bool), ~pid_form[pid], ~tid_form[tid], ~(pid_ok[pid] & tid_ok[tid]),
            np.isnan(ts) | np.isnan(dur), (ts < 0) | (dur < 0), ~(ts + dur <= MAX_TIME_US)]
    bad = np.zeros(len(ts), bool)
    counts = {_UNUSED[0]: other} if other else {}
    for why, r in zip(_UNUSED[1:], reasons[1:]):
        n = int(np.count_nonzero(r & ~bad))
        if n:
            counts[why] = n
        bad |= r
    if bad.all():
        first = next(i for i, r in enumerate(reasons[1:], 1) if r.any())
        if first in (1, 2):
            strings, codes, what = (pid_names, pid, "process") if first == 1 else (tid_names, tid, "thread")
            s = strings[int(codes[np.argmax(reasons[first])])]
            raise InputError(f"{path}: {what} {_escaped(excerpt(str(s), 80))!r} is not Proton's ('KERNEL CoreN CTAm' per "
                             "CTA, 'warp i (line j)' per warp): a Chrome trace of another tool? Open it in the "
                             "Perfetto UI as it is")
        raise InputError(f"{path}: no event can be read ({_UNUSED[first]}; limits: core <= {MAX_CORE}, CTA <= "
                         f"{MAX_CTA}, warp <= {MAX_WARP}, ts + dur <= one day): a damaged trace; copy the one "
                         "Proton wrote again")
    keep = ~bad
    ts, dur, pid, tid, ev = ts[keep], dur[keep], pid[keep], tid[keep], ev[keep]
    used, ev = np.unique(ev, return_inverse=True)
    names = [names[i] for i in used.tolist()]
    long = [_escaped(excerpt(n, 32)) for n in names if len(n) > MAX_NAME_CHARS]
    names, _ = cut_names(_escaped(n) for n in names)  # every name bounded before anything is sized from it
    cta, core, warp = pid_ids[pid, 1], pid_ids[pid, 0], tid_ids[tid, 0]
    kernels = sorted({_PID.match(pid_names[i]).group("kernel") for i in np.unique(pid).tolist()})
    if len(kernels) > 1:
        raise InputError(f"{path}: holds {len(kernels)} kernels ({', '.join(_escaped(excerpt(k)) for k in kernels[:4])}): "
                         "ktrace reads one launch; profile one kernel per Proton session (proton.start ... "
                         "proton.finalize)")
    long += [_escaped(excerpt(k, 32)) for k in kernels if len(k) > MAX_NAME_CHARS]
    kernels, _ = cut_names(_escaped(k) for k in kernels)
    return ts, dur, cta, core, warp, ev.reshape(-1), names, kernels, counts, long


def read_events(path: Path):
    """(ts_us, dur_us, cta, core, warp, event index, event names, kernels, {why unused: count}, the names cut
    to the name bound: a short excerpt of each) of the events that can be read, their names and kernel cut to
    the bound; InputError naming the file, the problem and the fix when none can."""
    raw = _read(path)
    cols = _fast_columns(raw)
    if cols is None:
        events = _load(path, raw)
        del raw
        cols = _columns(path, events)
        del events
    else:
        del raw
    return _usable(path, cols)
