"""Benchmark `ktrace analyze BUF` per engine: wall time and peak memory, each as a ratio to the floor of the
same run.

    python scripts/bench_analyze.py [--records 1e5,1e6,1e7,1e8] [--engines numpy1,numpy,wasm] [--runs 1]
                                    [--query] [--json OUT]

The buffers are bench_convert.py's (132 blocks x --groups lanes of load/compute/reduce steps with a slow
block, on a 32 ns tick, across a timer wrap), made once and cached in --workdir. Every measurement is a fresh
process (wall time; its own peak RSS, and the peak of its process tree's summed PSS, worker processes
included with shared pages counted once):

- floor: numpy reads the buffer and splits the fields (bench_convert.py's floor, writing nothing);
- numpy1: `ktrace analyze BUF --engine numpy --json --jobs 1` (the numpy engine in one process);
- numpy: `ktrace analyze BUF --engine numpy --json` (the default: worker processes on every core up to 8 from
  250,000 record slots, where there are 3 cores or more; one process on fewer);
- wasm: `ktrace analyze BUF --engine wasm --json` (the SQL package in the embedded trace processor), only up
  to --sql-max records (it loads every slice, and cannot hold 1e8 events at all);
- with --split, the SQL run split into loading the trace and each module of the package.

Targets (issue 25): numpy at 1e7 records <= 3x the floor, at 1e8 <= 4x and <= 4 GiB (the tree's PSS); the
SQL package's analyze at 1e6 records <= 10 s; with --query, `ktrace query` warm on the 1e6 buffer's trace
<= 3 s (timed with snapshots off, then the first query, which writes the trace's snapshot, and a repeat,
which restores it: the target's figure). The package's bytecode is compiled first, as `pip install .` does.
With --before OLD_CHECKOUT, every engine's measurement also runs that checkout's ktrace, alternating run by run,
and prints the ratio after / before and whether the two JSON outputs are the same bytes.
Each run's CPU time (user + system, worker processes included) is printed beside its wall time: on a machine
shared with other jobs it moves less than the wall. Figures are medians over --runs runs; the core count is printed with them, and numpy1 / numpy is
the speed-up the cores give.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
GIB = 2**30

_SPLIT = r"""
import json, sys, time
t = time.perf_counter
from ktrace.engine import open_trace
from ktrace.analysis import register, sql_figures
from ktrace.analysis.figures.sql.package import MODULES
t1 = t()
s = open_trace(sys.argv[1])
load = t() - t1
register(s)
modules = {}
for m in MODULES:
    t2 = t()
    s.query(f"INCLUDE PERFETTO MODULE {m}; SELECT 1")
    modules[m] = t() - t2
