"""Several buffers, one per GPU, on one time axis: each GPU's clock offset from its sidecar, applied as a shift.

A buffer's decoded times are its own GPU's ``%globaltimer`` in Unix-epoch ns when the capture anchored them
(the kernel's 64-bit timer read, or the host clock at launch, which gives the high bits). Two GPUs of one host
disagree by tens of microseconds, so ``ktrace run --device 0,1`` measures each GPU's offset to the first
(``timer.offset_to_reference_ns`` in the sidecar); subtracting it puts every buffer on the reference GPU's
axis. Buffers without an anchor have no place in absolute time: they can only be aligned by their first
records (``mode="start"``), which says nothing about how the GPUs really lined up.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from ..core.choices import ALIGN_MODES
from ..core.errors import InputError
from ..core.jsonfmt import int_or_none
from ..core.model import Decoded
from ..core.names import cut_name
from ..core.sidecar import read_sidecar
from ..core.records import frozen

__all__ = ["first_record_ns", "shifted", "ALIGN_MODES", "GpuClock", "Alignment", "Shifted", "align", "shift_decoded", "open_decoders"]

UNANCHORED = "first record"


@frozen
class GpuClock:
    """One buffer's place among several: which GPU, its measured offset, and the shift applied.

    shift_ns is added to every decoded time of the buffer (``-offset_to_reference_ns`` when aligning by
    measured offsets); offset_* are None when the sidecar has no measurement."""

    position: int
    source: str
    label: str  # "GPU 1 (NVIDIA H200)", unique among the buffers merged
    device_index: int | None
    device_name: str | None
    pci_bus_id: str | None
    time_origin: str
    offset_to_reference_ns: int | None
    offset_spread_ns: int | None
    sync_id: str | None
    reference_pci_bus_id: str | None
    shift_ns: int
    offset_source: str = ""  # where the offset came from: the sidecar, --offset GPU=NS, --clocks FILE

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@frozen
class Alignment:
    """How the buffers were put on one axis: the mode, each buffer's clock, and what the user should know."""

    mode: str
    clocks: tuple[GpuClock, ...]
    notes: tuple[str, ...] = ()

    @property
    def spread_ns(self) -> int | None:
        """The largest measured offset spread: cross-GPU differences smaller than this are noise."""
        s = [c.offset_spread_ns for c in self.clocks if c.offset_spread_ns is not None]
        return max(s) if s else None

    def to_dict(self) -> dict:
        return {"mode": self.mode, "spread_ns": self.spread_ns, "notes": list(self.notes),
                "gpus": [c.to_dict() for c in self.clocks]}


def shift_decoded(d: Decoded, shift_ns: int) -> Decoded:
    """``d`` with every time moved by shift_ns."""
    if not shift_ns:
        return d
    s, i, a = d.slices, d.instants, d.anomalies
    return replace(d, slices=replace(s, begin_ns=s.begin_ns + shift_ns, end_ns=s.end_ns + shift_ns),
                   instants=replace(i, ts_ns=i.ts_ns + shift_ns), anomalies=replace(a, ts_ns=a.ts_ns + shift_ns),
                   origin_ns=d.origin_ns - shift_ns)


class Shifted:
    """A BufferDecoder (or Decoded) whose parts come out shifted by shift_ns; otherwise the decoder itself."""

    def __init__(self, source, shift_ns: int):
        self.source, self.shift_ns = source, int(shift_ns)

    def parts(self, records_per_part: int | None = None):
        if isinstance(self.source, Decoded):
            yield shift_decoded(self.source, self.shift_ns)
            return
        for d in self.source.parts(records_per_part):
            yield shift_decoded(d, self.shift_ns)

    def decode(self) -> Decoded:
        d = self.source if isinstance(self.source, Decoded) else self.source.decode()
        return shift_decoded(d, self.shift_ns)

    def __getattr__(self, name):
        return getattr(self.source, name)


def shifted(source, shift_ns: int):
    """``source`` (a BufferDecoder or Decoded) with its times moved by ``shift_ns``: itself when that is 0."""
    return Shifted(source, shift_ns) if shift_ns else source


def open_decoders(sources, **decode_options) -> list:
    """A BufferDecoder for each source (Decoded and BufferDecoder pass through). A sidecar path applies to
    one buffer only, so it is refused with several."""
    from .decoder import BufferDecoder

    sources = list(sources)
    if not sources:
        raise InputError("give at least one buffer")
    side = decode_options.get("sidecar")
    if len(sources) > 1 and side not in (None, False, True):
        raise InputError("--sidecar names one buffer's sidecar: with several buffers, keep each NAME.json "
                         "beside its NAME.bin")
    from .opening import open_source

    return [s if isinstance(s, (Decoded, BufferDecoder, Shifted)) else open_source(s, **decode_options)
            for s in sources]


