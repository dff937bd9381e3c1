"""Building a capture's launch sidecar (``NAME.json`` beside ``NAME.bin``) from what only the GPU knows.

The schema, its reading and its writing live in ``ktrace.core.sidecar``; the buffer's layout in
``ktrace.decoding.layouts``.
"""

from __future__ import annotations

from pathlib import Path

from ..decoding.layouts import LAYOUT_TEXT as LAYOUT, TRAILER_TEXT as TRAILER
from ..core.sidecar import SCHEMA

__all__ = ["capture_metadata", "timer_metadata"]


def timer_metadata(producer: str, anchor_ns: int | None, host_launch_unix_ns: int | None = None) -> dict:
    """The sidecar's ``timer``: tick and probe cost from this device's calibration (when one exists; the
    tick is measured now if not), the kernel's anchor and, in a multi-GPU run, this GPU's clock offset."""
    from .tick import cached, measure_tick

    out: dict = {}
    cal = cached()
    if cal is not None and cal.tick_ns:
        out["tick_ns"] = cal.tick_ns
        cost = cal.probe_cost_ns.get(producer)
        if cost is not None:
            out["probe_cost_ns"] = round(float(cost), 3)
            out["probe_cost_cycles"] = round(float(cal.probe_cost_cycles.get(producer, 0.0)), 2)
        if cal.sm_clock_mhz:
            out["sm_clock_mhz"] = round(cal.sm_clock_mhz, 1)
        out["calibration_unix_ns"] = cal.measured_unix_ns
        out["source"] = "ktrace calibrate on this device"
    else:
        tick, _, mhz = measure_tick(20_000)
        if tick:
            out["tick_ns"] = tick
        if mhz:
            out["sm_clock_mhz"] = round(mhz, 1)
        out["source"] = "tick measured at capture (run ktrace calibrate for the probe cost)"
    if anchor_ns is not None:
        out["anchor_ns"] = int(anchor_ns)
    from ._cuda import device_info
    from .clocksync import sidecar_clock

    out.update(sidecar_clock(device_info().pci_bus_id, anchor_ns or host_launch_unix_ns))
    return out


def capture_metadata(cap, bin_path: Path) -> dict:
    """The sidecar for a read-back Capture saved at ``bin_path``."""
    from .._version import __version__
    from ._cuda import device_index, device_info

    dev = device_info()
    words = cap.words
    device = {"index": device_index(), **dev.as_dict()}
    if hasattr(cap.kernel, "compile_info"):
        device["compile"] = cap.kernel.compile_info()
    buffer = {
        "dtype": "uint64 little-endian",
        "entries": int(len(words)),
        "bytes": int(len(words)) * 8,
        "file": bin_path.name,
        "records_per_lane_capacity": cap.capacity,
        "records_written": cap.records,
        "trailer": cap.producer == "ktrace",
        "layout": LAYOUT + ("; " + TRAILER if cap.producer == "ktrace" else ""),
        "header_matches_launch": bool(cap.header_ok),
    }
    ov = cap.overflow
    if ov is not None:
        buffer["overflow_records"] = int(ov.sum())
        buffer["overflow_lanes"] = int((ov > 0).sum())
    meta = {
        "schema": SCHEMA,
        "sample": cap.name,
        "kernel": cap.kernel.spec.name if hasattr(cap.kernel, "spec") else cap.name,
        "producer": cap.producer,
        "grid": [int(x) for x in cap.grid],
        "block": [int(x) for x in cap.block] if cap.block else [],
        "dynamic_smem_bytes": cap.shared_bytes,
        "num_blocks": cap.blocks,
        "num_groups": cap.groups,
        "event_names": list(cap.event_names),
        "group_names": list(cap.group_names),
        "host_launch_unix_ns": int(cap.host_launch_unix_ns),
        "timer": timer_metadata(cap.producer, cap.anchor_ns, cap.host_launch_unix_ns),
        "buffer": buffer,
        "device": device,
        "ktrace_version": __version__,
    }
    if cap.timing is not None:
        meta["timing"] = cap.timing.as_dict()
    for k, v in cap.meta.items():
        meta[k] = v
    if not meta["group_names"]:
        del meta["group_names"]
    return meta

