"""The cheapest grid barrier a GPU runs: the release of a tight, spinning grid barrier (from the last lane's end
to the next begins, the median over the lanes), measured on that GPU. A barrier finding's change cuts each
release down to this, not to nothing: no real barrier releases for free, so a stake that priced the barrier at
zero would promise more than any fix recovers (docs/fixes.md, the barrier case).

Matched in order against the device's name (lower case) like the roofline's peaks; a GPU the table does not know
gets no floor (the barrier priced as free, said in the finding's figures).
"""

from __future__ import annotations

# (words the name holds, the GPU, the release in ns, where it was measured): the median, over the spinning grid
# barriers of 132 blocks the samples hold on that GPU, of each barrier's median release
TIGHT_RELEASE: tuple[tuple[tuple[str, ...], str, float, str], ...] = (
    (("h100",), "H100", 1888.0, "samples/fixes/{barrier,straggler,late_start}/after.bin: 3 barriers, 1792-1888 ns"),
    (("h200",), "H200", 1696.0, "samples/{imbalance,balanced_ktrace,nested_ktrace}.bin, samples/ab/noop_before.bin: "
                                "10 barriers, 1472-1984 ns"),
)

__all__ = ["TIGHT_RELEASE", "tight_release_ns"]


def tight_release_ns(launch: dict | None) -> float | None:
    """The median release (ns) of the tightest grid barrier the capture's GPU is known to run; None: unknown."""
    device = (launch or {}).get("device") if isinstance(launch, dict) else None
    if not isinstance(device, str) or not device:
        return None
    name = device.lower()
    for words, _, ns, _ in TIGHT_RELEASE:
        if all(w in name for w in words):
            return ns
    return None