t3 = t()
fig = sql_figures(s, register_package=False)
read = t() - t3
s.close()
print(json.dumps({"load_s": load, "modules_s": modules, "read_s": read}))
"""


def _read_through(path: str) -> None:
    """Reads the file once, so that the floor does not read it from disk while the engines after it find it in
    the page cache (a 1e8 floor measured cold: 24.3 s, warm: 7.4 s)."""
    with open(path, "rb") as f:
        while f.read(64 << 20):
            pass


def _bench_convert():
    spec = importlib.util.spec_from_file_location("_bench_convert", os.path.join(HERE, "bench_convert.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _median(xs):
    xs = sorted(x for x in xs if x is not None)
    return xs[len(xs) // 2] if xs else None


def _records(s: str) -> list[int]:
    return [int(float(x)) for x in s.split(",") if x.strip()]


def _run(bc, cmd, runs: int, timeout: float) -> dict:
    got = [bc.measure(cmd, timeout=timeout, tree=True) for _ in range(runs)]
    bad = [m for m in got if m["rc"] != 0]
    if bad:
        m = bad[0]
        why = "timed out" if m.get("timed_out") else f"rc {m['rc']}"
        return {"error": why, "stderr_tail": m["stderr_tail"][-400:], "wall_s": m["wall_s"],
                "peak_rss_bytes": m["peak_rss_bytes"]}
    return {"wall_s": _median([m["wall_s"] for m in got]), "cpu_s": _median([m.get("cpu_s") for m in got]),
            "peak_rss_bytes": _median([m["peak_rss_bytes"] for m in got]),
            "peak_tree_pss_bytes": _median([m.get("peak_tree_pss_bytes") for m in got]), "stdout": got[0]["stdout"]}


def _alternate(bc, after: list[str], before: list[str], runs: int, timeout: float) -> tuple[dict, dict]:
    """after and before, one run each in turn (before first), ``runs`` times: each side's _run figures (the
    medians) with its run times in ``walls``."""
    got = {"before": [], "after": []}
    for _ in range(runs):
        for side, cmd in (("before", before), ("after", after)):
            got[side].append(_run(bc, cmd, 1, timeout))
    out = []
    for side in ("after", "before"):
        ms = got[side]
        bad = [m for m in ms if "error" in m]
        m = dict(bad[0]) if bad else {
            "wall_s": _median([m["wall_s"] for m in ms]), "cpu_s": _median([m.get("cpu_s") for m in ms]),
            "peak_rss_bytes": _median([m["peak_rss_bytes"] for m in ms]),
            "peak_tree_pss_bytes": _median([m.get("peak_tree_pss_bytes") for m in ms]), "stdout": ms[0]["stdout"]}
        m["walls"], m["cpus"] = [x["wall_s"] for x in ms], [x.get("cpu_s") for x in ms]
        out.append(m)
    return out[0], out[1]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--records", type=_records, default=[100_000, 1_000_000, 10_000_000],
                   help="comma-separated, e.g. 1e5,1e6,1e7,1e8")
    p.add_argument("--engines", default="numpy1,numpy,wasm", help="comma-separated: numpy1, numpy, wasm, native")
    p.add_argument("--groups", type=int, default=2)
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--sql-max", type=_records, default=[10_000_000], help="largest buffer given to a SQL engine")
    p.add_argument("--split", action="store_true", help="also split the SQL run into load and modules")
    p.add_argument("--timeout", type=float, default=1800)
    p.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "ktrace-bench"))
    p.add_argument("--json", metavar="OUT", help="write the results as JSON")
    p.add_argument("--before", metavar="OLD_CHECKOUT",
                   help="also run an older checkout's ktrace on every engine's measurement, alternating with this "
                        "one run by run: its figures, the ratio after / before and whether the JSON is the same")
    p.add_argument("--query", action="store_true",
                   help="also time `ktrace query TRACE 'SELECT 1'` on the 1e6 buffer's trace (engine warm): "
                        "snapshots off, first (writes the snapshot), repeat (restores it)")
    a = p.parse_args(argv)
    bc = _bench_convert()
    os.makedirs(a.workdir, exist_ok=True)
    ktrace = os.path.join(os.path.dirname(sys.executable), "ktrace")
    ktrace_cmd = [ktrace] if os.access(ktrace, os.X_OK) else [sys.executable, "-m", "ktrace"]
    found = bc.warn_if_other_checkout(ktrace_cmd)
    if found is not None:
        bc.write_bytecode(*found)  # as `pip install .` leaves it
    engines = [e.strip() for e in a.engines.split(",") if e.strip()]
    before_cmd = None
    if a.before:
        old = os.path.abspath(a.before)
        if not os.path.isfile(os.path.join(old, "ktrace", "__init__.py")):
            p.error(f"--before {a.before}: no ktrace/__init__.py there (give the root of an older checkout)")
        bc.write_bytecode(sys.executable, os.path.join(old, "ktrace"))
        before_cmd = [sys.executable, "-c", f"import sys; sys.path.insert(0, {old!r}); from ktrace.cli import main; "
                      "sys.exit(main())"]
    if "wasm" in engines:  # warm the module cache (the first start compiles the WebAssembly module)
        subprocess.run([sys.executable, "-c", bc.WARM_ENGINES], cwd=REPO, check=False, capture_output=True)
    print(f"{platform.platform()}, {os.cpu_count()} cores, python {sys.version.split()[0]}; "
          f"132 blocks x {a.groups} groups; median of {a.runs} run(s)")
    results = []
    for n in a.records:
        buf, facts = bc.buffer_path(a.workdir, n, a.groups, 1)
        _read_through(buf)  # in the page cache before the floor, as for every run after it
        floor = _run(bc, [sys.executable, os.path.join(HERE, "bench_convert.py"), "_floor", buf, "0", os.devnull],
                     a.runs, a.timeout)
        row = {"records": facts["records"], "buffer_bytes": os.path.getsize(buf),
               "floor": {k: v for k, v in floor.items() if k != "stdout"}, "engines": {}}
        print(f"{facts['records']:>12,} records ({row['buffer_bytes'] / 2**20:,.0f} MiB): floor {floor['wall_s']:.2f} s, "
              f"peak {floor['peak_rss_bytes'] / 2**20:,.0f} MiB")
        for e in engines:
            numpy = e.startswith("numpy")
            if not numpy and n > a.sql_max[0]:
                print(f"  {e:>6}: skipped (over --sql-max {a.sql_max[0]:.0e} records)")
                continue
            extra = ["--jobs", "1"] if e == "numpy1" else []
            args = ["analyze", buf, "--engine", "numpy" if numpy else e, "--json", *extra]
            if before_cmd:
                m, mb = _alternate(bc, [*ktrace_cmd, *args], [*before_cmd, *args], a.runs, a.timeout)
            else:
                m, mb = _run(bc, [*ktrace_cmd, *args], a.runs, a.timeout), None
            out = m.pop("stdout", None)
            if out:
                m["slices"] = json.loads(out)["kernel"]["slices"]
            m["over_floor"] = m["wall_s"] / floor["wall_s"] if floor.get("wall_s") else None
            row["engines"][e] = m
            _print(e, m)
            if mb is not None:
                out_b = mb.pop("stdout", None)
                mb["over_floor"] = mb["wall_s"] / floor["wall_s"] if floor.get("wall_s") else None
                mb["same_json"] = out_b == out and out is not None
                m["before"] = mb
                _print("before", mb)
                if "error" not in m and "error" not in mb:
                    cpu = (f", {m['cpu_s'] / mb['cpu_s']:.2f}x the CPU" if m.get("cpu_s") and mb.get("cpu_s")
                           else "")
                    print(f"  {'':>6}  after / before: {m['wall_s'] / mb['wall_s']:.2f}x the time{cpu} "
                          f"(runs, after: {', '.join(f'{x:.2f}' for x in m['walls'])}; before: "
                          f"{', '.join(f'{x:.2f}' for x in mb['walls'])}), "
                          f"{'the same JSON' if mb['same_json'] else 'THE JSON DIFFERS'}")
            if not numpy and a.split and "error" not in m:
                row["engines"][e]["split"] = _split(ktrace_cmd, buf)
        if a.query and 900_000 <= n <= 1_100_000:
            row["query"] = _query(bc, ktrace_cmd, buf, a, floor.get("wall_s"))
        results.append(row)
    verdicts = _targets(results)
    for v in verdicts:
        print(v)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"machine": platform.platform(), "cores": os.cpu_count(), "python": sys.version.split()[0],
                       "groups": a.groups, "runs": a.runs, "results": results, "targets": verdicts}, f, indent=2)
    return 0 if not any("MISSED" in v for v in verdicts) else 1


def _print(engine: str, m: dict) -> None:
    err = f"  FAILED ({m['error']})" if "error" in m else ""
    ratio = f", {m['over_floor']:.1f}x the floor" if m.get("over_floor") else ""
    tree = f", tree PSS {m['peak_tree_pss_bytes'] / 2**20:,.0f} MiB" if m.get("peak_tree_pss_bytes") else ""
    cpu = f" (CPU {m['cpu_s']:.2f} s)" if m.get("cpu_s") is not None else ""
    print(f"  {engine:>6}: {m['wall_s']:8.2f} s{cpu}{ratio}, peak RSS {m['peak_rss_bytes'] / 2**20:,.0f} MiB{tree}{err}")


def _query(bc, ktrace_cmd, buf: str, a, floor_s: float | None) -> dict:
    """`ktrace query` of the buffer's converted trace with a trivial query: the embedded engine's start (its
    compiled module cached) plus loading the trace, which a query cannot skip unless the trace's snapshot is
    cached. Three figures, in a cache folder of their own (the compiled module copied in): with snapshots off
    (KTRACE_SNAPSHOT_GIB=0), the first query (loads, writes the snapshot) and a repeat (restores it)."""
    trace = buf[:-4] + ".perfetto-trace"
    if not os.path.isfile(trace):
        subprocess.run([*ktrace_cmd, "convert", buf, "-o", trace], check=True, capture_output=True, cwd=REPO)
    cmd = [*ktrace_cmd, "query", trace, "SELECT 1 AS one"]
    cache = tempfile.mkdtemp(prefix="query-cache-", dir=a.workdir)
    for name in os.listdir(_user_cache()) if os.path.isdir(_user_cache()) else []:
        if ".cwasm" in name:
            shutil.copyfile(os.path.join(_user_cache(), name), os.path.join(cache, name))
    snapshots = os.path.join(cache, "snapshots")
    got = {"off": [], "first": [], "repeat": []}
    try:
        for _ in range(a.runs):  # the three side by side in each round, so that a busy machine skews them alike
            with _env(KTRACE_CACHE_DIR=cache, KTRACE_SNAPSHOT_GIB="0"):
                got["off"].append(_run(bc, cmd, 1, a.timeout))
            with _env(KTRACE_CACHE_DIR=cache, KTRACE_SNAPSHOT_GIB=None):
                shutil.rmtree(snapshots, ignore_errors=True)
                got["first"].append(_run(bc, cmd, 1, a.timeout))
                got["repeat"].append(_run(bc, cmd, 1, a.timeout))
        out = {key: _median_run(ms) for key, ms in got.items()}
        out["snapshot_bytes"] = sum(os.path.getsize(os.path.join(snapshots, n)) for n in os.listdir(snapshots)
                                    if n.endswith(".tpsnap")) if os.path.isdir(snapshots) else 0
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    for m in out.values():
        if isinstance(m, dict):
            m.pop("stdout", None)
            m["over_floor"] = m["wall_s"] / floor_s if floor_s and "error" not in m else None
    for key, what in (("off", "snapshots off: warm start + load + SELECT 1"),
                      ("first", f"first: loads, writes a {out['snapshot_bytes'] / 2**20:,.0f} MiB snapshot"),
                      ("repeat", "repeat: restores the snapshot")):
        m = out[key]
        ratio = f", {m['over_floor']:.1f}x the floor" if m.get("over_floor") else ""
        err = f"  FAILED ({m['error']})" if "error" in m else ""
        print(f"   query: {m['wall_s']:8.2f} s{ratio}, peak RSS {m['peak_rss_bytes'] / 2**20:,.0f} MiB ({what}){err}")
    return out


def _median_run(ms: list[dict]) -> dict:
    bad = [m for m in ms if "error" in m]
    return bad[0] if bad else {"wall_s": _median([m["wall_s"] for m in ms]),
                               "peak_rss_bytes": _median([m["peak_rss_bytes"] for m in ms])}


def _user_cache() -> str:
    """The compiled-module cache that the warm-up filled (wasm_cache.cache_dir's rule)."""
    if os.environ.get("KTRACE_CACHE_DIR"):
        return os.environ["KTRACE_CACHE_DIR"]
    if os.environ.get("XDG_CACHE_HOME"):
        return os.path.join(os.environ["XDG_CACHE_HOME"], "ktrace")
    return os.path.join(os.path.expanduser("~"), ".cache", "ktrace")


@contextlib.contextmanager
def _env(**values):
    """Sets (a value) or unsets (None) environment variables for the block; the measured commands inherit them."""
    def put(items):
        for k, v in items:
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v

    old = {k: os.environ.get(k) for k in values}
    try:
        put(values.items())
        yield
    finally:
        put(old.items())


def _split(ktrace_cmd, buf: str) -> dict:
    trace = buf[:-4] + ".perfetto-trace"
    if not os.path.isfile(trace):
        subprocess.run([*ktrace_cmd, "convert", buf, "-o", trace], check=True, capture_output=True, cwd=REPO)
    r = subprocess.run([sys.executable, "-c", _SPLIT, trace], capture_output=True, text=True, cwd=REPO)
    if r.returncode != 0:
        return {"error": r.stderr[-400:]}
    got = json.loads(r.stdout)
    mods = ", ".join(f"{m.split('.')[-1]} {s:.2f}" for m, s in got["modules_s"].items())
    print(f"          split: load {got['load_s']:.2f} s, modules {mods}, read {got['read_s']:.2f} s")
    return got


def _targets(results: list[dict]) -> list[str]:
    """The issue's targets, met or missed, from the rows measured (and the cores' speed-up, information)."""
    out = []

    def row(lo, hi):
        return next((r for r in results if lo <= r["records"] <= hi), {})

    r6, r7, r8 = row(900_000, 1_100_000), row(9_000_000, 11_000_000), row(90_000_000, 110_000_000)
    for r, limit in ((r7, 3), (r8, 4)):
        m = r.get("engines", {}).get("numpy")
        if not m:
            continue
        mem = m.get("peak_tree_pss_bytes") or m["peak_rss_bytes"]
        ok = "error" not in m and m["over_floor"] <= limit and (r is not r8 or mem <= 4 * GIB)
        out.append(f"target {r['records']:.0e}: numpy <= {limit}x the floor{' and <= 4 GiB' if r is r8 else ''}: "
                   f"{m['wall_s']:.2f} s = {m['over_floor']:.1f}x, {mem / GIB:.2f} GiB"
                   f"{' (' + m['error'] + ')' if 'error' in m else ''}: {'met' if ok else 'MISSED'}")
        one = r.get("engines", {}).get("numpy1")
        if one and "error" not in one and "error" not in m:
            out.append(f"  cores at {r['records']:.0e}: --jobs 1 {one['wall_s']:.2f} s, all cores {m['wall_s']:.2f} s: "
                       f"{one['wall_s'] / m['wall_s']:.2f}x")
    w = r6.get("engines", {}).get("wasm")
    if w:
        out.append(f"target 1e6: the SQL package's analyze <= 10 s: {w['wall_s']:.1f} s: "
                   f"{'met' if 'error' not in w and w['wall_s'] <= 10 else 'MISSED'}")
    q = r6.get("query", {}).get("repeat")
    if q:
        first = r6["query"]["first"]
        out.append(f"target query: warm start + a trivial query on a 1e6-record trace <= 3 s: {q['wall_s']:.1f} s "
                   f"(its snapshot restored; the first query, which writes it, {first['wall_s']:.1f} s): "
                   f"{'met' if 'error' not in q and q['wall_s'] <= 3 else 'MISSED'}")
    return out


if __name__ == "__main__":
    sys.exit(main())