def align(decoders, mode: str = "offset", given: dict | None = None) -> Alignment:
    """Each buffer's shift onto one time axis.

    mode "offset": the measured clock offsets from the sidecars (the raw clocks, with a note, when no
    buffer has one), or, when ``given`` ({GPU: clocks.GivenOffset}, from --offset/--clocks) is not empty,
    those instead; every buffer needs an absolute time anchor. mode "start": each buffer's first record
    moves onto the first buffer's (no anchor needed; the GPUs' true relative timing is lost).
    Raises InputError when the buffers cannot be aligned that way, saying why and what to do.
    """
    if mode not in ALIGN_MODES:
        raise InputError(f"align {mode!r}: choose one of {', '.join(ALIGN_MODES)}")
    facts = [_facts(i, d) for i, d in enumerate(decoders)]
    notes: list[str] = []
    if given:
        if mode == "start":
            raise InputError("--offset/--clocks give the clock offsets; --align start ignores them: use one or the other")
        _refuse_loose(facts)
        _apply_given(facts, given)
        shifts = [-int(f["offset"]) for f in facts]
    elif mode == "start":
        firsts = [_first_ns(d) for d in decoders]
        base = firsts[0] if firsts[0] is not None else 0
        shifts = [0 if f is None else base - f for f in firsts]
        notes.append("aligned by each buffer's first record (--align start): the GPUs' real relative timing is "
                     "not known, so cross-GPU skews are not measurements")
    else:
        _refuse_loose(facts)
        measured = [f for f in facts if f["offset"] is not None]
        if measured and len(measured) < len(facts):
            missing = ", ".join(f["source"] for f in facts if f["offset"] is None)
            raise InputError(
                f"{missing}: no measured clock offset, while {measured[0]['source']} has one: the buffers come "
                "from different runs. Capture them together (ktrace run --device 0,1 ...), or pass --align start")
        refs = {f["reference"] for f in measured}
        if len(refs) > 1:
            raise InputError(f"the clock offsets are measured against different reference GPUs ({', '.join(sorted(map(str, refs)))}): "
                             "capture the buffers in one run (ktrace run --device 0,1 ...), or pass --align start")
        if not measured:
            if len(facts) > 1:
                notes.append("no measured clock offsets in the sidecars: the GPUs' own clocks are used as they are, "
                             "and GPUs of one host disagree by tens of microseconds or more (16.4 µs and about 100 µs on two pairs "
                             "of H200s); "
                             "capture with ktrace run --device 0,1 to measure them")
            shifts = [0] * len(facts)
        else:
            shifts = [-int(f["offset"]) for f in facts]
            if len({f["sync_id"] for f in measured}) > 1:
                notes.append("the clock offsets come from different measurements (different runs): their clocks have "
                             "drifted in between, so the alignment is only as good as that drift")
    _refuse_out_of_range(decoders, facts, shifts)
    labels = _unique_labels(facts)
    clocks = tuple(GpuClock(f["position"], f["source"], lab, f["index"], f["name"], f["bus"], f["time_origin"],
                            f["offset"], f["spread"], f["sync_id"], f["reference"], int(sh),
                            _offset_source(f, mode))
                   for f, lab, sh in zip(facts, labels, shifts))
    return Alignment(mode, clocks, tuple(notes))


def _refuse_out_of_range(decoders, facts, shifts) -> None:
    """InputError when a shift moves a buffer's times (within 2^32 ns of its anchor) before time 0 or out of a
    trace's 64-bit range: an offset larger than any two clocks' difference."""
    for d, f, sh in zip(decoders, facts, shifts):
        launch = d.launch
        anchor = launch.timer_anchor_ns if launch.timer_anchor_ns is not None else launch.host_launch_unix_ns
        if anchor is not None and sh and not 2**32 <= anchor + sh <= 2**62:
            raise InputError(f"{f['source']}: its clock offset {-sh:+,} ns would move its times (about {anchor:,} "
                             "ns) out of a trace's range: no two clocks differ by that much; check the offset "
                             f"({f.get('given_source') or 'the sidecar timer.offset_to_reference_ns'})")


