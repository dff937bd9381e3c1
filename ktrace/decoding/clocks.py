"""Clock offsets the user supplies: ``--offset GPU=NS`` (repeatable) and ``--clocks FILE``, for buffers whose
sidecars carry no measured offset (captures made outside ``ktrace run --device``: a harness of one's own,
FlashInfer's tests).

An offset is the GPU's ``%globaltimer`` minus the reference GPU's at the same instant, in ns, as
``timer.offset_to_reference_ns`` in a sidecar: the alignment subtracts it. A buffer given no offset is on the
reference's clock (offset 0).

GPU, in ``--offset GPU=NS`` and as a key of the clocks file, names a buffer by (first match wins) its path as
given, its file name or stem, its sidecar's device index (``device.index``) or PCI bus id, or, for a
buffer whose sidecar names no device, its position among the buffers (0, 1, ...).

The clocks file (JSON) is either what ``ktrace run --device`` writes (``clock_sync.json``: a measurement
before and after the run; each GPU's offset is the mean of the two, its uncertainty the larger of their
spreads and their difference), or::

    {"offsets_ns": {"1": 16400, "run_gpu2.bin": -5200}, "uncertainty_ns": 300}

(``uncertainty_ns`` optional: one figure for all, or a map like ``offsets_ns``).
"""

from __future__ import annotations

import json
from pathlib import Path

from ..core.errors import InputError
from ..core.jsonfmt import no_constant
from ..core.records import frozen
from ..core.terminal import excerpt

__all__ = ["GivenOffset", "parse_offsets", "read_clocks_file", "given_offsets", "MAX_OFFSET_NS"]

# Two GPUs' clocks of one host differ by far less (a clock set at boot); beyond this an offset would move
# times out of the trace's 64-bit range.
MAX_OFFSET_NS = 2**62


@frozen
class GivenOffset:
    """One GPU's offset to the reference (ns), how well it is known (ns, None: not stated), and where it
    came from (``--offset 1=16400``, ``--clocks clocks.json``)."""

    offset_ns: int
    uncertainty_ns: int | None
    source: str


def parse_offsets(values) -> dict[str, GivenOffset]:
    """``--offset`` values ("GPU=NS") as {GPU: GivenOffset}; InputError for a malformed or repeated one."""
    out: dict[str, GivenOffset] = {}
    for v in values or ():
        key, sep, ns = str(v).partition("=")
        key = key.strip()
        try:
            off = int(ns.strip().replace("_", "")) if len(ns) < 40 else None
        except ValueError:
            off = None
        if off is not None and not -MAX_OFFSET_NS < off < MAX_OFFSET_NS:
            raise InputError(f"--offset '{excerpt(v)}': {off:,} ns is beyond any two clocks' difference (at most "
                             f"{MAX_OFFSET_NS:,} ns either way); give the offset in ns")
        if not sep or not key or off is None:
            raise InputError(f"--offset '{excerpt(v)}': write GPU=NS, the GPU's clock minus the reference's in integer ns "
                             "(e.g. --offset 1=16400)")
        if key in out:
            raise InputError(f"--offset: GPU {key} is given twice")
        out[key] = GivenOffset(off, None, f"--offset {key}={off}")
    return out


def read_clocks_file(path) -> dict[str, GivenOffset]:
    """The offsets in a clocks file (see the module's docstring) as {GPU: GivenOffset}."""
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"), parse_constant=no_constant)
    except OSError as e:
        raise InputError(f"{p}: cannot read the clocks file ({e.strerror})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise InputError(f"{p}: the clocks file is not valid JSON ({e}); fix it") from None
    except (ValueError, RecursionError) as e:  # a number of 5,000 digits, NaN, or nesting too deep
        why = "it is nested too deeply" if isinstance(e, RecursionError) else str(e).split(";")[0]
        raise InputError(f"{p}: the clocks file cannot be read ({why}); fix it") from None
    src = f"--clocks {p}"
    if isinstance(data, dict) and isinstance(data.get("before"), dict):
        return _from_clock_sync(data, p, src)
    if not (isinstance(data, dict) and isinstance(data.get("offsets_ns"), dict) and data["offsets_ns"]):
        raise InputError(f"{p}: a clocks file holds {{\"offsets_ns\": {{\"GPU\": NS, ...}}}} (optionally "
                         "\"uncertainty_ns\") or is the clock_sync.json that ktrace run --device wrote")
    unc = data.get("uncertainty_ns")
    out = {}
    for key, ns in data["offsets_ns"].items():
        u = unc.get(key) if isinstance(unc, dict) else unc
        if not _is_int(ns) or (u is not None and not _is_int(u)):
            raise InputError(f"{p}: offsets_ns['{excerpt(key)}'] and uncertainty_ns must be integer ns (got "
                             f"{excerpt(repr(ns))}, {excerpt(repr(u))})")
        if not -MAX_OFFSET_NS < ns < MAX_OFFSET_NS or (u is not None and not 0 <= u < MAX_OFFSET_NS):
            raise InputError(f"{p}: offsets_ns['{excerpt(key)}'] is {ns:,} ns and its uncertainty {u!r}: an offset is at "
                             f"most {MAX_OFFSET_NS:,} ns either way, an uncertainty 0 or more; fix the file")
        out[str(key)] = GivenOffset(int(ns), None if u is None else int(u), src)
    return out


def _from_clock_sync(data: dict, p: Path, src: str) -> dict[str, GivenOffset]:
    meas = [m for m in (data.get("before"), data.get("after")) if isinstance(m, dict)]
    per: dict[str, list[tuple[int, int]]] = {}
    bus: dict[str, str] = {}
    for m in meas:
        entries = m.get("offsets") or ()
        if not isinstance(entries, list):
            raise InputError(f"{p}: 'offsets' must be a list of {{device_index, offset_to_reference_ns, spread_ns}} "
                             "(as ktrace run --device writes it); fix the file")
        for o in entries:
            try:
                idx, off, spread = (str(_bounded(o["device_index"], 1 << 20)), _bounded(o["offset_to_reference_ns"]),
                                    _bounded(o["spread_ns"]))
            except (KeyError, TypeError, ValueError, OverflowError):
                raise InputError(f"{p}: an entry of 'offsets' lacks device_index, offset_to_reference_ns or "
                                 f"spread_ns, or one is not an integer below {MAX_OFFSET_NS:,}; fix the file") from None
            per.setdefault(idx, []).append((off, spread))
            if isinstance(o.get("pci_bus_id"), str):
                bus[idx] = o["pci_bus_id"]
    if not per:
        raise InputError(f"{p}: the clock measurement holds no offsets")
    out = {}
    for idx, vals in per.items():
        offs = [v[0] for v in vals]
        unc = max([v[1] for v in vals] + [max(offs) - min(offs)])
        out[idx] = GivenOffset(round(sum(offs) / len(offs)), unc, src)
        if idx in bus:
            out[bus[idx]] = out[idx]
    return out


def given_offsets(offsets=None, clocks=None) -> dict[str, GivenOffset]:
    """The offsets of ``--clocks FILE`` overridden by ``--offset GPU=NS`` ones: {GPU: GivenOffset}, empty
    when neither is given."""
    out = read_clocks_file(clocks) if clocks else {}
    out.update(parse_offsets(offsets))
    return out


def _bounded(v, limit: int = MAX_OFFSET_NS) -> int:
    """``v`` as an int when it is one (or a whole float) of magnitude below ``limit``; ValueError otherwise."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or not -limit < v < limit:
        raise ValueError(v)
    return int(v)


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)
