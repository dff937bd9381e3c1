"""Fuzz the decoder, the trace writer and the inspect report with mutated real captures.

    python scripts/fuzz_decode.py --cases 1000000 [--seed 1] [--json summary.json]

Each case takes a capture from samples/ and damages it one way (flipped bits, a truncated tail, a garbage
header, random bytes, stale records in the slack, a header claiming a huge grid, duplicated or shuffled
records, a timer that jumps), then runs decode, writes the trace and builds the inspect report. The only
exceptions allowed are ktrace's own (KtraceError, with a message); every decoded case must account for
every record. Memory is capped (RLIMIT_AS) so a header claiming 2^32 blocks cannot allocate terabytes, and
each case has a time limit proportional to its size. Any other exception, a hang or a broken invariant is
a crash: its input is saved under tests/fuzz_regressions/ (replayed by the test suite).
"""

from __future__ import annotations

import argparse
import json
import resource
import signal
import sys
import time
import traceback
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from ktrace.api import summarize  # noqa: E402
from ktrace.decoding import decode  # noqa: E402
from ktrace.core.errors import KtraceError  # noqa: E402
from ktrace.export.writer import trace_bytes  # noqa: E402

REGRESSIONS = REPO / "tests" / "fuzz_regressions"


class Hang(Exception):
    pass


def _alarm(signum, frame):
    raise Hang()


