"""Benchmark the engine layer: load a synthetic trace (append, finalize) and run a few queries.

    /tmp/kv/bin/python scripts/bench_engine.py [--slices 100000 1000000] [--engine wasm]
    python scripts/bench_engine.py --before OLD_CHECKOUT [--records 1e5,1e6,1e7] [--analyze-records 1e6]

With --before: real traces instead, the same bench_convert.py buffers converted by this checkout and by
OLD_CHECKOUT (e.g. a `git worktree` or `git archive` of an earlier commit): per size the trace's bytes, the
trace processor's load (append + finalize) and a warm `ktrace query TRACE 'select count(*) from slice'`
(module cached), each code on its own trace, in alternation in one run; then `ktrace analyze BUF --engine
wasm --json` (the SQL package) with each, checking that both print the same JSON. Ratios are new / old.

The trace is written to a temporary file, then opened by path in a fresh process (so peak RSS is the
engine's and that size's own, not the builder's). The trace has the shape ktrace writes:
one packet sequence, interned event and annotation names, 132 block tracks under one launch track, and
per slice a BEGIN packet (name and track, no args: a lane's block, group and SM are on its track's description,
k is derived) and an END packet. Packets are built
with numpy as fixed-size records (varints padded to a fixed width, which protobuf allows), so building
1e6 slices takes well under a second; the first packets are checked against perfetto's trace protos.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

NAMES = ["load", "mma", "epilogue", "store"]
NUM_BLOCKS = 132
TS_WIDTH, UUID_WIDTH, VALUE_WIDTH = 9, 3, 4  # bytes per padded varint (63, 21, 28 bits)

QUERIES = {
    "count+sum(dur)": "SELECT count(*) AS n, sum(dur) AS total_ns FROM slice",
    "group by name": "SELECT name, count(*) AS n, avg(dur) AS mean_ns, max(dur) AS max_ns FROM slice GROUP BY name",
    "per-block via the track": (
        "SELECT extract_arg(t.source_arg_set_id, 'description') AS lane, count(*) AS n, sum(s.dur) AS busy_ns "
        "FROM slice s JOIN track t ON s.track_id = t.id WHERE s.name != 'launch' GROUP BY s.track_id"),
    "all rows (ts, dur, track)": "SELECT ts, dur, track_id FROM slice WHERE name != 'launch'",
}


def _varint_fixed(values: np.ndarray, width: int) -> np.ndarray:
    """(n, width) uint8: each value as a varint padded to ``width`` bytes (continuation bits set)."""
    values = values.astype(np.uint64)
    shifts = (7 * np.arange(width)).astype(np.uint64)
    out = ((values[:, None] >> shifts) & np.uint64(0x7F)).astype(np.uint8)
    out[:, :-1] |= 0x80
    return out


def _header() -> bytes:
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

    trace = pb.Trace()
    first = trace.packet.add()
    first.trusted_packet_sequence_id = 1
    first.sequence_flags = pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
    first.timestamp = 0
    for iid, name in enumerate(NAMES + ["launch"], start=1):
        entry = first.interned_data.event_names.add()
        entry.iid, entry.name = iid, name
    launch = trace.packet.add()
    launch.trusted_packet_sequence_id = 1
    launch.track_descriptor.uuid = 1
    launch.track_descriptor.name = "kernel launch"
    launch.track_descriptor.child_ordering = pb.TrackDescriptor.EXPLICIT
    for block in range(NUM_BLOCKS):
        packet = trace.packet.add()
        packet.trusted_packet_sequence_id = 1
        packet.track_descriptor.uuid = 100 + block
        packet.track_descriptor.parent_uuid = 1
        packet.track_descriptor.name = f"block {block}"
        packet.track_descriptor.sibling_order_rank = block
        packet.track_descriptor.description = f"block {block} · group 0 · SM {block}"
    return trace.SerializeToString()


def _event_packets(ts: np.ndarray, kind: int, uuid: np.ndarray, name_iid: np.ndarray | None,
                   args: list[tuple[int, np.ndarray]]) -> np.ndarray:
    """(n, size) uint8: one framed Trace.packet per row; kind 1 = slice begin, 2 = slice end."""
    n = len(ts)
    te = [np.full((n, 2), [0x48, kind], np.uint8),                          # type
          np.hstack([np.full((n, 1), 0x58, np.uint8), _varint_fixed(uuid, UUID_WIDTH)])]  # track_uuid
    if name_iid is not None:
        te.append(np.hstack([np.full((n, 1), 0x50, np.uint8), _varint_fixed(name_iid, 1)]))  # name_iid
    for iid, values in args:
        body = np.hstack([np.full((n, 2), [0x08, iid], np.uint8),           # name_iid
                          np.full((n, 1), 0x20, np.uint8), _varint_fixed(values, VALUE_WIDTH)])  # int_value
        te.append(np.hstack([np.full((n, 2), [0x22, body.shape[1]], np.uint8), body]))  # debug_annotations
    te_bytes = np.hstack(te)
    packet = np.hstack([
        np.full((n, 1), 0x40, np.uint8), _varint_fixed(ts, TS_WIDTH),       # timestamp
        np.full((n, 2), [0x50, 1], np.uint8),                                # trusted_packet_sequence_id
        np.full((n, 2), [0x68, 2], np.uint8),                                # SEQ_NEEDS_INCREMENTAL_STATE
        np.full((n, 2), [0x5A, te_bytes.shape[1]], np.uint8), te_bytes,      # track_event
    ])
    assert packet.shape[1] < 128
    return np.hstack([np.full((n, 2), [0x0A, packet.shape[1]], np.uint8), packet])


def build_trace(num_slices: int) -> bytes:
    """A trace with ``num_slices`` phase slices over NUM_BLOCKS block tracks plus one launch slice."""
    rng = np.random.default_rng(1)
    idx = np.arange(num_slices)
    block, k = idx % NUM_BLOCKS, idx // NUM_BLOCKS
    start = 1_000 + k * 1_000 + block * 3 + rng.integers(0, 50, num_slices)
    dur = 200 + rng.integers(0, 600, num_slices)
    name = k % len(NAMES) + 1
    begins = _event_packets(start, 1, 100 + block, name, [])
    ends = _event_packets(start + dur, 2, 100 + block, None, [])
    launch_begin = _event_packets(np.array([0]), 1, np.array([1]), np.array([len(NAMES) + 1]), [])
    launch_end = _event_packets(np.array([int((start + dur).max()) + 1]), 2, np.array([1]), None, [])
    # Emit in timestamp order, as a capture's writer does. Begin and end packets differ in size: lay them
    # out as rows of the larger size, then keep each row's own bytes.
    position = np.empty(2 * num_slices, np.int64)
    position[np.argsort(np.concatenate([start, start + dur]), kind="stable")] = np.arange(2 * num_slices)
    rows = np.zeros((2 * num_slices, max(begins.shape[1], ends.shape[1])), np.uint8)
    rows[position[:num_slices], :begins.shape[1]] = begins
    rows[position[num_slices:], :ends.shape[1]] = ends
    sizes = np.empty(2 * num_slices, np.int64)
    sizes[position[:num_slices]], sizes[position[num_slices:]] = begins.shape[1], ends.shape[1]
    events = rows[np.arange(rows.shape[1]) < sizes[:, None]].tobytes()
    return _header() + launch_begin.tobytes() + events + launch_end.tobytes()


def check_oracle(num_slices: int = 1000) -> None:
    """A small trace from build_trace must parse with perfetto's protos into exactly what was meant."""
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

    trace = pb.Trace.FromString(build_trace(num_slices))
    events = [p for p in trace.packet if p.HasField("track_event")]
    begins = [p for p in events if p.track_event.type == pb.TrackEvent.TYPE_SLICE_BEGIN]
    assert len(events) == 2 * (num_slices + 1) and len(begins) == num_slices + 1
    assert all(p.trusted_packet_sequence_id == 1 for p in trace.packet)
    timestamps = [p.timestamp for p in events]
    assert timestamps == sorted(timestamps)
    for p in begins[1:]:
        assert not p.track_event.debug_annotations and 100 <= p.track_event.track_uuid < 100 + NUM_BLOCKS


