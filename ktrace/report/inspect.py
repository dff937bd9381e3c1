"""What ``ktrace inspect`` reports about a decoded buffer: a versioned dict (for --json) and its text form."""

from __future__ import annotations

from ..core.model import ANOMALY_KINDS, LANE_NOTES, Decoded, Summary
from ..core.units import format_ns
from .safe_text import printable

__all__ = ["inspect_dict", "inspect_text", "INSPECT_SCHEMA"]

INSPECT_SCHEMA = "ktrace.inspect/1"


def inspect_dict(d: Decoded, summary: Summary) -> dict:
    """Everything inspect knows, as plain JSON-ready values (schema ``ktrace.inspect/1``).

    d: any decoded part of the buffer (for the launch, layout and time facts); summary: the whole buffer's.
    """
    L = d.launch
    sm = summary
    return {
        "schema": INSPECT_SCHEMA,
        "source": d.source,
        "sidecar": L.sidecar,
        "layout": {
            "name": d.layout.name,
            "chosen_by": d.layout.chosen_by,
            "match": round(d.layout.score, 6),
            "scores": {k: round(v, 6) for k, v in d.layout.scores.items()},
        },
        "launch": {
            "kernel": L.kernel,
            "num_blocks": L.num_blocks,
            "num_groups": L.num_groups,
            "grid": list(L.grid) if L.grid else None,
            "device": L.device,
            "event_names": list(L.event_names),
            "group_names": list(L.group_names),
            "names_source": L.names_source,
            "timer_tick_ns": L.timer_tick_ns,
            "producer": L.producer,
            "producer_version": L.producer_version,
        },
        "lanes": {
            "total": L.num_blocks * L.num_groups,
            "with_records": sm.lanes_with_records,
            "capacity_per_lane": d.capacity_per_lane,
        },
        "records": sm.records,
        "records_written": L.records_written,  # what the sidecar says was read back (None: not said)
        "slices": sm.slices,
        "slices_per_event": {L.event_name(ev): n for ev, n in sorted(sm.slices_per_event.items())},
        "instants": sm.instants,
        "anomalous_records": sm.anomalous_records,
        "accounted": sm.accounted,
        "records_lost": sm.dropped_records,  # counted by ktrace's capacity guard, never stored
        "records_lost_by": "Proton's circular buffer" if L.producer == "proton" else "ktrace's capacity guard",
        "anomalies": {
            kind: {"count": n, "meaning": ANOMALY_KINDS[kind], "examples": sm.anomaly_examples.get(kind, [])}
            for kind, n in sorted(sm.anomalies.items())
        },
        "notes": {
            k: {"count": n, "meaning": LANE_NOTES[k], "example_lanes": sm.note_examples.get(k, [])}
            for k, n in sorted(sm.notes.items())
        },
        "gpcs": _gpcs(d),
        "unused_event_names": [nm for i, nm in enumerate(L.event_names) if i not in sm.seen_events],
        "aliasing": sm.aliasing,
        "time": {
            "origin": d.time_origin,
            "first_ns": sm.first_ns,
            "last_ns": sm.last_ns,
            "span_ns": sm.span_ns,
            "min_step_ns": sm.min_step_ns,
        },
    }


_PRODUCERS = {"iket": "NVIDIA IKET (run-iket's JSON trace)", "proton": "Triton Proton (intra-kernel trace)",
              "flashinfer": "FlashInfer's profiler macros", "ktrace": "ktrace's header"}


def _gpcs(d: Decoded) -> list | None:
    """Per GPC (when the producer names each block's, as IKET does): its blocks, SMs, first start and last end,
    and the block that ends last; the GPC that finishes the kernel first in the list's order of last end."""
    import numpy as np

    gpc = d.launch.block_gpc
    if not gpc:
        return None
    gpc = np.asarray(gpc, dtype=np.int64)
    s, i = d.slices, d.instants
    blocks = np.concatenate([s.block, s.block, i.block])
    times = np.concatenate([s.begin_ns, s.end_ns, i.ts_ns])
    sms = np.concatenate([s.sm, s.sm, i.sm])
    if not len(blocks):
        return None
    g = gpc[blocks]
    rows = []
    for k in np.unique(g[g >= 0]).tolist():
        m = g == k
        last = int(np.argmax(np.where(m, times, np.iinfo(np.int64).min)))
        rows.append({"gpc": k, "blocks": int(len(np.unique(blocks[m]))), "sms": int(len(np.unique(sms[m][sms[m] >= 0]))),
                     "first_ns": int(times[m].min()), "last_ns": int(times[last]), "last_block": int(blocks[last])})
    return sorted(rows, key=lambda r: (-r["last_ns"], r["gpc"]))


def _row(table, *cells) -> None:
    """A row of single-line cells: a line break in a name is shown escaped, never as a new row."""
    table.add_row(*(printable(c) for c in cells))


