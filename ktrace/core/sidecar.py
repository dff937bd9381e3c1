"""The launch metadata sidecar: ``buf.json`` next to ``buf.bin``; its schema, reading, validating, writing.

Its schema is ``proto/ktrace/launch.proto`` (message ``LaunchMetadata``) in protobuf's JSON form with the
proto's field names (docs/sidecar.md); the captures in samples/ follow it. Unknown keys are kept out of the
way, not rejected, so older and richer sidecars load. ``ktrace.capture.sidecar`` gathers what only a GPU
knows (device, calibration, the read-back buffer) and writes it through ``write_sidecar``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from .errors import InputError
from .jsonfmt import int_or_none, no_constant
from .names import MAX_NAME_CHARS

__all__ = ["SCHEMA", "text_problem", "sidecar_path", "read_sidecar", "write_sidecar", "launch_fields", "read_names_file"]

SCHEMA = "ktrace.launch/1"
# Bounds on what a sidecar may say (a name is shown on every slice: one 10 MB name multiplies by the slices).
MAX_TEXT_CHARS = 4096
MAX_NAMES = 4096
_INT64 = 2**63
# A time anchor places each lane's first record within 2^31 ns of it: a smaller one would put records before
# time 0. A real one (a %globaltimer read, the host clock) is Unix ns, about 1.7e18.
MIN_ANCHOR_NS = 2**31
_ANCHORS = (("timer", "anchor_ns"), ("timer_anchor_ns",), ("anchor_ns",), ("globaltimer_anchor_ns",),
            ("launch_globaltimer_ns",), ("host_launch_unix_ns",))
# Numbers the decoder uses, by path: (smallest, largest).
_RANGES = {
    ("timer", "tick_ns"): (1, 10**9), ("timer_tick_ns",): (1, 10**9),
    **{keys: (0, _INT64 - 1) for keys in _ANCHORS},
    ("device", "multiprocessors"): (1, 1 << 20),
    ("buffer", "records_per_lane_capacity"): (0, 1 << 40),
    ("buffer", "records_written"): (0, 1 << 60),
    ("timer", "probe_cost_ns"): (0, 10**9),
    ("timer", "offset_to_reference_ns"): (-_INT64, _INT64 - 1),
}


_NOT_TEXT = re.compile("[\x00\ud800-\udfff]")


def text_problem(text: str) -> str:
    """What makes a string unusable as a name ("" if nothing): a lone surrogate (not text: it cannot be
    written as UTF-8, e.g. a byte that was not UTF-8 on the command line) or a NUL (numpy's strings drop a
    trailing one, merging two names)."""
    m = _NOT_TEXT.search(text)
    if m is None:
        return ""
    c = ord(m.group())
    what = "a NUL character" if c == 0 else f"a lone surrogate (\\u{c:04x}: not UTF-8 text)"
    return f"holds {what} at position {m.start()}"


def sidecar_path(buffer_path: str | Path) -> Path:
    """``dir/name.json`` for ``dir/name.bin`` (or ``.bin.gz``, ``.npy``)."""
    from .filetypes import sibling

    return sibling(buffer_path, ".json")


def read_sidecar(path: str | Path) -> dict:
    """The sidecar as a dict, or an InputError naming the file and the problem."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise InputError(f"{p}: cannot read the metadata sidecar ({e.strerror})") from None
    except UnicodeDecodeError as e:
        raise InputError(f"{p}: the metadata sidecar is not UTF-8 text ({e.reason} at byte {e.start}); fix it "
                         "or pass --no-sidecar") from None
    try:
        meta = json.loads(text, parse_constant=no_constant)
    except json.JSONDecodeError as e:
        raise InputError(f"{p}: the metadata sidecar is not valid JSON ({e}); fix it or pass --no-sidecar") from None
    except (ValueError, RecursionError) as e:
        why = "it is nested too deeply" if isinstance(e, RecursionError) else str(e)
        raise InputError(f"{p}: the metadata sidecar cannot be read ({why}); fix it or pass --no-sidecar") from None
    if not isinstance(meta, dict):
        raise InputError(f"{p}: the metadata sidecar must be a JSON object; fix it or pass --no-sidecar")
    for key in ("event_names", "group_names"):
        v = meta.get(key)
        if v is not None and not (isinstance(v, list) and all(isinstance(x, str) for x in v)):
            raise InputError(f"{p}: '{key}' must be a list of strings; fix it or pass --no-sidecar")
    problem = _bounds_problem(meta, _LONG_DIGITS.search(text) is not None)
    if problem:
        raise InputError(f"{p}: {problem}; fix it or pass --no-sidecar")
    return meta