def run_one(path: str, num_slices: int, engine: str) -> dict:
    """Opens the trace at ``path`` and runs QUERIES; times in s, memory in MiB."""
    from ktrace.engine import open_trace

    marks: list[tuple[float, int]] = []
    t0 = time.perf_counter()
    with open_trace(path, engine=engine, progress=lambda done, total: marks.append((time.perf_counter(), done))) as s:
        t_open = time.perf_counter() - t0
        # The last progress call comes after finalize; the one before it after the last append.
        t_append = marks[-2][0] - t0
        t_finalize = marks[-1][0] - marks[-2][0]
        n = s.query("SELECT count(*) FROM slice").rows[0][0]
        assert n == num_slices + 1, n
        queries = {}
        for label, sql in QUERIES.items():
            t = time.perf_counter()
            result = s.query(sql)
            t_query = time.perf_counter() - t
            t = time.perf_counter()
            for column in result.columns:
                result.column(column)
            queries[label] = {"rows": len(result), "query_s": round(t_query, 3),
                              "columns_s": round(time.perf_counter() - t, 3)}
        heap = s._backend._host._memory.data_len(s._backend._store) if s.engine_name == "wasm" else None
    return {
        "slices": num_slices, "engine": engine, "trace_mb": round(os.path.getsize(path) / 1e6, 1),
        "append_s": round(t_append, 2), "finalize_s": round(t_finalize, 2),
        "open_total_s": round(t_open, 2), "queries": queries,
        "wasm_heap_mb": round(heap / 2**20) if heap else None,
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }


