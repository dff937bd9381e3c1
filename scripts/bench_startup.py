"""Benchmark the command line's start: wall time of whole fresh processes, each against the floor of the same
run (``python -c pass``: the interpreter's own start).

    python scripts/bench_startup.py [--runs 11] [--sample samples/balanced_ktrace.bin] [--before OLD_CHECKOUT] [--json OUT]

Each case runs --runs times in a fresh process (this interpreter, this checkout first on PYTHONPATH), the
cases interleaved so that a burst of load from other jobs lands on all of them; the median and the fastest
run are printed with the median's ratio to the floor's. Cases: the floor; ``import numpy`` (what the
command line used to pay before it printed anything); ``ktrace --help`` as ``python -m ktrace`` and as the
console script runs it (``from ktrace.cli import main``); ``convert --help``; ``analyze --help``; and
``inspect`` and ``convert`` of a small real capture; ``analyze`` (the text report) of a FlashInfer capture
(``samples/fi_mla_decode_run1.bin.gz``, 30k records) and of ``samples/imbalance.bin``. Targets: every ``--help``
under 0.3 s (issue 25); each ``analyze`` within 2.5x of ``import numpy`` of the same run (issue 46), the ratio
printed in the "x numpy" column. The "CPU" columns give each case's median CPU time (user and system, the
process and what it waited for) and its ratio to ``import numpy``'s: on a machine busy with other work the wall
times carry the waits for a core, the CPU times much less (compare them only within one run too).
``--before OLD_CHECKOUT`` adds each ``analyze`` case run by that checkout's
ktrace, interleaved with the rest (a change measured against the code before it, in one run).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
TARGET_S = 0.3
ANALYZE_TARGET_X_NUMPY = 2.5
_NUMPY = "python -c 'import numpy'"
_ANALYZE_SAMPLES = ("fi_mla_decode_run1.bin.gz", "imbalance.bin")
_CONSOLE = "import sys; from ktrace.cli import main; sys.argv[0] = 'ktrace'; sys.exit(main(sys.argv[1:]))"


def _cases(sample: str, out: str, before: str | None = None) -> dict[str, tuple[list[str], str]]:
    """name -> (command, the checkout it runs: its folder is the command's cwd and first on PYTHONPATH)."""
    py = sys.executable
    ours = {
        "python -c pass (floor)": [py, "-c", "pass"],
        "python -c 'import numpy'": [py, "-c", "import numpy"],
        "ktrace --help (python -m ktrace)": [py, "-m", "ktrace", "--help"],
        "ktrace --help (console script)": [py, "-c", _CONSOLE, "--help"],
        "ktrace convert --help": [py, "-m", "ktrace", "convert", "--help"],
        "ktrace analyze --help": [py, "-m", "ktrace", "analyze", "--help"],
        f"ktrace inspect {os.path.basename(sample)}": [py, "-m", "ktrace", "inspect", sample],
        f"ktrace convert {os.path.basename(sample)}": [py, "-m", "ktrace", "convert", sample, "-o", out, "-j", "1"],
        **{f"ktrace analyze {name}": [py, "-m", "ktrace", "analyze", os.path.join(REPO, "samples", name)]
           for name in _ANALYZE_SAMPLES},
    }
    cases = {name: (cmd, REPO) for name, cmd in ours.items()}
    if before:  # `python -m` puts the cwd first on sys.path: each checkout runs from its own folder
        for name in _ANALYZE_SAMPLES:
            cases[f"ktrace analyze {name} (before)"] = (ours[f"ktrace analyze {name}"], before)
    return cases


def _wall(cmd: list[str], checkout: str) -> tuple[float, float]:
    """The command's wall time and CPU time (user + system of it and its children), in seconds."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([checkout, *filter(None, [os.environ.get("PYTHONPATH")])]))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    p = subprocess.run(cmd, env=env, cwd=checkout, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)}: exit {p.returncode}\n{p.stderr.decode(errors='replace')}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=11, help="runs per case (default 11); the median is reported")
    ap.add_argument("--sample", default=os.path.join(REPO, "samples", "balanced_ktrace.bin"),
                    help="the capture inspect and convert read (default: samples/balanced_ktrace.bin)")
    ap.add_argument("--before", metavar="OLD_CHECKOUT",
                    help="also run each analyze case with the ktrace of this checkout (a folder holding ktrace/)")
    ap.add_argument("--json", metavar="OUT", help="also write the figures as JSON")
    a = ap.parse_args(argv)
    before = os.path.abspath(a.before) if a.before else None
    if before and not os.path.isfile(os.path.join(before, "ktrace", "__init__.py")):
        ap.error(f"--before {a.before}: no ktrace/ package in that folder (give the old checkout's root)")
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        cases = _cases(a.sample, os.path.join(tmp, "out.perfetto-trace"), before)
        # The bytecode written first, as `pip install .` does: running a case writes none where
        # PYTHONDONTWRITEBYTECODE is set (then every run would compile every module it imports).
        for checkout in filter(None, (REPO, before)):
            subprocess.run([sys.executable, "-m", "compileall", "-q", os.path.join(checkout, "ktrace")],
                           capture_output=True, timeout=300)
        for cmd, checkout in cases.values():  # warm the file cache once, not timed
            _wall(cmd, checkout)
        walls: dict[str, list[float]] = {name: [] for name in cases}
        cpus: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(a.runs):
            for name, (cmd, checkout) in cases.items():
                wall, cpu = _wall(cmd, checkout)
                walls[name].append(wall)
                cpus[name].append(cpu)
    floor = statistics.median(walls["python -c pass (floor)"])
    numpy_s = statistics.median(walls[_NUMPY])
    numpy_cpu = statistics.median(cpus[_NUMPY])
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"{sys.executable} (Python {sys.version.split()[0]}), {os.cpu_count()} cores, load average {load:.1f}, "
          f"{a.runs} runs per case")
    print(f"{'case':<49} {'median':>8} {'fastest':>8} {'x floor':>8} {'x numpy':>8} {'CPU':>7} {'x numpy':>8}")
    rows = {}
    for name, w in walls.items():
        med = statistics.median(w)
        mark = ""
        if "--help" in name:
            mark = "  ok (< 0.3 s)" if med < TARGET_S else "  OVER 0.3 s"
        if " analyze " in name and "--help" not in name:
            within = med / numpy_s <= ANALYZE_TARGET_X_NUMPY
            mark = f"  {'ok' if within else 'OVER'} ({'<=' if within else '>'} {ANALYZE_TARGET_X_NUMPY}x numpy)"
        cpu = statistics.median(cpus[name])
        print(f"{name:<49} {med:>7.3f}s {min(w):>7.3f}s {med / floor:>7.2f}x {med / numpy_s:>7.2f}x "
              f"{cpu:>6.3f}s {cpu / numpy_cpu:>7.2f}x{mark}")
        rows[name] = {"median_s": med, "fastest_s": min(w), "ratio_to_floor": med / floor,
                      "ratio_to_numpy": med / numpy_s, "walls_s": w, "cpu_median_s": cpu,
                      "cpu_ratio_to_numpy": cpu / numpy_cpu, "cpus_s": cpus[name]}
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"python": sys.version, "cores": os.cpu_count(), "load_average": load, "runs": a.runs,
                       "cases": rows}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
