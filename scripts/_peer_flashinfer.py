"""Run FlashInfer 0.7.4's own exporter on a buffer file, for scripts/bench_convert.py.

    PEER_PY scripts/_peer_flashinfer.py BUF OUT [--events a,b,c] [--module PATH]
    PEER_PY scripts/_peer_flashinfer.py --check OUT [--buf BUF]

PEER_PY is the peer venv's python (scripts/setup_bench_peer.sh makes /tmp/peer). It must be its own process:
tg4perfetto's generated perfetto.protos.* classes clash with the `perfetto` package's in one interpreter.

The exporter (flashinfer/profiler/__init__.py, extracted into .bench/ by the setup script) is loaded by file
path, so the flashinfer package (CUDA JIT and all) is never imported. It imports only the standard library,
torch and tg4perfetto, all real here: nothing is stubbed. Its signature is
export_to_perfetto_trace(profiler_buffer: torch.Tensor[uint64], event_names: list[str], file_name: str).

Export mode prints one JSON line: export_s (the exporter call alone, the figure the benchmark compares),
load_s, out_bytes. Check mode parses the written trace with tg4perfetto's own protobuf classes and prints what
it holds (packets, tracks, slice begins/ends, instants) and what it got wrong on this buffer: slices whose end
is before their begin (no unwrap of the 32-bit timer) and lanes merged onto one track (groups > 1).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_MODULE = os.path.join(HERE, "..", ".bench", "flashinfer-0.7.4", "flashinfer", "profiler", "__init__.py")


def load_exporter(path: str):
    if not os.path.isfile(path):
        sys.exit(f"{path}: FlashInfer's exporter is missing (run: bash scripts/setup_bench_peer.sh)")
    spec = importlib.util.spec_from_file_location("flashinfer_profiler_0_7_4", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def event_names_for(buf: str, given: str | None) -> list[str]:
    if given:
        return given.split(",")
    sidecar = os.path.splitext(buf)[0] + ".json"
    if os.path.isfile(sidecar):
        with open(sidecar) as f:
            names = json.load(f).get("event_names")
        if names:
            return list(names)
    # The exporter indexes event_names[event_idx]: give every 10-bit index a name.
    return [f"event{i}" for i in range(1024)]


def export(buf: str, out: str, events: str | None, module: str) -> dict:
    import numpy as np
    import torch

    mod = load_exporter(module)
    names = event_names_for(buf, events)
    t0 = time.perf_counter()
    tensor = torch.from_numpy(np.fromfile(buf, dtype=np.uint64))  # what profiler_buffer.cpu() gives it
    t1 = time.perf_counter()
    mod.export_to_perfetto_trace(tensor, names, out)
    t2 = time.perf_counter()
    # tg4perfetto closes the file only in TraceGenerator.__del__ (it has returned by now, so it has run).
    return {"export_s": t2 - t1, "load_s": t1 - t0, "out_bytes": os.path.getsize(out), "entries": int(tensor.numel())}


def check(out: str, buf: str | None) -> dict:
    from tg4perfetto import perfetto_trace_pb2 as pb2

    with open(out, "rb") as f:
        data = f.read()
    trace = pb2.Trace()
    # The file is several serialized Trace messages back to back (one per flush): protobuf merges repeated
    # fields on concatenation, so one parse reads them all.
    trace.ParseFromString(data)
    begin, end, inst = pb2.TrackEvent.TYPE_SLICE_BEGIN, pb2.TrackEvent.TYPE_SLICE_END, pb2.TrackEvent.TYPE_INSTANT
    names: dict[int, str] = {}
    stacks: dict[int, list[int]] = {}
    n = {"packets": len(trace.packet), "tracks": 0, "slice_begin": 0, "slice_end": 0, "instant": 0}
    negative = unmatched_end = max_depth = 0
    ts_min, ts_max = None, None
    for p in trace.packet:
        if p.HasField("track_descriptor"):
            if p.track_descriptor.HasField("parent_uuid"):
                n["tracks"] += 1
                names[p.track_descriptor.uuid] = p.track_descriptor.name
            continue
        if not p.HasField("track_event"):
            continue
        te = p.track_event
        ts = p.timestamp
        ts_min = ts if ts_min is None else min(ts_min, ts)
        ts_max = ts if ts_max is None else max(ts_max, ts)
        if te.type == begin:
            n["slice_begin"] += 1
            st = stacks.setdefault(te.track_uuid, [])
            st.append(ts)
            max_depth = max(max_depth, len(st))
        elif te.type == end:
            n["slice_end"] += 1
            st = stacks.get(te.track_uuid)
            if not st:
                unmatched_end += 1
            elif ts < st.pop():
                negative += 1
        elif te.type == inst:
            n["instant"] += 1
    res = dict(n)
    res.update(
        out_bytes=len(data),
        bytes_per_event=len(data) / max(1, n["slice_begin"] + n["slice_end"] + n["instant"]),
        ts_min=ts_min,
        ts_max=ts_max,
        ts_span_ns=None if ts_min is None else ts_max - ts_min,
        slices_end_before_begin=negative,
        ends_without_begin=unmatched_end,
        max_open_depth=max_depth,  # 1 for a lane's sequential phases; more means lanes merged on one track
        track_names_sample=sorted(names.values())[:4],
    )
    if buf:
        import numpy as np

        head = np.fromfile(buf, dtype=np.uint64, count=1)[0]
        nb, ng = int(head & np.uint64(0xFFFFFFFF)), int(head >> np.uint64(32))
        recs = np.fromfile(buf, dtype=np.uint64)[1:]
        res.update(num_blocks=nb, num_groups=ng, lanes_in_buffer=nb * ng, records_in_buffer=int((recs != 0).sum()))
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("paths", nargs="+", help="BUF OUT, or OUT with --check")
    ap.add_argument("--check", action="store_true", help="parse OUT and report what it holds")
    ap.add_argument("--buf", help="with --check: the buffer it came from")
    ap.add_argument("--events", help="comma-separated event names (default: BUF's sidecar .json, else event<i>)")
    ap.add_argument("--module", default=DEFAULT_MODULE, help="path of flashinfer/profiler/__init__.py")
    a = ap.parse_args(argv)
    if a.check:
        print(json.dumps(check(a.paths[0], a.buf)))
    else:
        if len(a.paths) != 2:
            ap.error("expected BUF OUT")
        print(json.dumps(export(a.paths[0], a.paths[1], a.events, a.module)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