# An integer beyond 64 bits has 20 digits or more (>= 2**64), or a minus and 19 or more (< -2**63); a time
# anchor in Unix ns (19 digits) has neither.
_LONG_DIGITS = re.compile(r"\d{20}|-\d{19}")


def _bounds_problem(meta: dict, long_digits: bool = True) -> str:
    """What is out of range in a sidecar ("" if nothing): names too long or too many, numbers the decoder
    uses outside what they can mean, integers beyond 64 bits (looked for only where the text holds as many digits
    in a row as one has: ``long_digits``)."""
    for key in ("event_names", "group_names"):
        names = meta.get(key) or []
        if len(names) > MAX_NAMES:
            return f"'{key}' lists {len(names):,} names; at most {MAX_NAMES:,}"
        for i, name in enumerate(names):
            if len(name) > MAX_NAME_CHARS:
                return (f"'{key}'[{i}] is {len(name):,} characters long; a name may have at most "
                        f"{MAX_NAME_CHARS}")
        for i, name in enumerate(names):
            if text_problem(name):
                return f"'{key}'[{i}] {text_problem(name)}"
    for key in ("kernel", "producer"):
        v = meta.get(key)
        if isinstance(v, str) and text_problem(v):
            return f"'{key}' {text_problem(v)}"
        if isinstance(v, str) and len(v) > MAX_TEXT_CHARS:
            return f"'{key}' is {len(v):,} characters long; at most {MAX_TEXT_CHARS:,}"
    dev, key = _device(meta)
    name = dev.get("name")
    if isinstance(name, str) and text_problem(name):
        return f"'{key}' {text_problem(name)}"
    if isinstance(name, str) and len(name) > MAX_TEXT_CHARS:
        return f"'{key}' is {len(name):,} characters long; at most {MAX_TEXT_CHARS:,}"
    problem = _work_problem(meta.get("work", None), "work" in meta)
    if problem:
        return problem
    for keys, (lo, hi) in _RANGES.items():
        v = _get(meta, *keys)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and not lo <= v <= hi:
            return f"'{'.'.join(keys)}' is {v!r}; it must be between {lo:,} and {hi:,}"
    for keys in _ANCHORS:
        v = _get(meta, *keys)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < MIN_ANCHOR_NS:
            return (f"'{'.'.join(keys)}' is {v!r}; a time anchor is Unix ns (about 1.7e18 today: a %globaltimer or "
                    f"host clock read at launch), at least {MIN_ANCHOR_NS:,}, or 0 for none")
    for key in ("grid", "block"):
        v = meta.get(key)
        if isinstance(v, list) and any(isinstance(x, int) and not 0 <= x < 2**32 for x in v):
            return f"'{key}' is {v!r}; each dimension must be between 0 and {2**32 - 1:,}"
    if not long_digits or not _has_wide_int(meta):
        return ""
    stack = [("", meta)]
    while stack:  # every other integer must fit in 64 bits (iterative: the document may nest deeply)
        where, v = stack.pop()
        if isinstance(v, dict):
            stack += [(f"{where}.{k}" if where else str(k), x) for k, x in v.items()]
        elif isinstance(v, list):
            stack += [(f"{where}[{i}]", x) for i, x in enumerate(v)]
        elif isinstance(v, int) and not isinstance(v, bool) and not -_INT64 <= v < 2**64:
            return f"'{where}' is {v}; a number here must fit in 64 bits"
    return ""


def _has_wide_int(meta) -> bool:
    """Whether any integer in the document is beyond 64 bits: one walk of its values without their paths (the
    path of the first one is found by a second walk, only then)."""
    stack = [meta]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
        elif isinstance(v, int) and not isinstance(v, bool) and not -_INT64 <= v < 2**64:
            return True
    return False


WORK_LIMITS = {"bytes": 1e18, "flops": 1e21}  # beyond any one kernel's work (an exabyte moved, a zettaFLOP)


def _work_problem(work, given: bool) -> str:
    """What is wrong with the sidecar's ``work`` ("" if nothing): an object of non-negative numbers, bytes and flops."""
    if not given:
        return ""
    if not isinstance(work, dict):
        return f"'work' is {type(work).__name__}; it must be an object such as {{\"bytes\": 311000000, \"flops\": 0}}"
    unknown = sorted(str(k) for k in work if k not in WORK_LIMITS)
    if unknown:
        return f"'work' has {unknown[0][:40]!r}; its keys are bytes and flops"
    for k, hi in WORK_LIMITS.items():
        v = work.get(k)
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return f"'work.{k}' is {str(v)[:40]!r}; it must be a number (the kernel's {k}), 0 or more"
        if not 0 <= v <= hi:
            return f"'work.{k}' is {v!r}; it must be between 0 and {hi:.0e}"
    return ""