_LOAD = r"""
import json, sys, time
from ktrace.engine import open_trace
marks = []
t0 = time.perf_counter()
with open_trace(sys.argv[1], engine="wasm", progress=lambda done, total: marks.append(time.perf_counter())) as s:
    n = s.query("SELECT count(*) FROM slice").rows[0][0]
print(json.dumps({"append_s": marks[-2] - t0, "finalize_s": marks[-1] - marks[-2], "slices": n}))
"""


def _timed(cmd: list[str], code: str) -> tuple[float, str]:
    """(wall s, stdout) of cmd run with ktrace imported from the checkout ``code``."""
    env = dict(os.environ, PYTHONPATH=code)
    t = time.perf_counter()
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=code)
    wall = time.perf_counter() - t
    if out.returncode:
        raise SystemExit(f"{' '.join(cmd)} (PYTHONPATH={code}): rc {out.returncode}\n{out.stderr[-2000:]}")
    return wall, out.stdout


def compare(before: str, records: list[int], analyze_records: list[int], workdir: str, runs: int) -> int:
    """Old checkout vs this one on real traces: bytes, load, warm query; analyze with the SQL package."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_bc", os.path.join(REPO, "scripts", "bench_convert.py"))
    bc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bc)
    codes = {"before": os.path.abspath(before), "after": REPO}
    py = sys.executable
    for code in codes.values():  # warm the compiled-module cache
        _timed([py, "-c", bc.WARM_ENGINES], code)
    print(f"{os.cpu_count()} cores; before = {codes['before']}, after = {REPO}; median of {runs} run(s); "
          "ratio = after / before")
    med = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
    for n in records:
        buf, _ = bc.buffer_path(workdir, n, 2, 1)
        row = {}
        for label, code in codes.items():
            trace = os.path.join(workdir, f"{os.path.basename(buf)[:-4]}.{label}.perfetto-trace")
            _timed([py, "-m", "ktrace", "convert", buf, "-o", trace], code)
            row[label] = {"trace": trace, "mb": os.path.getsize(trace) / 1e6, "load": [], "query": []}
        for _ in range(runs):
            for label, code in codes.items():  # alternate, so that a busy spell hits both
                r = row[label]
                r["load"].append(json.loads(_timed([py, "-c", _LOAD, r["trace"]], code)[1]))
                r["query"].append(_timed([py, "-m", "ktrace", "query", r["trace"], "select count(*) from slice"],
                                         code)[0])
        b, a = row["before"], row["after"]
        lb = med([x["append_s"] + x["finalize_s"] for x in b["load"]])
        la = med([x["append_s"] + x["finalize_s"] for x in a["load"]])
        qb, qa = med(b["query"]), med(a["query"])
        print(f"{n:>12,.0f} records, {a['load'][0]['slices']:,} slices: trace {b['mb']:.1f} -> {a['mb']:.1f} MB "
              f"({a['mb'] / b['mb']:.2f}x); load {lb:.2f} -> {la:.2f} s ({la / lb:.2f}x); "
              f"ktrace query warm {qb:.2f} -> {qa:.2f} s ({qa / qb:.2f}x)")
    for n in analyze_records:
        buf, _ = bc.buffer_path(workdir, n, 2, 1)
        got = {label: [] for label in codes}
        outs = {}
        for _ in range(runs):
            for label, code in codes.items():
                wall, outs[label] = _timed([py, "-m", "ktrace", "analyze", buf, "--engine", "wasm", "--json"], code)
                got[label].append(wall)
        same = "same JSON" if outs["before"] == outs["after"] else "JSON DIFFERS"
        wb, wa = med(got["before"]), med(got["after"])
        print(f"{n:>12,.0f} records: ktrace analyze --engine wasm --json {wb:.2f} -> {wa:.2f} s ({wa / wb:.2f}x), "
              f"{same}")
        if outs["before"] != outs["after"]:
            return 1
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", metavar="OLD_CHECKOUT", help="compare real traces with an older checkout")
    parser.add_argument("--records", default="1e5,1e6,1e7", help="with --before: buffer sizes, comma-separated")
    parser.add_argument("--analyze-records", default="1e6", help="with --before: sizes to analyze ('' for none)")
    parser.add_argument("--runs", type=int, default=1, help="with --before: runs per figure (the median)")
    parser.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "ktrace-bench"))
    parser.add_argument("--slices", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--engine", default="wasm", choices=["wasm", "native", "auto"])
    parser.add_argument("--one", nargs=2, metavar=("PATH", "SLICES"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.before:
        os.makedirs(args.workdir, exist_ok=True)
        sizes = lambda text: [int(float(x)) for x in text.split(",") if x.strip()]  # noqa: E731
        return compare(args.before, sizes(args.records), sizes(args.analyze_records), args.workdir, args.runs)
    if args.one:
        print(json.dumps(run_one(args.one[0], int(args.one[1]), args.engine)))
        return 0
    check_oracle()
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.slices:
            path = os.path.join(tmp, f"bench-{n}.perfetto-trace")
            t = time.perf_counter()
            with open(path, "wb") as f:
                f.write(build_trace(n))
            t_build = time.perf_counter() - t
            # A fresh process per size: its peak RSS is the engine's, not the trace builder's.
            out = subprocess.run([sys.executable, __file__, "--one", path, str(n), "--engine", args.engine],
                                 capture_output=True, text=True)
            if out.returncode:
                print(out.stderr, file=sys.stderr)
                return out.returncode
            r = json.loads(out.stdout.strip().splitlines()[-1])
            print(f"{r['slices']:>9,} slices ({r['trace_mb']} MB, built in {t_build:.1f} s), engine {r['engine']}: "
                  f"append {r['append_s']} s, finalize {r['finalize_s']} s, open total {r['open_total_s']} s, "
                  f"wasm heap {r['wasm_heap_mb']} MiB, peak RSS {r['peak_rss_mb']} MiB")
            for label, q in r["queries"].items():
                print(f"    {label:28s} {q['rows']:>9,} rows  query {q['query_s']:.3f} s  "
                      f"columns {q['columns_s']:.3f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
