"""The launch metadata sidecar: ``buf.json`` next to ``buf.bin``; its schema, reading, validating, writing.

Its schema is ``proto/ktrace/launch.proto`` (message ``LaunchMetadata``) in protobuf's JSON form with the
proto's field names (docs/sidecar.md); the captures in samples/ follow it. Unknown keys are kept out of the
way, not rejected, so older and richer sidecars load. ``ktrace.capture.sidecar`` gathers what only a GPU
knows (device, calibration, the read-back buffer) and writes it through ``write_sidecar``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from .errors import InputError

__all__ = ["SCHEMA", "sidecar_path", "read_sidecar", "write_sidecar", "launch_fields", "read_names_file"]

SCHEMA = "ktrace.launch/1"


def sidecar_path(buffer_path: str | Path) -> Path:
    """``dir/name.json`` for ``dir/name.bin`` (or ``.npy``)."""
    p = Path(buffer_path)
    return p.with_suffix(".json")


def read_sidecar(path: str | Path) -> dict:
    """The sidecar as a dict, or an InputError naming the file and the problem."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise InputError(f"{p}: cannot read the metadata sidecar ({e.strerror})") from None
    try:
        meta = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise InputError(f"{p}: the metadata sidecar is not valid JSON ({e}); fix it or pass --no-sidecar") from None
    if not isinstance(meta, dict):
        raise InputError(f"{p}: the metadata sidecar must be a JSON object; fix it or pass --no-sidecar")
    for key in ("event_names", "group_names"):
        v = meta.get(key)
        if v is not None and not (isinstance(v, list) and all(isinstance(x, str) for x in v)):
            raise InputError(f"{p}: '{key}' must be a list of strings; fix it or pass --no-sidecar")
    return meta


def write_sidecar(path, meta: dict) -> Path:
    """Write the sidecar as JSON (atomically: a reader never sees half a file)."""
    p = Path(path)
    tmp = p.with_name(p.name + f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
    tmp.replace(p)
    return p


def launch_fields(meta: dict) -> dict:
    """What the decoder uses from a sidecar (docs/sidecar.md, "What the decoder uses"), typed, keyed by the
    ``Launch`` field it fills; a missing or mistyped key gives None (or an empty tuple, or False)."""
    dev = _obj(meta, "device")
    bufmeta = _obj(meta, "buffer")
    timer = _obj(meta, "timer")
    return {
        "kernel": meta.get("kernel"),
        "grid": _ints(meta.get("grid")),
        "block_dim": _ints(meta.get("block")),
        "device": dev.get("name") if isinstance(dev.get("name"), str) else None,
        "num_sms": _int_or_none(dev.get("multiprocessors")),
        "event_names": meta.get("event_names"),
        "group_names": meta.get("group_names"),
        "timer_tick_ns": _int_or_none(timer.get("tick_ns", meta.get("timer_tick_ns"))),
        "host_launch_unix_ns": _int_or_none(meta.get("host_launch_unix_ns")),
        "timer_anchor_ns": _anchor(meta, timer),
        "producer": meta.get("producer") if isinstance(meta.get("producer"), str) else None,
        "capacity_per_lane": _int_or_none(bufmeta.get("records_per_lane_capacity")),
        "trailer": bufmeta.get("trailer") is True,
        "probe_cost_ns": _float_or_none(timer.get("probe_cost_ns")),
        "profiled_median_us": _float_or_none(_get(meta, "timing", "with_profiler", "median_us")),
        "control_median_us": _float_or_none(_get(meta, "timing", "without_profiler", "median_us")),
    }


def _obj(meta: dict, key: str) -> dict:
    v = meta.get(key)
    return v if isinstance(v, dict) else {}


def _ints(v) -> tuple[int, ...] | None:
    if isinstance(v, (list, tuple)) and all(isinstance(x, int) for x in v):
        return tuple(v)
    return None


def _int_or_none(v) -> int | None:
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


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
    stripped = text.strip()
    if stripped.startswith("["):
        try:
            names = json.loads(stripped)
        except json.JSONDecodeError as e:
            raise InputError(f"{p}: names file looks like JSON but does not parse ({e})") from None
        if not all(isinstance(x, str) for x in names):
            raise InputError(f"{p}: a JSON names file must be a list of strings")
        return names
    return [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]


# Where a harness of one's own may have put the kernel's 64-bit %globaltimer read at launch (Unix ns), in order.
ANCHOR_KEYS = (("timer", "anchor_ns"), (None, "timer_anchor_ns"), (None, "anchor_ns"),
               (None, "globaltimer_anchor_ns"), (None, "launch_globaltimer_ns"))


def _anchor(meta: dict, timer: dict) -> int | None:
    for where, key in ANCHOR_KEYS:
        v = _int_or_none((timer if where == "timer" else meta).get(key))
        if v is not None and v > 0:
            return v
    return None

