"""``ktrace run`` and ``ktrace calibrate``: GPU work through ``ktrace.capture``.

    ktrace run [OPTIONS] DRIVER.py [DRIVER ARGS...]   run a driver script, then convert and report its captures
    ktrace run --device 0,1 DRIVER.py                  once per GPU at the same time, clocks measured, merged
    ktrace run --ab BEFORE.py "AFTER.py ARGS"          two variants timed against each other, then ktrace diff
    ktrace calibrate [--json]                          timer tick and probe cost on this GPU

Both exit 3 when there is no GPU or no PyCUDA. ``ktrace run`` composes the steps: the capture package runs
the driver and writes buffers and sidecars; then ``ktrace.api`` converts, merges and analyzes them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from ..core.errors import EXIT_ENV, EXIT_INPUT, EXIT_OK, InputError, KtraceError
from ..core.choices import DEFAULT_THRESHOLD_PCT
from ._common import engine_option, report_error, tracks_option
from .formats import format_options, write_text

__all__ = ["register", "HANDLERS"]


def _capture_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("compiling")
    g.add_argument("--header", choices=["auto", "flashinfer", "ktrace"], default="auto",
                   help="profiler header: FlashInfer's when found, else ktrace's (auto, default), or force one")
    g.add_argument("--flashinfer-include", metavar="DIR",
                   help="FlashInfer's include folder (holding flashinfer/profiler.cuh); default: "
                        "$FLASHINFER_INCLUDE, then an installed flashinfer-python")
    g.add_argument("--device", metavar="N[,N...]",
                   help="CUDA device index (default: $KTRACE_DEVICE, else 0); for run, several (0,1 or 0-3) run "
                        "the driver once per GPU at the same time, each in its own process")


def register(sub) -> None:
    """``run`` and ``calibrate`` (no decoding options: names and layout come from the captures' sidecars)."""
    r = sub.add_parser(
        "run", help="run a driver script on the GPU, then convert and analyze what it captured",
        description="Run DRIVER.py (it compiles its kernel with and without the profiler through ktrace.capture, "
                    "times both and captures one profiled launch), then write each capture's trace and print the "
                    "timings and a report. Options after DRIVER.py go to the driver.",
    )
    r.add_argument("driver", metavar="DRIVER.py", nargs="?")
    r.add_argument("driver_args", nargs=argparse.REMAINDER, metavar="ARGS", help="arguments for the driver")
    r.add_argument("-o", "--out", metavar="DIR", default="ktrace-out", help="folder for buffers, sidecars and "
                   "traces (default: ktrace-out)")
    r.add_argument("--suffix", default="", help="appended to each capture's name, e.g. _ktrace")
    r.add_argument("--repeat", type=int, default=1, metavar="N",
                   help="run the driver N times, each capture saved as NAME_run1 ... NAME_runN: runs of the same "
                   "launch whose run-to-run spread `ktrace diff --before ... --after ...` uses as the noise")
    _capture_options(r)
    ab = r.add_argument_group("A/B: accept a change (the before and the after variant timed in one session)")
    ab.add_argument("--ab", nargs=2, metavar=("BEFORE", "AFTER"),
                    help="run two drivers (each a script, or \"SCRIPT ARGS\" in quotes) in this process, time their "
                    "unprofiled builds against each other (alternating pairs, A B B A ...), capture one profiled "
                    "launch of each (NAME_before, NAME_after), write BEFORE_vs_AFTER.ab.json and print the paired "
                    "verdict and `ktrace diff` of the two captures, which reads that record")
    ab.add_argument("--pairs", type=int, default=200, metavar="N",
                    help="timed A/B pairs after the warm-up pairs (default 200; 50 or more)")
    ab.add_argument("--ab-buffers", choices=["shared", "own"], default="shared",
                    help="shared (default): both variants of each pair run on the same GPU arrays, before's and "
                    "after's in turn, when their arguments match (where a buffer lies moves a kernel's time), each "
                    "with its own contents where they differ (a work table: copied in before its launches); own: "
                    "each on its own")
    ab.add_argument("--ab-threshold", type=float, default=DEFAULT_THRESHOLD_PCT, metavar="PCT",
                    help="the change that counts, %% of the before time: a significant change under it, or an "
                    f"interval within +-PCT, is 'no change' (default {DEFAULT_THRESHOLD_PCT})")
    t = r.add_argument_group("timing")
    t.add_argument("--reps", type=int, default=50, metavar="N", help="timed launches per build (default 50)")
    t.add_argument("--warmup", type=int, default=5, metavar="N", help="untimed launch pairs first (default 5)")
    t.add_argument("--no-timing", action="store_true", help="capture only; do not time the builds")
    t.add_argument("--no-calibrate", action="store_true",
                   help="do not measure the probe cost when this GPU has no cached calibration")
    o = r.add_argument_group("output")
    tracks_option(o, "trace track tree (see convert)")
    o.add_argument("--no-report", action="store_true", help="write the files; print no analysis")
    engine_option(o, numpy=True, timeout=False)
    m = r.add_argument_group("several GPUs (--device 0,1)")
    m.add_argument("--sync-rounds", type=int, default=50, metavar="N",
                   help="clock-offset samples per GPU, before and after the run (default 50)")

    c = sub.add_parser("calibrate", help="measure the timer tick and one probe's cost on this GPU",
                       description="Measure %globaltimer's tick (smallest nonzero step of back-to-back reads) and "
                                   "one probe's cost (START/END pairs in a loop, instrumented minus control), "
                                   "for ktrace's header and FlashInfer's when found. The results are cached per "
                                   "GPU and go into later captures' sidecars and traces.")
    _capture_options(c)
    c.add_argument("--probes", type=int, default=1024, metavar="N", help="START/END pairs per lane (default 1024)")
    c.add_argument("--reps", type=int, default=30, metavar="N", help="timed launches per build (default 30)")
    format_options(c, "the calibration")


def _cmd_run(a) -> int:
    from pathlib import Path

    from ..capture import settings
    from ..capture.runner import run_driver

    if a.ab:
        return _cmd_run_ab(a)
    if a.driver is None:
        raise InputError("run: give DRIVER.py, or two drivers with --ab BEFORE.py AFTER.py")
    if not Path(a.driver).is_file():
        raise InputError(f"{a.driver}: no such driver script")
    if a.reps <= 0 or a.warmup < 0:
        raise InputError("--reps must be > 0 and --warmup >= 0")
    if a.repeat < 1:
        raise InputError("--repeat must be >= 1")
    if _select_device(a):
        if a.repeat > 1:
            raise InputError("--repeat works on one GPU; run `ktrace run --device N --repeat K` per GPU")
        return _run_on_devices(a)
    argv = a.driver_args[1:] if a.driver_args[:1] == ["--"] else a.driver_args
    if not a.no_calibrate:
        _ensure_calibration(a.flashinfer_include)
    caps = []
    for k in range(1, a.repeat + 1):
        settings.configure(header=a.header, flashinfer_include=a.flashinfer_include, out_dir=a.out,
                           suffix=a.suffix if a.repeat == 1 else f"{a.suffix}_run{k}", reps=a.reps,
                           warmup=a.warmup, timing=not a.no_timing)
        caps += run_driver(a.driver, argv)
    from ..capture.multigpu import write_manifest

    write_manifest(c.paths["bin"] for c in caps if "bin" in c.paths)
    if not caps:
        print(f"ktrace: {a.driver} saved no capture (call .save() on the Capture that profile() returns)",
              file=sys.stderr)
        return EXIT_INPUT
    for cap in caps:
        _report_capture(cap, a)
    if a.repeat > 1:
        runs = " ".join(str(c.paths["bin"]) for c in caps if "bin" in c.paths)
        print(f"\n{a.repeat} runs: compare them with a change's runs, e.g. ktrace diff --before {runs} "
              "--after AFTER_RUNS ...")
    return EXIT_OK


def _select_device(a) -> bool:
    """Point this process at --device; True when several devices were asked for."""
    if not a.device:
        return False
    from ..capture.multigpu import parse_devices

    devices = parse_devices(a.device)
    if len(devices) > 1:
        return True
    os.environ["KTRACE_DEVICE"] = str(devices[0])
    return False


def _child_command(a, device: int) -> list[str]:
    """``ktrace run`` for one GPU of a multi-GPU run: the same options, files suffixed ``_gpu<i>``, no
    report (the parent prints the one across GPUs)."""
    cmd = [sys.executable, "-m", "ktrace", "run", "--device", str(device), "--out", a.out,
           "--suffix", f"{a.suffix}_gpu{device}", "--header", a.header, "--reps", str(a.reps),
           "--warmup", str(a.warmup), "--tracks", a.tracks]
    if a.flashinfer_include:
        cmd += ["--flashinfer-include", a.flashinfer_include]
    cmd += [flag for flag, on in (("--no-timing", a.no_timing), ("--no-calibrate", a.no_calibrate)) if on]
    return cmd + ["--no-report", a.driver, *a.driver_args]  # the parent reports across GPUs


def _run_on_devices(a) -> int:
    from ..api import merge
    from ..capture.multigpu import parse_devices, run_on_devices
    from .merge import print_cross_gpu

    devices = parse_devices(a.device)
    if a.sync_rounds <= 0:
        raise InputError("--sync-rounds must be > 0")
    print(f"measuring the clocks of GPUs {', '.join(map(str, devices))} ({a.sync_rounds} rounds), then running "
          f"{a.driver} on each at once ...", file=sys.stderr)
    run = run_on_devices(devices, lambda d: _child_command(a, d), a.out, rounds=a.sync_rounds)
    failed = [r for r in run.runs if r.returncode != 0]
    for r in run.runs:
        print(f"\n######## GPU {r.device} (exit {r.returncode})")
        sys.stdout.write(r.stdout)
        if r.stderr.strip():
            sys.stdout.flush()
            sys.stderr.write(r.stderr)
    print("\n######## across GPUs")
    for label, sync in (("before", run.before), ("after", run.after)):
        ref = sync.reference
        offs = "; ".join(f"GPU {o.device_index} {o.offset_to_reference_ns:+,} ns (spread {o.spread_ns:,} ns)"
                         for o in sync.offsets[1:])
        print(f"clock offsets to GPU {ref.device_index} {label} the run ({sync.rounds} rounds): {offs}")
    print(f"clock measurements: {run.sync_file}")
    if failed:
        print(f"ktrace: the run failed on GPU(s) {', '.join(str(r.device) for r in failed)}", file=sys.stderr)
        return max(r.returncode for r in failed) if all(r.returncode > 0 for r in failed) else EXIT_ENV
    groups = list(zip(*(r.saved for r in run.runs)))
    for group in groups:
        stem = group[0].stem.removesuffix(f"_gpu{run.runs[0].device}")
        res = merge(group, group[0].with_name(f"{stem}_merged.perfetto-trace"), tracks=a.tracks,
                    report=not a.no_report)
        print(f"merged trace, a process per GPU: {res.path}")
        if res.cross_gpu is not None:
            sys.stdout.flush()
            print_cross_gpu(res.cross_gpu)
            print(f"each GPU's own analysis: ktrace analyze {' '.join(str(p) for p in group)}")
    return EXIT_OK


def _ensure_calibration(flashinfer_include) -> None:
    from ..capture.calibrate import cached, calibrate

    if cached() is not None:
        return
    print("calibrating this GPU (once; cached): timer tick and probe cost ...", file=sys.stderr)
    cal = calibrate(flashinfer_include=flashinfer_include)
    costs = ", ".join(f"{h} {ns:.1f} ns" for h, ns in cal.probe_cost_ns.items())
    print(f"timer tick {cal.tick_ns} ns; one probe costs {costs}", file=sys.stderr)


def _cmd_run_ab(a) -> int:
    from ..api import diff
    from ..capture import settings
    from ..capture.ab import DriverCall, run_ab
    from ..report.ab_report import ab_lines
    from ..report.safe_text import for_stream

    if a.driver is not None:
        raise InputError(f"run --ab takes its two drivers after --ab; {a.driver!r} is one too many (give a driver "
                         "its arguments in quotes: --ab \"work.py --extra-work 2\" ...)")
    if a.reps <= 0 or a.warmup < 0 or a.pairs < 10:
        raise InputError("--reps must be > 0, --warmup >= 0 and --pairs >= 10 (50 or more advised)")
    if not 0 <= a.ab_threshold < 100:
        raise InputError(f"--ab-threshold {a.ab_threshold}: a percentage between 0 and 100, e.g. 0.25")
    if a.repeat != 1 or a.no_timing:
        raise InputError("--ab times one run of each variant: drop --repeat and --no-timing")
    if _select_device(a):
        raise InputError("--ab compares two variants on one GPU: give one --device")
    before, after = DriverCall.parse(a.ab[0], "BEFORE"), DriverCall.parse(a.ab[1], "AFTER")
    if not a.no_calibrate:
        _ensure_calibration(a.flashinfer_include)
    settings.configure(header=a.header, flashinfer_include=a.flashinfer_include, out_dir=a.out, suffix=a.suffix,
                       reps=a.reps, warmup=a.warmup, timing=True)
    session = run_ab(before, after, pairs=a.pairs, warmup=a.warmup, threshold_pct=a.ab_threshold,
                     buffers=a.ab_buffers)
    for cap in (session.before, session.after):
        _report_capture(cap, a, report=False)
    print()
    for line in ab_lines(session.record):
        print(for_stream(line))
    if not a.no_report:
        from ..report.compare_report import diff_text
        from ._common import console

        print(f"\n== ktrace diff {session.before.paths['bin']} {session.after.paths['bin']}")
        sys.stdout.flush()
        try:
            con = console()
            for r in diff_text(diff(str(session.before.paths["bin"]), str(session.after.paths["bin"]),
                                    engine=a.engine)):
                con.print(r)
        except KtraceError as e:  # the engine cannot run here: the record and the captures are written
            report_error(e)
    return EXIT_OK


def _report_capture(cap, a, report: bool = True) -> None:
    print()
    print(f"== {cap.name} ({cap.kernel.spec.name if hasattr(cap.kernel, 'spec') else 'kernel'}, grid {list(cap.grid)}, "
          f"block {list(cap.block or [])}, {cap.producer} header)")
    if cap.timing is not None:
        from ..report.safe_text import for_stream

        print(for_stream(timing_line(cap.timing)))
    ov = cap.overflow
    if ov is not None and ov.any():
        print(f"warning: {int(ov.sum()):,} records dropped by {int((ov > 0).sum()):,} full lanes: raise "
              f"max_events_per_lane (now {cap.capacity})", file=sys.stderr)
    from ..api import convert

    trace = cap.paths["trace"] = convert(cap.paths["bin"], tracks=a.tracks).path
    print(f"buffer {cap.paths['bin']}  sidecar {cap.paths['json']}  trace {trace}")
    print("open the trace at https://ui.perfetto.dev (Open trace file)")
    if report and not a.no_report:
        _print_report(cap.paths["bin"], a.engine)


def timing_line(t) -> str:
    """What ``ktrace run`` prints of a capture's timing (a ``capture.timing.Comparison``): both builds' medians
    and spreads and the profiler's overhead, in µs to the hundredth, as ``run --ab`` writes kernel times (a 0.5%
    overhead on a 200 µs kernel is 1 µs: three significant digits would hide it)."""
    w, wo = t.with_profiler, t.without_profiler
    return (f"timing, median of {w.reps} interleaved launches after {w.warmup} warm-up pairs: "
            f"unprofiled {wo.median_us:,.2f} µs (p10-p90 {wo.p10_us:,.2f}-{wo.p90_us:,.2f} µs), "
            f"profiled {w.median_us:,.2f} µs (p10-p90 {w.p10_us:,.2f}-{w.p90_us:,.2f} µs); "
            f"overhead x{t.overhead_ratio:.4f} ({t.overhead_us:+,.2f} µs)")


def _print_report(bin_path, engine: str = "auto") -> None:
    """What ``ktrace analyze BUF`` prints; where its engine cannot run here, what ``ktrace inspect BUF`` does."""
    from .analysis import print_analysis
    from .convert import print_inspect

    sys.stdout.flush()
    try:
        from ..api import analyze

        print_analysis(analyze(str(bin_path), engine=engine))
        return
    except KtraceError as e:
        report_error(e)
    try:
        print_inspect(str(bin_path))
    except KtraceError as e:
        report_error(e)


def _cmd_calibrate(a) -> int:
    from ..capture.build import resolve_header
    from ..capture.calibrate import calibrate

    if a.probes <= 0 or a.reps <= 0:
        raise InputError("--probes and --reps must be > 0")
    if _select_device(a):
        raise InputError("calibrate measures one GPU: give one --device (each GPU's calibration is cached)")
    if a.header == "auto":
        headers = None
    else:
        resolve_header(a.header, a.flashinfer_include)  # a missing FlashInfer header is an input error
        headers = [a.header]
    cal = calibrate(headers=headers, flashinfer_include=a.flashinfer_include, n=a.probes, reps=a.reps)
    if a.json:
        text = json.dumps(cal.as_dict(), indent=1)
        if a.json == "-":
            print(text)
            return EXIT_OK
        write_text(a.json, text)
    steps = sorted(cal.tick_steps.items(), key=lambda kv: -kv[1])[:4]
    print(f"{cal.device} ({cal.pci_bus_id}, driver {cal.driver_version})")
    print(f"timer tick: {cal.tick_ns} ns (steps between {cal.timer_reads:,} back-to-back reads: "
          + ", ".join(f"{k} ns x{v:,}" for k, v in steps) + ")")
    if cal.sm_clock_mhz:
        print(f"SM clock while measuring: {cal.sm_clock_mhz:.0f} MHz")
    for h, ns in cal.probe_cost_ns.items():
        loop = cal.probe_loop.get(h, {})
        print(f"one probe, {h} header: {ns:.2f} ns of kernel time, {cal.probe_cost_cycles[h]:.1f} SM cycles in the "
              f"writing thread ({loop.get('probes_per_lane', '?')} probes per lane, {loop.get('blocks', '?')} blocks)")
    if {"ktrace", "flashinfer"} <= set(cal.probe_cost_ns):
        r = cal.probe_cost_ns["ktrace"] / cal.probe_cost_ns["flashinfer"]
        print(f"ktrace's probe / FlashInfer's: x{r:.3f}")
    return EXIT_OK


HANDLERS = {"run": _cmd_run, "calibrate": _cmd_calibrate}