def _offset_source(f: dict, mode: str) -> str:
    if f.get("given_source"):
        return f["given_source"]
    if mode == "start":
        return "none (aligned by the first record)"
    return "sidecar (measured by ktrace run --device)" if f["offset"] is not None else "none (own clock)"


def _refuse_loose(facts) -> None:
    loose = [f for f in facts if f["time_origin"] == UNANCHORED]
    if loose:
        names = ", ".join(f["source"] for f in loose)
        raise InputError(
            f"{names}: no absolute time anchor (neither the kernel's 64-bit timer read nor the host clock at "
            f"launch is in {'its' if len(loose) == 1 else 'their'} sidecar), so {'its' if len(loose) == 1 else 'their'} "
            "times cannot be placed beside another GPU's. Capture with ktrace run (its sidecar records both), "
            "or pass --align start to line the buffers' first records up (relative timing between GPUs lost)")


def _keys(f: dict) -> list[str]:
    """The names a user may give this buffer in --offset GPU=NS or a clocks file, first match wins."""
    src = Path(f["source"])
    keys = [f["source"], src.name, src.stem]
    if f["index"] is not None:
        keys.append(str(f["index"]))
    if f["bus"]:
        keys.append(f["bus"])
    if f["index"] is None:
        keys.append(str(f["position"]))
    return keys


def _apply_given(facts, given: dict) -> None:
    """Replace each buffer's offset with the given one (0, the reference, when none names it)."""
    used = set()
    for f in facts:
        key = next((k for k in _keys(f) if k in given), None)
        if key is None:
            f.update(offset=0, spread=None, sync_id=None, reference=None,
                     given_source="reference (no offset given: its own clock)")
            continue
        g = given[key]
        used.add(key)
        f.update(offset=int(g.offset_ns), spread=g.uncertainty_ns, sync_id=None, reference=None,
                 given_source=g.source)
    unused = [k for k, g in given.items() if k not in used and g.source.startswith("--offset")]
    if unused:
        names = "; ".join(f"{f['source']}: {', '.join(dict.fromkeys(_keys(f)))}" for f in facts)
        raise InputError(f"--offset {', '.join(unused)}: no buffer by that name. Name a buffer by its path, file "
                         f"name, sidecar device index or PCI bus id, or position when it has no device index ({names})")


def _facts(position: int, d) -> dict:
    launch = d.launch
    meta = {}
    if launch.sidecar:
        try:
            meta = read_sidecar(launch.sidecar)
        except InputError:
            meta = {}
    dev = meta.get("device") if isinstance(meta.get("device"), dict) else {}
    timer = meta.get("timer") if isinstance(meta.get("timer"), dict) else {}
    sync = timer.get("clock_sync") if isinstance(timer.get("clock_sync"), dict) else {}
    source = getattr(d, "source", None) or getattr(getattr(d, "buf", None), "name", None) or f"buffer {position}"
    return {
        "position": position,
        "source": str(source),
        "index": int_or_none(dev.get("index")),
        "name": launch.device,
        "bus": dev.get("pci_bus_id") if isinstance(dev.get("pci_bus_id"), str) else None,
        "time_origin": d.time_origin,
        "offset": int_or_none(timer.get("offset_to_reference_ns")),
        "spread": int_or_none(timer.get("offset_spread_ns")),
        "sync_id": sync.get("id") if isinstance(sync.get("id"), str) else None,
        "reference": sync.get("reference_pci_bus_id") if isinstance(sync.get("reference_pci_bus_id"), str) else None,
    }


def _unique_labels(facts: list[dict]) -> list[str]:
    labels = []
    for f in facts:
        who = f"GPU {f['index']}" if f["index"] is not None else f"buffer {f['position']}"
        labels.append(f"{who} ({cut_name(f['name'], 128)})" if f["name"] else who)  # a name, bounded
    return [f"{lab} {Path(f['source']).name}" if labels.count(lab) > 1 else lab for lab, f in zip(labels, facts)]


def first_record_ns(d) -> int | None:
    """The earliest time (ns) of any record of a buffer (a BufferDecoder, decoded a range of lanes at a time, or
    a Decoded); None without records."""
    return _first_ns(d)


def _first_ns(d) -> int | None:
    """The earliest time of any record of a buffer (decoded a range of lanes at a time)."""
    parts = [d] if isinstance(d, Decoded) else d.parts()
    first = None
    for p in parts:
        for a in (p.slices.begin_ns, p.instants.ts_ns, p.anomalies.ts_ns):
            if len(a):
                first = int(a.min()) if first is None else min(first, int(a.min()))
    return first