def inspect_text(info: dict) -> list:
    """Renderables (rich) for the terminal: a summary table, then anomalies and notes."""
    from rich.table import Table
    from rich.text import Text

    out = []
    t = Table(title=printable(f"ktrace inspect: {info['source']}"), show_header=False, title_justify="left")
    t.add_column(style="bold")
    t.add_column()
    L, lay = info["launch"], info["layout"]
    _row(t, "kernel", f"{L['kernel']}  ({L['num_blocks']} blocks x {L['num_groups']} groups)")
    if L["device"]:
        _row(t, "device", L["device"])
    if L.get("producer") in _PRODUCERS:
        _row(t, "producer", _PRODUCERS[L["producer"]] + (f" ({L['producer_version']})" if L.get("producer_version")
                                                        else ""))
    _row(t, "layout", f"{lay['name']} ({lay['chosen_by']}, {lay['match']:.1%} of records agree with their position)")
    _row(t, "lanes", f"{info['lanes']['with_records']} of {info['lanes']['total']} have records; "
              f"capacity {info['lanes']['capacity_per_lane']} records per lane")
    names = ", ".join(L["event_names"]) or "none: events are named event_<i>"
    _row(t, "event names", f"{names}  (from {L['names_source']})")
    _row(t, "records", str(info["records"]))
    written = info.get("records_written")
    if written is not None and written != info["records"]:
        from ..analysis.model.data_quality import records_written_warning  # here: convert imports no analysis

        _row(t, "data quality", records_written_warning(info["records"], written))
    _row(t, "slices", f"{info['slices']}  " + ", ".join(f"{k}: {v}" for k, v in info["slices_per_event"].items()))
    _row(t, "instants", str(info["instants"]))
    _row(t, "anomalous records", str(info["anomalous_records"]))
    if info["records_lost"]:
        if info.get("records_lost_by") == "Proton's circular buffer":
            _row(t, "records lost", f"{info['records_lost']} (Proton's circular buffer dropped each lane's first "
                                    "ones, as its warnings say: a larger buffer_size, or fewer scopes)")
        else:
            _row(t, "records lost", f"{info['records_lost']} (the capacity guard dropped them: give lanes more room)")
    ok = "yes" if info["accounted"] else "NO"
    _row(t, "accounted", f"{ok}: 2 x {info['slices']} + {info['instants']} + {info['anomalous_records']} = "
              f"{2 * info['slices'] + info['instants'] + info['anomalous_records']} of {info['records']} records")
    tm = info["time"]
    # Not the tick: the smallest gap between a lane's consecutive records is no finer than the timer tick and
    # often coarser; analyze's tick is the launch's, else the smallest difference between slice durations
    # (docs/glossary.md, tick), said in the same words here when the launch measured it.
    gap = tm["min_step_ns"]
    _row(t, "time", f"span {format_ns(tm['span_ns'])}, origin: {tm['origin']}, smallest gap between a lane's "
              f"consecutive records {format_ns(gap) if gap is not None else 'n/a'}"
              + (f", timer tick {L['timer_tick_ns']} ns (the launch's timer)" if L["timer_tick_ns"] else ""))
    out.append(t)
    if info.get("gpcs"):
        gp = Table(title="GPCs (by last end; IKET's locations)", title_justify="left")
        for col in ("GPC", "blocks", "SMs", "first start", "last end", "last block"):
            gp.add_column(col, justify="right")
        for r in info["gpcs"]:
            _row(gp, str(r["gpc"]), str(r["blocks"]), str(r["sms"]), format_ns(r["first_ns"]), format_ns(r["last_ns"]),
                 str(r["last_block"]))
        out.append(gp)
    if info["anomalies"]:
        a = Table(title="anomalous records", title_justify="left")
        for col in ("kind", "count", "meaning", "examples (block/group seq: raw)"):
            a.add_column(col)
        for kind, v in info["anomalies"].items():
            ex = "; ".join(f"{e['block']}/{e['group']} #{e['seq']}: {e['raw']}" for e in v["examples"])
            _row(a, kind, str(v["count"]), v["meaning"], ex)
        out.append(a)
    if info["notes"] or info["unused_event_names"] or info["aliasing"]:
        n = Table(title="notes", title_justify="left")
        for col in ("note", "lanes", "meaning", "example lanes"):
            n.add_column(col)
        for k, v in info["notes"].items():
            _row(n, k, str(v["count"]), v["meaning"], ", ".join(map(str, v["example_lanes"])))
        if info["unused_event_names"]:
            msg = "named in the metadata but never seen in the buffer"
            if "trailing_instant" in info["notes"]:
                msg += ": with this producer, instants followed by another record are overwritten"
            _row(n, "unseen events", str(len(info["unused_event_names"])), msg, ", ".join(info["unused_event_names"]))
        if info["aliasing"]:
            al = info["aliasing"]
            _row(n, 
                "blocks >= 4096",
                str(al["blocks_over_4095"]),
                "the tag's 12-bit block field aliases and bit 12+ of the block is OR-ed into the SM byte: "
                f"SM repaired for {al['sm_repaired_blocks']} blocks, untrusted (shown as SM ?) for "
                f"{al['sm_untrusted_blocks']}",
                ", ".join(map(str, al["untrusted_examples"])),
            )
        out.append(n)
    if not info["records"]:
        out.append(Text("The buffer holds no records (all slots are zero): was the kernel built with "
                        "-DFLASHINFER_ENABLE_PROFILER, and did it run?", style="yellow"))
    return out