def write_sidecar(path, meta: dict) -> Path:
    """Write the sidecar as JSON (atomically: a reader never sees half a file)."""
    from .outputs import write_atomically

    return write_atomically(path, (json.dumps(meta, indent=1) + "\n").encode("utf-8"))


def launch_fields(meta: dict) -> dict:
    """What the decoder uses from a sidecar (docs/sidecar.md, "What the decoder uses"), typed, keyed by the
    ``Launch`` field it fills; a missing or mistyped key gives None (or an empty tuple, or False)."""
    dev, _ = _device(meta)
    bufmeta = _obj(meta, "buffer")
    timer = _obj(meta, "timer")
    return {
        "kernel": meta.get("kernel"),
        "grid": _ints(meta.get("grid")),
        "block_dim": _ints(meta.get("block")),
        "device": dev.get("name") if isinstance(dev.get("name"), str) else None,
        "num_sms": int_or_none(dev.get("multiprocessors")),
        "event_names": meta.get("event_names"),
        "group_names": meta.get("group_names"),
        "timer_tick_ns": int_or_none(timer.get("tick_ns", meta.get("timer_tick_ns"))),
        "host_launch_unix_ns": int_or_none(meta.get("host_launch_unix_ns")),
        "timer_anchor_ns": _anchor(meta, timer),
        "producer": meta.get("producer") if isinstance(meta.get("producer"), str) else None,
        "capacity_per_lane": int_or_none(bufmeta.get("records_per_lane_capacity")),
        "trailer": bufmeta.get("trailer") is True,
        "records_written": int_or_none(bufmeta.get("records_written")),
        "work_bytes": _float_or_none(_obj(meta, "work").get("bytes")),
        "work_flops": _float_or_none(_obj(meta, "work").get("flops")),
        "probe_cost_ns": _float_or_none(timer.get("probe_cost_ns")),
        "profiled_median_us": _float_or_none(_get(meta, "timing", "with_profiler", "median_us")),
        "control_median_us": _float_or_none(_get(meta, "timing", "without_profiler", "median_us")),
    }


def _device(meta: dict) -> tuple[dict, str]:
    """The device's facts in every shape a sidecar names them, and the key its name was read from: ``device`` as an
    object (ktrace's captures) or as its name (IKET, Proton), else ``env.device`` as either (FlashInfer's torch
    captures)."""
    for prefix, where in (("", meta), ("env.", _obj(meta, "env"))):
        dev = where.get("device")
        if isinstance(dev, str):
            return {"name": dev}, f"{prefix}device"
        if isinstance(dev, dict) and isinstance(dev.get("name"), str):
            return dev, f"{prefix}device.name"
    return _obj(meta, "device"), "device.name"


def _obj(meta: dict, key: str) -> dict:
    v = meta.get(key)
    return v if isinstance(v, dict) else {}


def _ints(v) -> tuple[int, ...] | None:
    if isinstance(v, (list, tuple)) and all(isinstance(x, int) for x in v):
        return tuple(v)
    return None


def _float_or_none(v) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _get(d, *keys):
    for k in keys:
        d = d.get(k) if isinstance(d, dict) else None
    return d


def read_names_file(path: str | Path) -> list[str]:
    """Event or group names from a file: one per line, or a JSON list. Blank lines and '#' comments skip."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise InputError(f"{p}: cannot read the names file ({e.strerror})") from None
    except UnicodeDecodeError as e:
        raise InputError(f"{p}: the names file is not UTF-8 text ({e.reason} at byte {e.start})") from None
    stripped = text.strip()
    if stripped.startswith("["):
        try:
            names = json.loads(stripped)
        except json.JSONDecodeError as e:
            raise InputError(f"{p}: names file looks like JSON but does not parse ({e})") from None
        except RecursionError:
            raise InputError(f"{p}: names file is nested too deeply to be a list of names") from None
        if not isinstance(names, list) or not all(isinstance(x, str) for x in names):
            raise InputError(f"{p}: a JSON names file must be a list of strings")
        return names
    return [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]


# Where a harness of one's own may have put the kernel's 64-bit %globaltimer read at launch (Unix ns), in order.
ANCHOR_KEYS = (("timer", "anchor_ns"), (None, "timer_anchor_ns"), (None, "anchor_ns"),
               (None, "globaltimer_anchor_ns"), (None, "launch_globaltimer_ns"))


def _anchor(meta: dict, timer: dict) -> int | None:
    for where, key in ANCHOR_KEYS:
        v = int_or_none((timer if where == "timer" else meta).get(key))
        if v is not None and v > 0:
            return v
    return None

