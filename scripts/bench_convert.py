"""Benchmark `ktrace convert` against FlashInfer's own exporter and a numpy floor, on the same synthetic buffers.

    /tmp/kv/bin/python scripts/bench_convert.py [--quick] [--json results.json]

For each buffer (132 blocks, 1 and 2 groups, 1e5 / 1e6 / 1e7 records, current FlashInfer layout, 3 phases of a
few us with jitter and one slow block, starting near a 32-bit timer wrap) it times, each in a fresh process:

1. ktrace: the real command line, `ktrace convert BUF -o OUT` (wall time, peak RSS, output size).
2. peer: FlashInfer 0.7.4's export_to_perfetto_trace, in the peer venv (scripts/setup_bench_peer.sh), through
   scripts/_peer_flashinfer.py. Its figure is the exporter call alone (torch import and file load excluded),
   which flatters the peer: ktrace's figure is its whole process.
3. floor: numpy reads the buffer, splits the fields (type, event, block, timestamp) and writes as many bytes as
   ktrace's output (or the peer's, or 22 B/record while ktrace is absent). Its figure is its whole process
   too (interpreter + numpy import + work), so ktrace/floor compares like with like; the in-process work
   alone is in the JSON as floor_core_s.

Peak RSS is the child's own ru_maxrss (and that of any children it waited for), from os.wait4 in a fresh small
wrapper process per measurement (see measure()). Figures are medians over --runs runs.
Targets: peer/ktrace >= 300x, ktrace/floor <= 3x, ktrace peak RSS / output size < 3x.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
PEER_RUNNER = os.path.join(HERE, "_peer_flashinfer.py")
PEER_MODULE = os.path.join(REPO, ".bench", "flashinfer-0.7.4", "flashinfer", "profiler", "__init__.py")

NUM_BLOCKS = 132
EVENT_NAMES = ("load", "compute", "reduce")
BASE_NS = (2500.0, 6000.0, 1500.0)  # mean phase durations
JITTER_SIGMA = 0.10  # lognormal jitter of every phase
SLOW_BLOCK, SLOW_FACTOR = 17, 3.0  # this block's compute takes 3x
SKEW_NS, BARRIER_NS = 150.0, 800.0  # mean start skew after a barrier; barrier cost
TICK_NS = 32  # %globaltimer step on an H200
SPARE = 2  # zeroed records after each lane's last, as in real captures (a full lane is reported as such)
WRAP = 7  # timestamps cross k * 2^32 with k = WRAP, about a third of the way through the capture
GEN_VERSION = 3  # bump when the generator changes (cached buffers are keyed on it)
FALLBACK_BYTES_PER_RECORD = 22  # FlashInfer's output is 21-23 B/event (reference/anchors.md)
# Python code that compiles both builds of the embedded trace processor into the module cache, for the benchmarks
# that time the SQL engine (a checkout from before the 32-bit build has one, and compiles that).
WARM_ENGINES = ("from ktrace.engine.wasm import WasmTraceProcessor as W\nW().close()\n"
                "try: W(wide=False).close()\nexcept TypeError: pass")
TARGETS = {"peer_over_ktrace": 300.0, "ktrace_over_floor": 3.0, "rss_over_output": 3.0}


# ----------------------------------------------------------------------------------------------- floor
def floor_main(buf: str, nbytes: int, out: str) -> None:
    """The least a converter can do: read, split the fields, write nbytes. Prints its timings as JSON."""
    import numpy as np

    t0 = time.perf_counter()
    words = np.fromfile(buf, dtype=np.uint64)
    t1 = time.perf_counter()
    pairs = words[1:].view(np.uint32).reshape(-1, 2)  # little-endian: [tag, ts_lo]
    tag = np.ascontiguousarray(pairs[:, 0])
    ts = np.ascontiguousarray(pairs[:, 1])
    rtype = (tag & 0x3).astype(np.uint8)
    event = ((tag >> 2) & 0x3FF).astype(np.uint16)
    block = ((tag >> 12) & 0xFFF).astype(np.uint16)
    t2 = time.perf_counter()
    cols = [memoryview(c).cast("B") for c in (ts, block, event, rtype)]
    left = nbytes
    with open(out, "wb") as f:
        while left > 0:
            for c in cols:
                n = min(left, len(c))
                f.write(c[:n])
                left -= n
                if left == 0:
                    break
    t3 = time.perf_counter()
    print(json.dumps({"core_s": t3 - t0, "read_s": t1 - t0, "split_s": t2 - t1, "write_s": t3 - t2}))


# -------------------------------------------------------------------------------------------- buffers
def _load_synthetic():
    # From this checkout (not whichever ktrace the benchmarked python has): the encoder beside its layouts.
    if REPO not in sys.path:
        sys.path.insert(0, REPO)
    from ktrace.decoding import encode

    return encode


def make_buffer(records: int, groups: int, seed: int):
    """(buffer, facts) with about `records` records: 132 blocks x groups lanes of load/compute/reduce steps.

    Every phase starts after a grid barrier (the slowest lane's end of the previous phase), with a random skew,
    so the slow block's compute sets the pace, as in a persistent kernel. Times are on a 32 ns tick.
    """
    import numpy as np

    lanes = NUM_BLOCKS * groups
    steps = max(3, round(records / (2 * lanes)))
    rng = np.random.default_rng(seed)
    event = np.arange(steps) % len(EVENT_NAMES)
    dur = np.asarray(BASE_NS)[event] * rng.lognormal(0.0, JITTER_SIGMA, (lanes, steps))
    slow = np.arange(lanes) // groups == SLOW_BLOCK
    dur[np.ix_(slow, event == 1)] *= SLOW_FACTOR
    skew = rng.exponential(SKEW_NS, (lanes, steps))
    step_span = (skew + dur).max(axis=0) + BARRIER_NS
    barrier = np.concatenate([[0.0], np.cumsum(step_span[:-1])])
    begin = barrier + skew
    end = begin + dur
    span = int(barrier[-1] + step_span[-1])
    # The wrap falls 1 us into the compute phase nearest a third of the way in: most lanes' compute slice
    # straddles it (a converter without unwrap draws those ending before they begin), the rest start after it.
    j = steps // 3 + (1 - steps // 3) % len(EVENT_NAMES)
    t0 = WRAP * 2**32 - int(barrier[min(j, steps - 1)] + 1000) // TICK_NS * TICK_NS
    begin = t0 + (begin // TICK_NS).astype(np.int64) * TICK_NS
    end = np.maximum(t0 + (end // TICK_NS).astype(np.int64) * TICK_NS, begin + TICK_NS)
    del dur, skew
    buf = _load_synthetic().phase_buffer(begin, end, event, num_groups=groups, sm=np.arange(NUM_BLOCKS), spare=SPARE)
    facts = {
        "records": int(2 * steps * lanes),
        "spare_per_lane": SPARE,
        "num_blocks": NUM_BLOCKS,
        "num_groups": groups,
        "steps_per_lane": int(steps),
        "span_ns": span,
        "first_ts_ns": int(begin.min()),
        "last_ts_ns": int(end.max()),
        "wraps": int((int(end.max()) >> 32) - (int(begin.min()) >> 32)),
        "seed": seed,
    }
    return buf, facts


def buffer_path(workdir: str, records: int, groups: int, seed: int) -> tuple[str, dict]:
    """The cached buffer file for (records, groups), made if missing, with a sidecar .json like the samples'."""
    name = f"fi_{records:.0e}_g{groups}_s{seed}_v{GEN_VERSION}".replace("+", "")
    path = os.path.join(workdir, name + ".bin")
    sidecar = os.path.join(workdir, name + ".json")
    if os.path.isfile(path) and os.path.isfile(sidecar):
        with open(sidecar) as f:
            return path, json.load(f)["synthetic"]
    t0 = time.perf_counter()
    buf, facts = make_buffer(records, groups, seed)
    buf.tofile(path)
    facts["generate_s"] = round(time.perf_counter() - t0, 3)
    meta = {
        "sample": name,
        "kernel": "bench_phases",
        "grid": [NUM_BLOCKS, 1, 1],
        "num_blocks": NUM_BLOCKS,
        "num_groups": groups,
        "event_names": list(EVENT_NAMES),
        "buffer": {
            "dtype": "uint64 little-endian",
            "entries": int(buf.size),
            "layout": "buf[0]=num_blocks|num_groups<<32; record k of lane (b,g) at 1+k*nb*ng+b*ng+g",
            "file": os.path.basename(path),
            "bytes": int(buf.nbytes),
        },
        "block_smid": list(range(NUM_BLOCKS)),
        "synthetic": facts,
    }
    with open(sidecar, "w") as f:
        json.dump(meta, f, indent=1)
    return path, facts


# ---------------------------------------------------------------------------------------- measurement
# A fresh, small process per measurement spawns the command and reaps it with wait4. Not the benchmark process
# itself: a child's ru_maxrss starts at the high-water RSS of the process it was forked/vforked from (Linux
# keeps the old mm's hiwater across exec), so children of this process, grown by making 1e7-record buffers,
# would all report at least its peak. The wrapper's own peak (python -S -I, ~10 MB) is the floor of what it
# reports, far under anything measured here.
_WRAPPER = r"""
import os, sys, time
out, cmd = sys.argv[1], sys.argv[2:]
t0 = time.perf_counter()
pid = os.posix_spawnp(cmd[0], cmd, os.environ)
_, status, ru = os.wait4(pid, 0)
wall = time.perf_counter() - t0
with open(out, "w") as f:
    f.write(f"{wall!r} {ru.ru_maxrss} {os.waitstatus_to_exitcode(status)} {ru.ru_utime + ru.ru_stime!r}")
"""


def _tree_pss(session: int) -> int:
    """The proportional set size (bytes) of every process in the session, summed: shared pages counted once,
    so forked workers over one parent's columns are not counted again per worker. 0 where /proc lacks it."""
    total = 0
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if int(fields[3]) != session:  # fields after the name: state, ppid, pgrp, session
                continue
            with open(f"/proc/{d}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Pss:"):
                        total += int(line.split()[1]) * 1024
                        break
        except (OSError, ValueError, IndexError):
            continue
    return total


def _sample_pss(session: int, stop, peak: list) -> None:
    while not stop.wait(0.05):
        peak[0] = max(peak[0], _tree_pss(session))


def measure(cmd: list[str], *, timeout: float, cwd: str = REPO, tree: bool = False) -> dict:
    """Run cmd; its wall time, its own peak RSS (wait4 in a fresh wrapper), exit code, stdout, stderr's tail;
    with tree, also the peak of its process tree's summed PSS (sampled every 50 ms: worker processes
    included, shared pages once)."""
    with tempfile.TemporaryFile() as so, tempfile.TemporaryFile() as se, \
            tempfile.NamedTemporaryFile("r", suffix=".rusage") as ru_file:
        p = subprocess.Popen([sys.executable, "-S", "-I", "-c", _WRAPPER, ru_file.name, *cmd],
                             stdout=so, stderr=se, stdin=subprocess.DEVNULL, cwd=cwd, start_new_session=True)
        timed_out = False
        peak, stop = [0], threading.Event()
        sampler = threading.Thread(target=_sample_pss, args=(p.pid, stop, peak), daemon=True) if tree else None
        if sampler is not None:
            sampler.start()
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(p.pid, signal.SIGKILL)  # the wrapper's session: it and the command, nothing else
            p.wait()
        except BaseException:  # Ctrl-C: the session of its own doesn't get the terminal's SIGINT
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            raise
        finally:
            if sampler is not None:
                stop.set()
                sampler.join()
        got = ru_file.read().split()
        so.seek(0)
        se.seek(0)
        stdout = so.read().decode(errors="replace")
        stderr = se.read().decode(errors="replace")
    if len(got) == 4:
        wall, maxrss, rc, cpu = float(got[0]), int(got[1]), int(got[2]), float(got[3])
    else:
        wall, maxrss, rc, cpu = None, 0, p.returncode or -1, None
    scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB on Linux
    return {
        "wall_s": wall,
        "cpu_s": cpu,  # user + system time of the command and the workers it waited for
        "peak_rss_bytes": maxrss * scale,
        "rc": rc if not timed_out else -9,
        "timed_out": timed_out,
        "stdout": stdout,
        "stderr_tail": stderr[-2000:],
        **({"peak_tree_pss_bytes": peak[0]} if tree else {}),
    }


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def find_ktrace(a) -> list[str] | None:
    if a.ktrace:
        return shlex.split(a.ktrace)
    exe = os.path.join(os.path.dirname(a.ktrace_python), "ktrace")
    if os.access(exe, os.X_OK):
        return [exe]
    # `python -m ktrace` from the repo root works before the package is installed.
    try:
        probe = subprocess.run([a.ktrace_python, "-m", "ktrace", "--help"], cwd=REPO, capture_output=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if probe.returncode == 0:
        return [a.ktrace_python, "-m", "ktrace"]
    return None


def measured_package(cmd: list[str]) -> tuple[str, str] | None:
    """(the Python, the ktrace package's folder) that ``cmd`` runs, or None when it cannot be found out."""
    module = cmd[1:2] == ["-m"]  # `python -m ktrace`, run from the repo root (measure's cwd): that ktrace
    py = cmd[0] if module else os.path.join(os.path.dirname(cmd[0]), "python")
    if not os.access(py, os.X_OK):
        return None
    probe = subprocess.run([py, "-c", "import ktrace, os; print(os.path.realpath(ktrace.__file__))"],
                           cwd=REPO if module else "/", capture_output=True, text=True, timeout=120)
    return (py, os.path.dirname(probe.stdout.strip())) if probe.returncode == 0 else None


def warn_if_other_checkout(cmd: list[str]) -> tuple[str, str] | None:
    """Says so on stderr when the ktrace that ``cmd`` runs is not this checkout's (an editable install made from
    another clone, whose `.ci/run` re-points it): its figures would be that clone's. Returns
    ``measured_package(cmd)``."""
    found = measured_package(cmd)
    if found is not None and not found[1].startswith(os.path.realpath(REPO) + os.sep):
        print(f"warning: {' '.join(cmd)} runs the ktrace at {found[1]}, not this checkout's "
              f"({REPO}): `pip install -e .` here to measure it", file=sys.stderr)
    return found


def write_bytecode(py: str, package: str) -> None:
    """The package's modules compiled to bytecode before any run, as `pip install .` leaves them: an editable
    install under PYTHONDONTWRITEBYTECODE=1 (set on some machines) would compile every module again in every
    run (0.26 s of a `ktrace analyze`), a cost no installed copy has and the floor's numpy does not pay."""
    subprocess.run([py, "-m", "compileall", "-q", package], capture_output=True, timeout=300)


_KTRACE_CORE = """
import json, sys, time
from ktrace.api import convert
t0 = time.perf_counter()
convert(sys.argv[1], sys.argv[2])
print(json.dumps({"core_s": time.perf_counter() - t0}))
"""


def bench_ktrace_core(buf, out, a) -> float | None:
    """ktrace's conversion alone (decode + write, imports excluded): the like-for-like figure against the
    peer's exporter call and the floor's in-process time."""
    got = []
    for _ in range(a.runs):
        r = measure([a.ktrace_python, "-c", _KTRACE_CORE, buf, out], timeout=a.timeout)
        if r["rc"] != 0:
            return None
        got.append(json.loads(r["stdout"].strip().splitlines()[-1])["core_s"])
    return median(got)


def bench_ktrace(cmd, buf, out, a) -> dict:
    runs, sizes = [], []
    for _ in range(a.runs):
        if os.path.exists(out):
            os.remove(out)
        r = measure(cmd + ["convert", buf, "-o", out] + a.ktrace_arg, timeout=a.timeout)
        if r["rc"] != 0 or not os.path.isfile(out) or os.path.getsize(out) == 0:
            print(f"  ktrace convert failed (rc {r['rc']}): {r['stderr_tail'][-600:]}", file=sys.stderr)
            return {"error": f"rc {r['rc']}", "stderr_tail": r["stderr_tail"]}
        sizes.append(os.path.getsize(out))
        r.pop("stdout")
        runs.append(r)
        print(f"  ktrace  {r['wall_s']:8.3f} s  {r['peak_rss_bytes'] / 1e6:8.1f} MB peak", file=sys.stderr)
    core = bench_ktrace_core(buf, out, a)
    if core is not None:
        print(f"  ktrace  {core:8.3f} s in-process", file=sys.stderr)
    return {
        "s": median(r["wall_s"] for r in runs),
        "core_s": core,
        "peak_rss_bytes": median(r["peak_rss_bytes"] for r in runs),
        "out_bytes": sizes[-1],
        "runs": [{"wall_s": r["wall_s"], "peak_rss_bytes": r["peak_rss_bytes"]} for r in runs],
    }


def bench_peer(buf, out, n_runs, a) -> dict:
    runs = []
    for _ in range(n_runs):
        r = measure([a.peer_python, PEER_RUNNER, buf, out], timeout=a.timeout)
        if r["rc"] != 0:
            print(f"  peer failed (rc {r['rc']}): {r['stderr_tail'][-600:]}", file=sys.stderr)
            return {"error": f"rc {r['rc']}", "stderr_tail": r["stderr_tail"]}
        got = json.loads(r["stdout"].strip().splitlines()[-1])
        runs.append({"export_s": got["export_s"], "wall_s": r["wall_s"], "peak_rss_bytes": r["peak_rss_bytes"]})
        print(f"  peer    {got['export_s']:8.3f} s export, {r['wall_s']:.3f} s process, "
              f"{got['out_bytes'] / 1e6:.2f} MB out", file=sys.stderr)
    res = {
        "s": median(r["export_s"] for r in runs),
        "process_s": median(r["wall_s"] for r in runs),
        "peak_rss_bytes": median(r["peak_rss_bytes"] for r in runs),
        "out_bytes": os.path.getsize(out),
        "runs": runs,
    }
    if a.peer_check:
        r = measure([a.peer_python, PEER_RUNNER, "--check", out, "--buf", buf], timeout=a.timeout)
        if r["rc"] == 0:
            res["check"] = json.loads(r["stdout"].strip().splitlines()[-1])
        else:
            res["check"] = {"error": r["stderr_tail"][-600:]}
    return res


def bench_floor(buf, nbytes, out, a) -> dict:
    runs = []
    for _ in range(a.runs):
        r = measure([sys.executable, os.path.abspath(__file__), "_floor", buf, str(nbytes), out], timeout=a.timeout)
        if r["rc"] != 0:
            print(f"  floor failed (rc {r['rc']}): {r['stderr_tail'][-600:]}", file=sys.stderr)
            return {"error": f"rc {r['rc']}"}
        got = json.loads(r["stdout"].strip().splitlines()[-1])
        runs.append({"wall_s": r["wall_s"], "peak_rss_bytes": r["peak_rss_bytes"], **got})
        print(f"  floor   {r['wall_s']:8.3f} s  ({got['core_s']:.3f} s in-process), "
              f"{r['peak_rss_bytes'] / 1e6:.1f} MB peak", file=sys.stderr)
    return {
        "s": median(r["wall_s"] for r in runs),
        "core_s": median(r["core_s"] for r in runs),
        "peak_rss_bytes": median(r["peak_rss_bytes"] for r in runs),
        "out_bytes": nbytes,
        "runs": runs,
    }


def ratios(row) -> None:
    k, p, f = row.get("ktrace") or {}, row.get("peer") or {}, row.get("floor") or {}
    ks, ps, fs = k.get("s"), p.get("s"), f.get("s")
    row["peer_over_ktrace"] = ps / ks if ks and ps else None
    row["ktrace_over_floor"] = ks / fs if ks and fs else None
    kc = k.get("core_s")
    row["ktrace_over_floor_core"] = kc / f["core_s"] if kc and f.get("core_s") else None
    row["peer_over_ktrace_core"] = ps / kc if kc and ps else None
    row["rss_over_output"] = k["peak_rss_bytes"] / k["out_bytes"] if k.get("out_bytes") else None
    row["ktrace_events_per_s"] = row["records"] / ks if ks else None
    row["peer_events_per_s"] = row["records"] / ps if ps else None
    row["floor_events_per_s"] = row["records"] / fs if fs else None


# -------------------------------------------------------------------------------------------- report
def _fmt(x, spec, dash="—"):
    return dash if x is None else format(x, spec)


def _mark(x, key):
    if x is None:
        return ""
    if key == "peer_over_ktrace":
        ok = x >= TARGETS[key]
    elif key == "ktrace_over_floor":
        ok = x <= TARGETS[key]
    else:
        ok = x < TARGETS[key]
    return " ✓" if ok else " ✗"


def table_rows(rows):
    head = ["events", "groups", "ktrace s", "ktrace core s", "ktrace ev/s", "peak RSS MB", "output MB",
            "peak/output", "peer s", "floor s", "floor core s", "peer/ktrace", "peer/ktrace core",
            "ktrace/floor", "core/core"]
    body = []
    for r in rows:
        k, p, f = r.get("ktrace") or {}, r.get("peer") or {}, r.get("floor") or {}
        body.append([
            f"{r['records']:,}",
            str(r["groups"]),
            _fmt(k.get("s"), ".3f", "n/a" if r.get("ktrace_missing") else "error" if k.get("error") else "—"),
            _fmt(k.get("core_s"), ".3f"),
            _fmt(r.get("ktrace_events_per_s"), ",.0f"),
            _fmt(k.get("peak_rss_bytes") and k["peak_rss_bytes"] / 1e6, ".1f"),
            _fmt(k.get("out_bytes") and k["out_bytes"] / 1e6, ".2f"),
            _fmt(r.get("rss_over_output"), ".2f") + _mark(r.get("rss_over_output"), "rss_over_output"),
            _fmt(p.get("s"), ".2f", "error" if p.get("error") else "skipped"),
            _fmt(f.get("s"), ".3f"),
            _fmt(f.get("core_s"), ".3f"),
            _fmt(r.get("peer_over_ktrace"), ".0f") + _mark(r.get("peer_over_ktrace"), "peer_over_ktrace"),
            _fmt(r.get("peer_over_ktrace_core"), ".0f") + _mark(r.get("peer_over_ktrace_core"), "peer_over_ktrace"),
            _fmt(r.get("ktrace_over_floor"), ".2f") + _mark(r.get("ktrace_over_floor"), "ktrace_over_floor"),
            _fmt(r.get("ktrace_over_floor_core"), ".2f") + _mark(r.get("ktrace_over_floor_core"), "ktrace_over_floor"),
        ])
    return head, body


def print_table(rows) -> None:
    head, body = table_rows(rows)
    title = "ktrace convert vs FlashInfer 0.7.4 exporter vs numpy floor (medians)"
    note = ("targets: peer/ktrace >= 300x, ktrace/floor <= 3x, peak RSS/output < 3x. peer s = exporter call only; "
            "ktrace s and floor s = whole process; core s = the conversion alone, in-process (core/core and peer/ktrace core compare like with like)")
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(head)]
        print(title)
        print("  ".join(h.rjust(w) for h, w in zip(head, widths)))
        for b in body:
            print("  ".join(c.rjust(w) for c, w in zip(b, widths)))
        print(note)
        return
    t = Table(title=title, caption=note)
    for h in head:
        t.add_column(h, justify="right")
    for b in body:
        t.add_row(*b)
    Console(width=max(160, len(note))).print(t)


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def print_verdicts(rows, a) -> None:
    """One line per buffer: ktrace's wall time as a ratio to the floor of the same run, and the 3x target."""
    jobs = a.jobs if a.jobs is not None else _cores()
    print(f"cores: os.cpu_count() = {os.cpu_count()}, available to this process = {_cores()}; "
          f"ktrace convert worker processes: {jobs}{'' if a.jobs is not None else ' (its default: the cores available)'}")
    limit = TARGETS["ktrace_over_floor"]
    for r in rows:
        x, k = r.get("ktrace_over_floor"), r.get("ktrace") or {}
        if x is None:
            continue
        peak = r.get("rss_over_output")
        rss_ok = k.get("peak_rss_bytes") is not None and k["peak_rss_bytes"] <= min(3 * k["out_bytes"], 2 << 30)
        print(f"{r['records']:>12,} records, {r['groups']} group(s): ktrace {k['s']:.2f} s / floor {r['floor']['s']:.2f} s "
              f"= {x:.2f}x (target <= {limit:g}x: {'met' if x <= limit else 'NOT met'}); peak RSS "
              f"{k['peak_rss_bytes'] / 1e6:,.0f} MB = {peak:.2f}x the output (target <= 3x and <= 2 GB: "
              f"{'met' if rss_ok else 'NOT met'})")


# ---------------------------------------------------------------------------------------------- main
def _events(s: str) -> list[int]:
    return [int(float(x)) for x in s.split(",") if x]


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=_events, default=[10**5, 10**6, 10**7], help="records per buffer (1e5,1e6,1e7)")
    ap.add_argument("--groups", type=lambda s: [int(x) for x in s.split(",")], default=[1, 2], help="1,2")
    ap.add_argument("--quick", action="store_true", help="1e5 records only (smoke run)")
    ap.add_argument("--huge", action="store_true", help="also 1e8 records (a 0.8 GB buffer; minutes, several GB "
                    "of memory to generate it once)")
    ap.add_argument("--jobs", type=int, help="ktrace convert --jobs N (default: ktrace's own, the cores available)")
    ap.add_argument("--runs", type=int, default=3, help="runs of ktrace and the floor per buffer (median)")
    ap.add_argument("--peer-runs", type=int, help="runs of the peer (default: --runs up to 1e5 records, else 1)")
    ap.add_argument("--peer-max", type=float, default=1e6, help="run the peer up to this many records (1e6)")
    ap.add_argument("--no-peer", action="store_true", help="skip FlashInfer's exporter")
    ap.add_argument("--no-peer-check", dest="peer_check", action="store_false",
                    help="don't parse the peer's output afterwards (tracks, negative slices)")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--workdir", default=os.path.join(REPO, ".bench", "convert"), help="buffers and outputs")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--ktrace", help="ktrace command (default: ktrace beside --ktrace-python, else python -m ktrace)")
    ap.add_argument("--ktrace-arg", action="append", default=[], help="extra argument for ktrace convert (repeat)")
    ap.add_argument("--ktrace-python", default="/tmp/kv/bin/python",
                    help="ktrace's environment (the floor runs with this script's own python)")
    ap.add_argument("--peer-python", default="/tmp/peer/bin/python", help="the peer venv (setup_bench_peer.sh)")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds, per process")
    ap.add_argument("--keep-outputs", action="store_true", help="keep the traces written (in --workdir)")
    a = ap.parse_args(argv)
    if a.quick:
        a.events = [10**5]
    if a.huge and 10**8 not in a.events:
        a.events = [*a.events, 10**8]
    if a.jobs is not None:
        a.ktrace_arg = [*a.ktrace_arg, "--jobs", str(a.jobs)]
    return a


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_floor"]:
        floor_main(argv[1], int(argv[2]), argv[3])
        return 0
    a = parse_args(argv)
    os.makedirs(a.workdir, exist_ok=True)

    ktrace_cmd = find_ktrace(a)
    if ktrace_cmd is None:
        print("ktrace not installed (looked for ktrace beside", a.ktrace_python, "and `python -m ktrace`);"
              " timing the peer and the floor only")
    baseline = None
    if ktrace_cmd is not None:
        found = warn_if_other_checkout(ktrace_cmd)
        if found is not None:
            write_bytecode(*found)  # as `pip install .` leaves it
        # What every ktrace run pays before any work: interpreter, imports, argument parsing.
        tries = [measure(ktrace_cmd + ["--help"], timeout=a.timeout) for _ in range(3)]
        r = min(tries, key=lambda r: r["wall_s"] or 1e9)
        if r["rc"] == 0:
            baseline = {"s": r["wall_s"], "peak_rss_bytes": r["peak_rss_bytes"]}
            print(f"ktrace: {' '.join(ktrace_cmd)}; `--help` takes {r['wall_s']:.3f} s, "
                  f"{r['peak_rss_bytes'] / 1e6:.1f} MB peak (startup, included in every figure)")
    peer_ok = not a.no_peer and os.access(a.peer_python, os.X_OK) and os.path.isfile(PEER_MODULE)
    if not a.no_peer and not peer_ok:
        print(f"peer not set up ({a.peer_python}, {PEER_MODULE}): run bash scripts/setup_bench_peer.sh; skipping it")

    rows = []
    for records in a.events:
        for groups in a.groups:
            buf, facts = buffer_path(a.workdir, records, groups, a.seed)
            row = {"records": facts["records"], "requested": records, "groups": groups, "buffer": buf,
                   "buffer_bytes": os.path.getsize(buf), "synthetic": facts}
            print(f"== {facts['records']:,} records, {groups} group(s): {buf}", file=sys.stderr)
            stem = os.path.join(a.workdir, os.path.basename(buf)[:-4])
            if ktrace_cmd is None:
                row["ktrace_missing"] = True
            else:
                row["ktrace"] = bench_ktrace(ktrace_cmd, buf, stem + ".ktrace.perfetto-trace", a)
            if peer_ok and records <= a.peer_max:
                n = a.peer_runs or (a.runs if records <= 10**5 else 1)
                row["peer"] = bench_peer(buf, stem + ".peer.perfetto-trace", n, a)
            nbytes, src = (row.get("ktrace") or {}).get("out_bytes"), "ktrace"
            if not nbytes:
                nbytes, src = (row.get("peer") or {}).get("out_bytes"), "peer"
            if not nbytes:
                nbytes, src = facts["records"] * FALLBACK_BYTES_PER_RECORD, f"{FALLBACK_BYTES_PER_RECORD} B/record"
            row["floor"] = bench_floor(buf, nbytes, stem + ".floor.bin", a)
            row["floor"]["bytes_like"] = src
            if not a.keep_outputs:
                for suffix in (".ktrace.perfetto-trace", ".peer.perfetto-trace", ".floor.bin"):
                    if os.path.exists(stem + suffix):
                        os.remove(stem + suffix)
            ratios(row)
            rows.append(row)

    print_table(rows)
    print_verdicts(rows, a)
    if a.json:
        result = {
            "benchmark": "convert",
            "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "available_cores": _cores(),
                        "python": platform.python_version()},
            "ktrace_jobs": a.jobs if a.jobs is not None else _cores(),
            "ktrace_cmd": ktrace_cmd,
            "ktrace_startup": baseline,
            "peer": {"python": a.peer_python, "exporter": PEER_MODULE,
                     "exporter_sha256": _sha256(PEER_MODULE) if os.path.isfile(PEER_MODULE) else None},
            "targets": TARGETS,
            "notes": "seconds are medians; peer s = export_to_perfetto_trace call only; ktrace s and floor s = "
                     "whole process (floor_core_s: the floor's in-process work); peak RSS from os.wait4",
            "rows": rows,
        }
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)
        print(f"wrote {a.json}")
    return 0


def _sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


if __name__ == "__main__":
    sys.exit(main())
