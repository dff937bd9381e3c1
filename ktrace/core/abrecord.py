"""The comparison record of an A/B session (``NAME_vs_NAME.ab.json``, schema ``ktrace.ab/1``, docs/sidecar.md).

``ktrace run --ab BEFORE.py AFTER.py`` (and ``ktrace.capture.record_ab`` for torch-launched kernels) times the
two variants' unprofiled builds interleaved in one session, captures one profiled launch of each, and writes
this record beside the two captures: which captures (file name and SHA-256 of each buffer), each side's
profiler overhead, every timed pair, and the paired test's verdict. ``ktrace diff BEFORE.bin AFTER.bin`` finds
it (each capture's sidecar names it in ``checks.ab_record``; else any record in their folders) and leads with
its verdict, recomputed from the pairs, in the order the captures were given.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import numpy as np

from . import jsonfmt
from .errors import InputError
from .filetypes import buffer_stem, is_trace
from .paired import DEFAULT_THRESHOLD_PCT, MIN_PAIRS, PairedTest, paired_test
from .records import frozen

__all__ = ["SCHEMA", "SUFFIX", "Record", "Found", "record_name", "file_sha256", "build_record", "write_record",
           "read_record", "find_record", "placement"]

SCHEMA = "ktrace.ab/1"
SUFFIX = ".ab.json"
MAX_PAIRS = 1_000_000
_SIDES = ("before", "after")


def record_name(before_name: str, after_name: str) -> str:
    """``BEFORE_vs_AFTER.ab.json``: the record's file name for captures named ``before_name``/``after_name``."""
    return f"{before_name}_vs_{after_name}{SUFFIX}"


def file_sha256(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def build_record(before: dict, after: dict, before_us, after_us, order, *, method: str, warmup: int,
                 spin_us: float, device: dict | None = None, confidence: float = 0.95,
                 threshold_pct: float = DEFAULT_THRESHOLD_PCT, version: str | None = None, buffers_of_pair=(),
                 buffers_note: str = "", own_contents=()) -> dict:
    """The record as a dict. before, after: each side's ``label`` (what ran), ``capture`` (the buffer's file
    name, beside the record), ``sha256`` (of that file), ``kernel`` and ``profiler_overhead`` (its own
    timing: ``timing.Comparison.as_dict()``); before_us, after_us: kernel times of each pair (µs); order: per
    pair "AB" (before launched first) or "BA"; buffers_of_pair: per pair, whose buffers both variants ran on
    ("before"/"after"; empty: each on its own, buffers_note saying why); own_contents: the arguments (indices)
    whose contents differ between the variants, each variant's own copied into the shared buffers before its
    launches."""
    test = paired_test(before_us, after_us, confidence=confidence, threshold_pct=threshold_pct)
    return {
        "schema": SCHEMA,
        "before": dict(before),
        "after": dict(after),
        "device": dict(device or {}),
        "timing": {"method": method, "pairs": len(order), "warmup_pairs": int(warmup), "spin_us": spin_us,
                   "confidence": confidence, "threshold_pct": threshold_pct, "order": list(order),
                   "buffers": "shared" if buffers_of_pair else "own",
                   **({"buffers_of_pair": list(buffers_of_pair), "own_contents": [int(i) for i in own_contents]}
                      if buffers_of_pair else {"buffers_note": buffers_note}),
                   "before_us": [round(float(x), 4) for x in before_us],
                   "after_us": [round(float(x), 4) for x in after_us]},
        "verdict": _verdict_dict(test),
        "ktrace_version": version,
    }


def placement(data: dict) -> tuple[float, float] | None:
    """Mean kernel time of both variants on before's buffers and on after's (µs), for a session that shared
    them: how much where the buffers lie moves the time. None when each ran on its own."""
    t = data.get("timing") or {}
    mems = t.get("buffers_of_pair")
    if not isinstance(mems, list) or len(mems) != len(t.get("before_us", ())):
        return None
    both = (np.asarray(t["before_us"], float) + np.asarray(t["after_us"], float)) / 2
    m = np.asarray(mems) == "after"
    if m.all() or not m.any():
        return None
    return float(both[~m].mean()), float(both[m].mean())


def _verdict_dict(t: PairedTest) -> dict:
    d = t.to_dict()
    return {k: (round(v, 6) if isinstance(v, float) and math.isfinite(v) else v) for k, v in d.items()}


def write_record(path, record: dict) -> Path:
    """Write the record atomically (a reader never sees half of it); returns its path."""
    from .outputs import write_atomically

    return write_atomically(path, (jsonfmt.dumps(record, indent=1, allow_nan=False) + "\n").encode("utf-8"))


@frozen
class Record:
    """A read record: its file, the JSON, and the paired test recomputed from its pairs."""

    path: Path
    data: dict
    test: PairedTest

    def side(self, which: str) -> dict:
        return self.data[which]

    def capture_path(self, which: str) -> Path:
        return self.path.parent / self.data[which]["capture"]


def _bad(p: Path, what: str) -> InputError:
    return InputError(f"{p}: {what}; it is not an A/B record ktrace wrote (ktrace run --ab writes one): "
                      "re-run the A/B session or remove the file")


def read_record(path) -> Record:
    """The record at ``path`` with its test recomputed; InputError naming the file and the problem."""
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except OSError as e:
        raise InputError(f"{p}: cannot read the A/B record ({e.strerror or e})") from None
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise _bad(p, f"not JSON ({e.__class__.__name__})") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise _bad(p, f"no 'schema': \"{SCHEMA}\"")
    for side in _SIDES:
        s = data.get(side)
        if not isinstance(s, dict) or not isinstance(s.get("capture"), str) or not isinstance(s.get("sha256"), str):
            raise _bad(p, f"'{side}' lacks its 'capture' file name or 'sha256'")
        if Path(s["capture"]).name != s["capture"]:
            raise _bad(p, f"'{side}.capture' is {s['capture']!r}; it must be a file name beside the record")
    t = data.get("timing")
    if not isinstance(t, dict):
        raise _bad(p, "no 'timing'")
    b, a = t.get("before_us"), t.get("after_us")
    if not (isinstance(b, list) and isinstance(a, list) and len(b) == len(a) and MIN_PAIRS <= len(b) <= MAX_PAIRS):
        raise _bad(p, f"'timing.before_us' and 'after_us' must be lists of equal length, {MIN_PAIRS} to "
                      f"{MAX_PAIRS:,} pairs")
    if not all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0 for x in b + a):
        raise _bad(p, "'timing.before_us' and 'after_us' must hold positive numbers (µs)")
    conf, thr = t.get("confidence", 0.95), t.get("threshold_pct", DEFAULT_THRESHOLD_PCT)
    if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (conf, thr)):
        raise _bad(p, "'timing.confidence' and 'threshold_pct' must be numbers")
    try:
        test = paired_test(b, a, confidence=float(conf), threshold_pct=float(thr))
    except InputError as e:
        raise _bad(p, str(e)) from None
    return Record(p, data, test)


