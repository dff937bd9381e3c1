"""Measure what each parallel stage of the runtime gains: the numpy engine's figures of a buffer and the JSON of
their long tables (``ktrace analyze``'s parallel stages; its findings run in one process and are left out), and
with --convert ``ktrace convert BUF``: with every stage parallel (those held in one process by default too:
$KTRACE_PARALLEL=all), then with one stage held in one process ($KTRACE_SERIAL), then with --jobs 1;
interleaved run by run, so that a machine shared with other work slows every variant alike.

    python scripts/bench_stages.py [--records 1e6,1e7] [--runs 3] [--convert] [--json OUT]

The buffers are bench_convert.py's, cached in --workdir. Printed per variant: the median wall time and its
ratio to the all-parallel run (above 1: holding that stage serial is slower, so its parallelism pays; the
gain is ratio - 1), and whether the output is the same bytes as the all-parallel run's. A stage that has no
parallel work at that size or core count (the sweeps below ``Parallelism.sweep_min_slices``, the copy threads
where the workers take every core) measures ~1.00: the table says which are idle.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
ANALYZE_STAGES = ("parts", "sweeps", "critical_path", "evidence_tests", "copy", "json")


def _script(name: str):
    """A sibling script loaded as a module (its main() does not run)."""
    spec = importlib.util.spec_from_file_location(f"_{name}", os.path.join(HERE, f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


_analyze = _script("bench_analyze")
_bench_convert, _median = _analyze._bench_convert, _analyze._median  # one copy of each, in bench_analyze.py


# One measurement: a fresh process that times the parallel stages alone (the numpy engine's figures of the
# buffer, then the JSON text of their long tables), with the runtime configuration a command builds; the
# findings after them (the replay) run in one process whatever the configuration, and are left out.
_STAGES_RUN = r"""
import hashlib, json, sys, time
t0 = time.perf_counter()
from ktrace.decoding.decoder import BufferDecoder
from ktrace.analysis.figures.numpy.stream import decoder_figures
from ktrace.analysis.model.table import json_rows_of
from ktrace.runtime.config import Parallelism
par = Parallelism.build(int(sys.argv[2]))
t1 = time.perf_counter()
fig = decoder_figures(BufferDecoder(sys.argv[1]), jobs=par)
t2 = time.perf_counter()
tables = [fig.instances, fig.lanes, fig.waits, fig.critical_path, fig.blocks, fig.lane_totals, fig.phases]
text = "\n".join(piece for lines in json_rows_of(tables, par) for piece in lines if piece)  # cut anywhere: same text
t3 = time.perf_counter()
digest = hashlib.sha256(text.encode()).hexdigest()  # the tables' JSON rows: every figure
print(json.dumps({"figures_s": t2 - t1, "json_s": t3 - t2, "digest": digest, "jobs": par.jobs}))
"""


def _variants(stages) -> list[tuple[str, str, dict]]:
    workers = str(min(len(os.sched_getaffinity(0)), 8))  # the workers of the default on 3 cores or more, asked
    # for here (below 3 cores the default is one process: the measurement behind that rule)
    every = {"KTRACE_PARALLEL": "all"}  # the stages held in one process by default measured too
    out = [("parallel", workers, every)]
    out += [(f"serial {s}", workers, {**every, "KTRACE_SERIAL": s}) for s in stages]
    out.append(("--jobs 1", "1", every))
    return out


def _measure(bc, buf: str, variants, runs: int, timeout: float) -> list[dict]:
    got = {name: [] for name, _, _ in variants}
    digest = {}
    for _ in range(runs):
        for name, jobs, env in variants:
            saved = {k: os.environ.pop(k, None) for k in ("KTRACE_SERIAL", "KTRACE_PARALLEL")}
            os.environ.update(env)
            try:
                m = bc.measure([sys.executable, "-c", _STAGES_RUN, buf, jobs], timeout=timeout)
            finally:
                for k, v in saved.items():
                    os.environ.pop(k, None)
                    if v is not None:
                        os.environ[k] = v
            if m["rc"] != 0:
                raise SystemExit(f"{name}: rc {m['rc']}: {m['stderr_tail'][-600:]}")
            r = json.loads(m["stdout"])
            got[name].append(r["figures_s"] + r["json_s"])
            digest.setdefault(name, r["digest"])
    base = _median(got["parallel"])
    return [{"variant": name, "wall_s": _median(got[name]), "walls": got[name],
             "over_parallel": _median(got[name]) / base, "same_output": digest[name] == digest["parallel"]}
            for name, _, _ in variants]


def _measure_convert(bc, buf: str, out: str, runs: int, timeout: float) -> list[dict]:
    workers = str(len(os.sched_getaffinity(0)))
    ktrace = [sys.executable, "-m", "ktrace", "convert", buf, "-o", out, "--jobs", workers]
    got, digest = {"parallel": [], "--jobs 1": []}, {}
    for _ in range(runs):
        for name, extra in (("parallel", []), ("--jobs 1", ["--jobs", "1"])):
            m = bc.measure([*ktrace, *extra], timeout=timeout)
            if m["rc"] != 0:
                raise SystemExit(f"convert {name}: rc {m['rc']}: {m['stderr_tail'][-600:]}")
            got[name].append(m["wall_s"])
            with open(out, "rb") as f:
                digest.setdefault(name, hashlib.file_digest(f, "sha256").hexdigest())
    base = _median(got["parallel"])
    return [{"variant": name, "wall_s": _median(got[name]), "walls": got[name],
             "over_parallel": _median(got[name]) / base, "same_output": digest[name] == digest["parallel"]}
            for name in got]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--records", default="1e6,1e7", help="comma-separated, e.g. 1e6,1e7")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--groups", type=int, default=2)
    p.add_argument("--convert", action="store_true", help="also `ktrace convert` (parallel vs --jobs 1)")
    p.add_argument("--timeout", type=float, default=600)
    p.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "ktrace-bench"))
    p.add_argument("--json", metavar="OUT")
    a = p.parse_args(argv)
    bc = _bench_convert()
    os.makedirs(a.workdir, exist_ok=True)
    print(f"{os.cpu_count()} cores, {len(os.sched_getaffinity(0))} available; median of {a.runs} interleaved runs")
    results = []
    for n in [int(float(x)) for x in a.records.split(",") if x.strip()]:
        buf, facts = bc.buffer_path(a.workdir, n, a.groups, 1)
        out = os.path.join(a.workdir, "stages.perfetto-trace")
        todo = [("figures + JSON", lambda: _measure(bc, buf, _variants(ANALYZE_STAGES), a.runs, a.timeout))]
        if a.convert:
            todo.append(("convert", lambda: _measure_convert(bc, buf, out, a.runs, a.timeout)))
        for what, run in todo:
            rows = run()
            print(f"{what}, {facts['records']:,} records:")
            for r in rows:
                print(f"  {r['variant']:<22} {r['wall_s']:6.2f} s  x{r['over_parallel']:.2f}"
                      f"{'' if r['same_output'] else '  OUTPUT DIFFERS'}  {' '.join(f'{w:.2f}' for w in r['walls'])}")
            results.append({"command": what, "records": facts["records"], "rows": rows})
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