def mutate(rng: np.random.Generator, base: np.ndarray) -> tuple[str, np.ndarray | bytes]:
    w = base.copy()
    n = len(w)
    kind = rng.integers(0, 10)
    if kind == 0:  # flipped bits
        for _ in range(rng.integers(1, 16)):
            i = rng.integers(0, n)
            w[i] ^= np.uint64(1) << np.uint64(rng.integers(0, 64))
        return "bitflip", w
    if kind == 1:  # truncated tail, possibly mid-record
        raw = w.tobytes()
        return "truncate", raw[: rng.integers(0, len(raw) + 1)]
    if kind == 2:  # garbage header
        w[0] = np.uint64(rng.integers(0, 1 << 63)) * np.uint64(rng.integers(1, 3))
        return "header", w
    if kind == 3:  # random bytes of a random length
        return "random", rng.integers(0, 256, rng.integers(0, 4096), dtype=np.uint8).tobytes()
    if kind == 4:  # stale records in the slack (a buffer that was never zeroed)
        z = np.flatnonzero(w[1:] == 0) + 1
        if len(z):
            pick = rng.choice(z, size=min(len(z), rng.integers(1, 64)), replace=False)
            w[pick] = base[rng.integers(1, n, size=len(pick))] ^ np.uint64(rng.integers(0, 1 << 40))
        return "stale", w
    if kind == 5:  # a header claiming a huge grid (maybe matching the length, maybe not)
        nb = int(rng.choice([1 << 32 - 1, 1 << 20, n - 1, (n - 1) // 2, 4096, 5000]))
        ng = int(rng.choice([1, 2, 1 << 31, 3]))
        w[0] = np.uint64((nb & 0xFFFFFFFF) | (ng << 32))
        return "hugegrid", w
    if kind == 6:  # duplicated records
        i = rng.integers(1, n, size=rng.integers(1, 32))
        w[rng.integers(1, n, size=len(i))] = w[i]
        return "duplicate", w
    if kind == 7:  # shuffled body
        body = w[1:]
        rng.shuffle(body)
        return "shuffle", w
    if kind == 8:  # timer jumps: add large offsets to the high words of some records
        i = rng.integers(1, n, size=rng.integers(1, 32))
        w[i] += np.uint64(rng.integers(0, 1 << 32)) << np.uint64(32)
        return "timejump", w
    # random tag words, timestamps kept
    i = rng.integers(1, n, size=rng.integers(1, 64))
    w[i] = (w[i] & np.uint64(0xFFFFFFFF00000000)) | np.uint64(rng.integers(0, 1 << 32))
    return "tags", w


def run_case(data, opts: dict) -> tuple[str, set]:
    """'ok' or 'rejected' (a KtraceError), and the anomaly kinds seen."""
    try:
        d = decode(data, **opts)
    except KtraceError as e:
        if not str(e):
            raise AssertionError("KtraceError without a message") from None
        return "rejected", set()
    if not d.accounted:
        raise AssertionError("records not accounted for")
    if len(d.slices) and (d.slices.dur_ns < 0).any():
        raise AssertionError("negative duration")
    trace_bytes(d)
    _, summary = summarize(data, **opts)
    if not summary.accounted or summary.records != d.records:
        raise AssertionError("streamed summary disagrees with the whole decode")
    return "ok", set(d.anomalies.counts()) | {f"note:{k}" for k in d.notes}


def _save(name, how, seed, case, data, why: str) -> None:
    REGRESSIONS.mkdir(parents=True, exist_ok=True)
    raw = data if isinstance(data, bytes) else data.tobytes()
    (REGRESSIONS / f"{name}-{how}-{seed}-{case}.bin").write_bytes(raw)
    (REGRESSIONS / f"{name}-{how}-{seed}-{case}.txt").write_text(why)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", help="write the summary here")
    ap.add_argument("--mem-gb", type=float, default=4.0, help="address-space cap for this process")
    a = ap.parse_args(argv)
    resource.setrlimit(resource.RLIMIT_AS, (int(a.mem_gb * (1 << 30)),) * 2)
    signal.signal(signal.SIGPROF, _alarm)
    rng = np.random.default_rng(a.seed)
    bases = []
    for p in sorted((REPO / "samples").glob("*.bin")):
        side = p.with_suffix(".json")
        if p.stat().st_size <= 64 * 1024:
            bases.append((p.stem, np.fromfile(p, "<u8"), str(side) if side.exists() else False))
    counts: dict[str, int] = {}
    kinds: set[str] = set()
    crashes, hangs, slowest = 0, 0, 0.0
    t_start = time.time()
    for case in range(a.cases):
        name, base, side = bases[case % len(bases)]
        # Names from the capture's sidecar (unknown indices become anomalies) or none at all.
        opts = {"sidecar": side if case % 2 else False}
        how, data = mutate(rng, base)
        size = len(data) if isinstance(data, bytes) else data.nbytes
        # A bound proportional to the input, in CPU time (a busy machine must not look like a hang).
        signal.setitimer(signal.ITIMER_PROF, 2.0 + size / 1e6)
        t0 = time.perf_counter()
        try:
            outcome, seen = run_case(data, opts)
            kinds |= seen
        except Hang:
            hangs += 1
            outcome = "hang"
            _save(name, how, a.seed, case, data, "hang: over the CPU-time bound\n")
        except Exception:  # noqa: BLE001 - a crash is what the fuzzer looks for
            crashes += 1
            outcome = "crash"
            _save(name, how, a.seed, case, data, traceback.format_exc())
            print(f"crash on case {case} ({name}, {how}):\n{traceback.format_exc()}", file=sys.stderr)
        finally:
            signal.setitimer(signal.ITIMER_PROF, 0)
        slowest = max(slowest, time.perf_counter() - t0)
        counts[f"{how}:{outcome}"] = counts.get(f"{how}:{outcome}", 0) + 1
        if (case + 1) % 50_000 == 0:
            print(f"{case + 1:,} cases, {crashes} crashes, {hangs} hangs, {time.time() - t_start:.0f} s", file=sys.stderr)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    summary = {
        "cases": a.cases,
        "seed": a.seed,
        "crashes": crashes,
        "hangs": hangs,
        "seconds": round(time.time() - t_start, 1),
        "slowest_case_s": round(slowest, 4),
        "peak_rss_mb": round(peak_mb, 1),
        "anomaly_kinds_seen": sorted(kinds),
        "outcomes": dict(sorted(counts.items())),
    }
    print(json.dumps(summary, indent=2))
    if a.json:
        Path(a.json).write_text(json.dumps(summary, indent=2) + "\n")
    return 1 if crashes or hangs else 0


if __name__ == "__main__":
    sys.exit(main())