@frozen
class Found:
    """What ``find_record`` found for two captures: the record and whether they were given the other way
    round (``test`` is then already read that way), or a note on a record named but unusable."""

    record: Record | None
    flipped: bool = False
    note: str = ""

    @property
    def test(self) -> PairedTest | None:
        if self.record is None:
            return None
        return self.record.test.flipped() if self.flipped else self.record.test


def _buffer_of(source: Path) -> Path | None:
    """The buffer a capture argument stands for: itself, or for a trace the buffer beside it with its stem."""
    if not is_trace(source):
        return source if source.is_file() else None
    stem = source.name.split(".", 1)[0]
    for suffix in (".bin", ".bin.gz"):
        b = source.with_name(stem + suffix)
        if b.is_file():
            return b
    return None


def _named_record(buffer: Path) -> Path | None:
    """The record a capture's sidecar names (``checks.ab_record``), if any."""
    side = buffer.with_name(buffer_stem(buffer) + ".json")
    try:
        meta = json.loads(side.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return None
    name = meta.get("checks", {}).get("ab_record") if isinstance(meta, dict) and isinstance(meta.get("checks"),
                                                                                          dict) else None
    return buffer.parent / name if isinstance(name, str) and Path(name).name == name else None


def _shown(path: Path) -> str:
    """A path for a note: a name past 80 characters cut to its start and its length."""
    text = str(path)
    return text if len(path.name) <= 80 else f"{path.parent / path.name[:60]}... ({len(path.name):,} characters)"


def find_record(before, after) -> Found | None:
    """The A/B record that holds exactly these two captures (paths of buffers, or of traces beside their
    buffers), matched by each buffer's SHA-256: the one their sidecars name, else one in their folders.
    None when there is none; a ``Found`` with only a note when a sidecar names one that is missing, unreadable
    or holds other captures."""
    if not all(isinstance(x, (str, Path)) for x in (before, after)):
        return None
    bufs = [_buffer_of(Path(x)) for x in (before, after)]
    if None in bufs:
        return None
    named = [r for r in (_named_record(b) for b in bufs) if r is not None]
    folders = dict.fromkeys(b.parent for b in bufs)
    scanned = [r for f in folders for r in sorted(f.glob("*" + SUFFIX))]
    hashes = None
    notes = []
    for cand in dict.fromkeys(named + scanned):
        try:
            present = cand.is_file()
        except (OSError, ValueError) as e:  # a name too long for the file system, or one it cannot hold
            present, why = False, getattr(e, "strerror", None) or str(e)
        else:
            why = "is missing"
        if not present:
            if cand in named:
                notes.append(f"{_shown(cand)} (named by a capture's sidecar) "
                             f"{why if why == 'is missing' else f'cannot be read: {why}'}")
            continue
        try:
            rec = read_record(cand)
        except InputError as e:
            if cand in named:
                notes.append(str(e))
            continue
        if hashes is None:
            hashes = [file_sha256(b) for b in bufs]
        held = [rec.data["before"]["sha256"], rec.data["after"]["sha256"]]
        if held == hashes and held == hashes[::-1]:  # two identical buffers: their names say which is which
            names = [rec.data["after"]["capture"], rec.data["before"]["capture"]]
            return Found(rec, [b.name for b in bufs] == names)
        if held == hashes:
            return Found(rec, False)
        if held == hashes[::-1]:
            return Found(rec, True)
        if cand in named:
            notes.append(f"{cand} (named by a capture's sidecar) holds other captures than these two (compared "
                         "with a third, or a buffer re-recorded or edited since)")
    if notes:
        return Found(None, note="A/B record not used: " + "; ".join(notes) + "; the verdict rests on each "
                     "capture's own timing")
    return None
