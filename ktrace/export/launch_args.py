"""The launch slice's args: what the launch was and what its buffer held, as the trace writes them
(``writer.py``) and as the numpy engine's figures carry them (``analysis/figures/numpy/stream.py``). Kept apart
from the writer so that an analysis imports neither the trace writer nor its track and packet code."""

from __future__ import annotations

from ..core.model import Decoded, Summary

__all__ = ["launch_facts"]


def launch_facts(d: Decoded, summary: Summary) -> dict:
    """The launch slice's args (name -> str or int): what the launch was and what its buffer held."""
    L = d.launch
    facts: dict = {"kernel": L.kernel}
    if L.grid:
        facts["grid"] = "x".join(map(str, L.grid))
    if L.block_dim:
        facts["block_dim"] = "x".join(map(str, L.block_dim))
    if L.device:
        facts["device"] = L.device
    if L.producer:
        facts["producer"] = L.producer
    if L.producer_version:
        facts["producer_version"] = L.producer_version
    if L.block_gpc:
        facts["block_gpc"] = ",".join(map(str, L.block_gpc))  # each block's GPC, block order (IKET's locations)
    facts["layout"] = d.layout.name
    facts["layout_match"] = round(d.layout.score, 6)
    facts["num_blocks"] = L.num_blocks
    facts["num_groups"] = L.num_groups
    if L.group_names and not any("," in g for g in L.group_names):
        facts["group_names"] = ",".join(L.group_names)  # the findings name a warp group by it
    if L.timer_tick_ns is not None:
        facts["timer_tick_ns"] = L.timer_tick_ns
    for key in ("probe_cost_ns", "profiled_median_us", "control_median_us"):
        if getattr(L, key) is not None:
            facts[key] = round(float(getattr(L, key)), 3)  # measured to a few ns: no float noise
    if summary.min_step_ns is not None:
        facts["min_step_ns"] = summary.min_step_ns
    facts["time_origin"] = d.time_origin
    facts["records"] = summary.records
    if L.records_written is not None:
        facts["records_written"] = L.records_written  # what the sidecar says was read back
    for key in ("work_bytes", "work_flops", "peak_gbps", "peak_tflops"):  # the roofline's (analysis/model/roofline.py)
        v = getattr(L, key)
        if v is not None:
            facts[key] = int(v) if float(v).is_integer() and abs(v) < 2**63 else float(v)
    facts["slices"] = summary.slices
    facts["instants"] = summary.instants
    facts["anomalous_records"] = summary.anomalous_records
    if L.trailer or summary.dropped_records:  # ktrace's capacity guard counted what it dropped
        facts["records_lost"] = min(summary.dropped_records, 2**63 - 1)  # a damaged trailer can claim more
    for k, n in sorted(summary.anomalies.items()):
        facts[f"anomaly_{k}"] = n
    for k, n in sorted(summary.notes.items()):
        facts[f"note_{k}"] = n
    return facts
