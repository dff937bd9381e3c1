"""The roofline: what the kernel's work (bytes moved, FLOPs) costs at the device's peak, and how near it runs.

The work comes from the launch facts (the sidecar's ``"work": {"bytes": N, "flops": N}``, or ``--bytes`` /
``--flops``); the peaks from ``--peak-gbps`` / ``--peak-tflops``, else from the table below by the device's name
(the sidecar's ``device.name``). ``floor_ns`` is the least wall the work allows: no finding's stake promises a
wall below it (docs/analysis-schema.md, "Roofline").
"""

from __future__ import annotations

import math
from dataclasses import asdict
from ...core.records import frozen

__all__ = ["PEAKS", "Roofline", "peaks_of", "roofline_of", "WORK_MAX_BYTES", "WORK_MAX_FLOPS", "PEAK_MAX"]

# Peak DRAM bandwidth (GB/s = bytes/ns) and dense FP16/BF16 tensor-core FLOP rate (TFLOP/s, no sparsity) per GPU,
# matched in order against the device name (lower case; the first pattern every word of which the name holds).
# Sources, NVIDIA's datasheets:
#   H100 SXM5 / PCIe: https://www.nvidia.com/en-us/data-center/h100/ (3.35 TB/s, 989 TFLOPS BF16 dense =
#     1,979 with sparsity / 2; PCIe 2.0 TB/s, 756 dense)
#   H200 SXM: https://www.nvidia.com/en-us/data-center/h200/ (4.8 TB/s; 1,979 TFLOPS BF16 with sparsity: 989 dense)
#   B200 (HGX B200): https://www.nvidia.com/en-us/data-center/hgx/ (8 TB/s; 2.25 PFLOPS FP16/BF16 dense)
#   A100 SXM4 / PCIe: https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/
#     nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf (80 GB SXM 2,039 GB/s, 80 GB PCIe 1,935 GB/s, 40 GB
#     1,555 GB/s; 312 TFLOPS BF16 dense)
# A kernel of another precision (FP8: twice the FP16 rate) needs --peak-tflops.
PEAKS: tuple[tuple[tuple[str, ...], str, float, float], ...] = (
    (("h100", "pcie"), "H100 PCIe", 2000.0, 756.0),
    (("h100",), "H100 SXM", 3350.0, 989.0),
    (("h200",), "H200", 4800.0, 989.0),
    (("b200",), "B200", 8000.0, 2250.0),
    (("a100", "80gb", "pcie"), "A100 80GB PCIe", 1935.0, 312.0),
    (("a100", "80gb"), "A100 80GB SXM", 2039.0, 312.0),
    (("a100",), "A100 40GB", 1555.0, 312.0),
)

WORK_MAX_BYTES = 1e18  # an exabyte: more than any one kernel moves
WORK_MAX_FLOPS = 1e21
PEAK_MAX = 1e7  # GB/s or TFLOP/s: far above any device


def peaks_of(device: str | None) -> tuple[str, float, float] | None:
    """(the table's name, GB/s, TFLOP/s) for a device name, or None for a device the table does not know."""
    if not device:
        return None
    name = str(device).lower()
    for words, label, gbps, tflops in PEAKS:
        if all(w in name for w in words):
            return label, gbps, tflops
    return None


@frozen
class Roofline:
    """The work, its achieved rates over the wall, the peaks and the least wall they allow (None: unknown)."""

    bytes: float | None
    flops: float | None
    wall_ns: float
    device: str | None  # the table's name of the device, or None
    peak_gbps: float | None
    peak_tflops: float | None
    peaks_source: str  # "given" (--peak-*), "table" or "unknown"

    @property
    def achieved_gbps(self) -> float | None:
        return self.bytes / self.wall_ns if self.bytes is not None and self.wall_ns > 0 else None

    @property
    def achieved_tflops(self) -> float | None:
        return self.flops / self.wall_ns / 1e3 if self.flops is not None and self.wall_ns > 0 else None

    @property
    def bytes_floor_ns(self) -> float | None:
        return self.bytes / self.peak_gbps if self.bytes is not None and self.peak_gbps else None

    @property
    def flops_floor_ns(self) -> float | None:
        return self.flops / (self.peak_tflops * 1e3) if self.flops is not None and self.peak_tflops else None

    @property
    def floor_ns(self) -> float | None:
        """The least wall the work allows at the peaks (the larger of the two bounds), None when neither is known."""
        f = [x for x in (self.bytes_floor_ns, self.flops_floor_ns) if x is not None]
        return max(f) if f else None

    @property
    def bound(self) -> str | None:
        """'bandwidth' or 'compute': which peak sets the floor."""
        b, c = self.bytes_floor_ns, self.flops_floor_ns
        if b is None and c is None:
            return None
        return "bandwidth" if c is None or (b is not None and b >= c) else "compute"

    def to_dict(self) -> dict:
        d = asdict(self)
        for k in ("achieved_gbps", "achieved_tflops", "floor_ns", "bound"):
            d[k] = getattr(self, k)
        d["bandwidth_share"] = (self.achieved_gbps / self.peak_gbps
                                if self.achieved_gbps is not None and self.peak_gbps else None)
        d["flops_share"] = (self.achieved_tflops / self.peak_tflops
                            if self.achieved_tflops is not None and self.peak_tflops else None)
        return d


def _number(v) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    v = float(v)
    return v if math.isfinite(v) and v > 0 else None


def roofline_of(launch: dict, wall_ns: float) -> Roofline | None:
    """The Roofline of a capture from its launch facts (``work_bytes``, ``work_flops``, ``peak_gbps``,
    ``peak_tflops``, ``device``); None when the facts give no work."""
    b, f = _number(launch.get("work_bytes")), _number(launch.get("work_flops"))
    if b is None and f is None:
        return None
    table = peaks_of(launch.get("device"))
    gbps, tflops = _number(launch.get("peak_gbps")), _number(launch.get("peak_tflops"))
    given = gbps is not None or tflops is not None
    if table is not None:
        gbps = gbps if gbps is not None else table[1]
        tflops = tflops if tflops is not None else table[2]
    source = "given" if given else "table" if table is not None else "unknown"
    return Roofline(b, f, float(wall_ns or 0), table[0] if table else None, gbps, tflops, source)
