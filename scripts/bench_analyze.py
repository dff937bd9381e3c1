"""Benchmark `ktrace analyze` with the embedded (wasm) trace processor: end-to-end time and peak RSS, split
into loading the trace and running the ktrace SQL package.

    /tmp/kv/bin/python scripts/bench_analyze.py [--records 1e5,1e6] [--runs 3] [--json results.json]

The buffers are bench_convert.py's (132 blocks, load/compute/reduce with a slow block, on a 32 ns tick, across
a timer wrap), converted once to a trace. Each measurement is a fresh process:

1. end to end: `ktrace analyze TRACE --json` (what CI runs), wall time and the process's own peak RSS;
   also `ktrace analyze BUF --json` (decode and convert on the fly, then the same).
2. split: a process that times `open_trace` (load: parse and sort the trace), each module of the package
   (queries: ktrace.slices, .phases, .waits, .critical_path), reading the figures back, and the findings.

The WebAssembly module is compiled once before measuring (a warm module cache, as after the first run).
Target: 1e6 records end to end under 15 s. Figures are medians over --runs runs.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
TARGET_S = {1_000_000: 15.0}

_SPLIT = r"""
import json, sys, time
t = time.perf_counter
t0 = t()
from ktrace.engine import open_trace
from ktrace.analysis import register, sql_figures
from ktrace.analysis.findings import find
from ktrace.analysis.sql_package import MODULES
t_import = t() - t0
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
t4 = t()
findings = find(fig)
find_s = t() - t4
s.close()
print(json.dumps({"import_s": t_import, "load_s": load, "modules_s": modules, "queries_s": sum(modules.values()),
                  "read_s": read, "findings_s": find_s, "slices": fig.kernel.slices,
                  "instances": len(fig.instances), "findings": len(findings)}))
"""


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


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--records", type=_records, default=[100_000, 1_000_000], help="comma-separated, e.g. 1e5,1e6")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "ktrace-bench"))
    p.add_argument("--json", metavar="OUT", help="write the results as JSON")
    a = p.parse_args(argv)
    bc = _bench_convert()
    os.makedirs(a.workdir, exist_ok=True)
    ktrace = os.path.join(os.path.dirname(sys.executable), "ktrace")
    ktrace_cmd = [ktrace] if os.access(ktrace, os.X_OK) else [sys.executable, "-m", "ktrace"]

    # Warm the module cache (the first start compiles the WebAssembly module).
    subprocess.run([sys.executable, "-c", "from ktrace.engine.wasm import WasmTraceProcessor as W; W().close()"],
                   cwd=REPO, check=False, capture_output=True)

    results = []
    for n in a.records:
        buf, facts = bc.buffer_path(a.workdir, n, 1, 1)
        trace = buf[:-4] + ".perfetto-trace"
        if not os.path.isfile(trace):
            subprocess.run([*ktrace_cmd, "convert", buf, "-o", trace], check=True, capture_output=True, cwd=REPO)
        e2e, e2e_buf, split = [], [], []
        for _ in range(a.runs):
            m = bc.measure([*ktrace_cmd, "analyze", trace, "--json"], timeout=600)
            if m["rc"] != 0:
                print(m["stderr_tail"], file=sys.stderr)
                return 1
            e2e.append(m)
            e2e_buf.append(bc.measure([*ktrace_cmd, "analyze", buf, "--json"], timeout=600))
            r = subprocess.run([sys.executable, "-c", _SPLIT, trace], capture_output=True, text=True, cwd=REPO)
            if r.returncode != 0:
                print(r.stderr, file=sys.stderr)
                return 1
            split.append(json.loads(r.stdout))
        row = {
            "records": facts["records"],
            "slices": split[0]["slices"],
            "instances": split[0]["instances"],
            "trace_bytes": os.path.getsize(trace),
            "e2e_trace_s": _median([m["wall_s"] for m in e2e]),
            "e2e_trace_peak_rss_mib": _median([m["peak_rss_bytes"] for m in e2e]) / 2**20,
            "e2e_buffer_s": _median([m["wall_s"] for m in e2e_buf]),
            "e2e_buffer_peak_rss_mib": _median([m["peak_rss_bytes"] for m in e2e_buf]) / 2**20,
            "import_s": _median([s["import_s"] for s in split]),
            "load_s": _median([s["load_s"] for s in split]),
            "queries_s": _median([s["queries_s"] for s in split]),
            "modules_s": {m: _median([s["modules_s"][m] for s in split]) for m in split[0]["modules_s"]},
            "read_s": _median([s["read_s"] for s in split]),
            "findings_s": _median([s["findings_s"] for s in split]),
        }
        target = TARGET_S.get(n)
        row["target_s"] = target
        row["meets_target"] = None if target is None else row["e2e_trace_s"] < target
        results.append(row)
        _print_row(row)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"machine": platform.platform(), "python": sys.version.split()[0], "runs": a.runs,
                       "results": results}, f, indent=2)
    return 0 if all(r["meets_target"] in (None, True) for r in results) else 1


def _print_row(r: dict) -> None:
    mods = ", ".join(f"{m.split('.')[-1]} {s:.2f}" for m, s in r["modules_s"].items())
    target = "" if r["target_s"] is None else f"  (target < {r['target_s']:.0f} s: {'ok' if r['meets_target'] else 'MISSED'})"
    print(f"{r['records']:>10,} records ({r['slices']:,} slices, {r['instances']:,} instances, "
          f"{r['trace_bytes'] / 2**20:.1f} MiB trace)")
    print(f"  end to end, trace:  {r['e2e_trace_s']:.2f} s, peak RSS {r['e2e_trace_peak_rss_mib']:.0f} MiB{target}")
    print(f"  end to end, buffer: {r['e2e_buffer_s']:.2f} s, peak RSS {r['e2e_buffer_peak_rss_mib']:.0f} MiB")
    print(f"  split: import {r['import_s']:.2f} s, load {r['load_s']:.2f} s, queries {r['queries_s']:.2f} s "
          f"({mods}), read {r['read_s']:.3f} s, findings {r['findings_s']:.3f} s")


if __name__ == "__main__":
    sys.exit(main())
