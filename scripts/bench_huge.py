"""Huge buffers: `ktrace convert` and `ktrace inspect` on 1e8 records (0.8 GB), time and peak memory.

    python scripts/bench_huge.py [--records 1e8] [--keep]

Writes a synthetic FlashInfer-format buffer (132 blocks, one group, three phases, crossing a timer wrap)
straight to disk a lane at a time, then runs each command in a fresh process and reports its wall time
and peak RSS against the buffer's and the trace's sizes. Goals: convert's peak RSS under 3x the trace's
size; inspect's well below the buffer's size.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from bench_convert import measure  # noqa: E402
from ktrace.decoding.encode import encode_tags  # noqa: E402

LANES = 132


def make(path: Path, records: int, seed: int = 1) -> int:
    steps = records // (2 * LANES)
    cap = 2 * steps + 2
    with open(path, "wb") as f:
        f.truncate((1 + cap * LANES) * 8)
    words = np.memmap(path, dtype="<u8", mode="r+")
    words[0] = LANES | (1 << 32)
    rng = np.random.default_rng(seed)
    for lane in range(LANES):  # a loop over lanes; each lane's records are vectorized
        dur = rng.integers(2000, 6000, steps)
        gap = rng.integers(50, 500, steps)
        begin = (7 << 32) - 10**8 + np.cumsum(dur + gap) - dur
        ts = np.stack([begin, begin + dur], axis=1).ravel().astype(np.uint64)
        seq = np.arange(2 * steps)
        tag = encode_tags("flashinfer", seq % 2, (seq // 2) % 3, np.full(2 * steps, lane), np.zeros(2 * steps, np.int64),
                          1, sm=np.full(2 * steps, lane))
        words[1 + lane: 1 + lane + 2 * steps * LANES: LANES] = ((ts & np.uint64(0xFFFFFFFF)) << np.uint64(32)) | tag
        if lane % 33 == 0:
            words.flush()
    words.flush()
    del words
    return 2 * steps * LANES


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=float, default=1e8)
    ap.add_argument("--dir", default=None, help="where to write the buffer and trace (default: a temp dir)")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--json")
    ap.add_argument("--ktrace", default=str(Path(sys.executable).parent / "ktrace"))
    a = ap.parse_args(argv)
    work = Path(a.dir or tempfile.mkdtemp(prefix="ktrace-huge-"))
    work.mkdir(parents=True, exist_ok=True)
    buf, trace = work / "huge.bin", work / "huge.perfetto-trace"
    n = make(buf, int(a.records))
    print(f"buffer: {n:,} records, {buf.stat().st_size / 1e9:.2f} GB", file=sys.stderr)
    conv = measure([a.ktrace, "convert", str(buf), "-o", str(trace)], timeout=3600)
    ins = measure([a.ktrace, "inspect", str(buf), "--json"], timeout=3600)
    res = {
        "records": n,
        "buffer_bytes": buf.stat().st_size,
        "trace_bytes": trace.stat().st_size if trace.exists() else None,
        "convert": {k: conv[k] for k in ("wall_s", "peak_rss_bytes", "rc")},
        "inspect": {k: ins[k] for k in ("wall_s", "peak_rss_bytes", "rc")},
    }
    if res["trace_bytes"]:
        res["convert_rss_over_trace"] = conv["peak_rss_bytes"] / res["trace_bytes"]
    res["inspect_rss_over_buffer"] = ins["peak_rss_bytes"] / res["buffer_bytes"]
    if ins["rc"] == 0:
        info = json.loads(ins["stdout"])
        res["inspect_accounted"] = info["accounted"]
        res["inspect_slices"] = info["slices"]
    print(json.dumps(res, indent=2))
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=2) + "\n")
    if not a.keep:
        for p in (buf, trace):
            if p.exists():
                os.remove(p)
    return 0 if conv["rc"] == 0 and ins["rc"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
