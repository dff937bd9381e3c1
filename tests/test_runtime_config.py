"""The one configuration of parallel work (ktrace/runtime/config.py): what each stage gets, $KTRACE_SERIAL, and
that nothing outside the runtime forks, pools, shares memory or counts cores on its own."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ktrace.core.errors import InputError
from ktrace.runtime import config
from ktrace.runtime.config import STAGES, Parallelism, Stage, serial_stages, thread_pool

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "ktrace"
SAMPLES = ROOT / "samples"

# What only the runtime may use: process pools and forks, thread pools, shared memory, the core count.
_POOL_MODULES = ("concurrent.futures", "multiprocessing", "mmap")
_CORE_COUNTS = ("cpu_count", "sched_getaffinity")
# Convert's workers wait mid-task for the state the parts before them left, which a pool's task cannot
# (docs/architecture.md): their own processes and pipes, with the runtime's guards.
_EXCEPTIONS = {"export/workers.py": {"multiprocessing"}}


def _uses(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        for n in names:
            found |= {m for m in _POOL_MODULES if n == m or n.startswith(m + ".")}
        if isinstance(node, ast.Attribute) and node.attr in _CORE_COUNTS:
            found.add(node.attr)
    return found


def test_only_the_runtime_forks_pools_shares_memory_or_counts_cores():
    bad = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel.startswith("runtime/"):
            continue
        used = _uses(path) - _EXCEPTIONS.get(rel, set())
        if used:
            bad.append(f"{rel}: {', '.join(sorted(used))}")
    assert bad == [], "use ktrace.runtime.config (Parallelism, Stage, thread_pool) instead:\n" + "\n".join(bad)


def test_the_analysis_reaches_the_runtime_only_through_its_configuration():
    # The formulas are handed a Stage (or a thread count); they never start workers or make shared memory.
    bad = []
    for path in sorted((PACKAGE / "analysis").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module and "runtime" in node.module.split("."):
                if node.module.split(".")[-1] != "config":
                    bad.append(f"{path.relative_to(PACKAGE)}: from {'.' * node.level}{node.module}")
    assert bad == []


def test_a_stage_gets_the_commands_workers_unless_held_serial_or_under_its_threshold():
    par = Parallelism(jobs=4, cores=16, serial=frozenset({"json"}), sweep_min_slices=100)
    assert par.stage("parts") == Stage("parts", 4)
    assert par.stage("sweeps", size=100).jobs == 1 and par.stage("sweeps", size=101).jobs == 4
    assert par.stage("json", size=10**6).jobs == 1  # held serial
    assert Parallelism(jobs=4, cores=16).stage("json", size=4095).jobs == 1
    assert Parallelism(jobs=4, cores=16).stage("json", size=4096).jobs == 4
    assert Parallelism(jobs=1, cores=16).stage("parts").jobs == 1
    with pytest.raises(ValueError, match="unknown stage 'sweep'"):
        par.stage("sweep")


def test_threads_stand_on_the_cores_the_workers_leave():
    assert Parallelism(jobs=2, cores=2).threads("copy") == 1  # the workers take every core
    assert Parallelism(jobs=8, cores=16).threads("copy") == 4
    assert Parallelism(jobs=3, cores=16).threads("evidence_tests") == 3
    assert Parallelism(jobs=1, cores=16).threads("evidence_tests") == 1
    assert Parallelism(jobs=1, cores=16).threads("transpose") == 4
    assert Parallelism(jobs=1, cores=16, serial=frozenset({"transpose"})).threads("transpose") == 1


def test_build_caps_the_workers_at_the_cores(monkeypatch):
    monkeypatch.setattr(config, "available_cores", lambda: 32)
    monkeypatch.delenv("KTRACE_SERIAL", raising=False)
    assert Parallelism.build().jobs == 32
    assert Parallelism.build(cap=8).jobs == 8
    assert Parallelism.build(12, cap=8).jobs == 12  # asked for: no cap but the cores
    monkeypatch.setattr(config, "available_cores", lambda: 4)
    assert Parallelism.build(12).jobs == 4 and Parallelism.build(0).jobs == 1


def test_below_three_cores_the_default_is_one_process_and_asked_workers_still_fork(monkeypatch):
    # Measured on 2 cores: the workers and the parent beside them contend (docs/performance.md).
    monkeypatch.delenv("KTRACE_SERIAL", raising=False)
    monkeypatch.setattr(config, "available_cores", lambda: 2)
    assert Parallelism.build().jobs == 1 and Parallelism.build(cap=8).jobs == 1
    assert Parallelism.build(2).jobs == 2
    monkeypatch.setattr(config, "available_cores", lambda: 3)
    assert Parallelism.build().jobs == 3


def test_ktrace_serial_names_stages_or_all():
    held = {"copy", "critical_path"}  # in one process by default: they gained under 20% on 16 cores
    assert serial_stages({"KTRACE_SERIAL": "sweeps, json"}) == {"sweeps", "json"} | held
    assert serial_stages({"KTRACE_SERIAL": "all"}) == set(STAGES)
    assert serial_stages({}) == held
    with pytest.raises(InputError, match="KTRACE_SERIAL=sweep: unknown stage sweep"):
        serial_stages({"KTRACE_SERIAL": "sweep"})


def test_ktrace_parallel_releases_the_stages_held_by_default():
    assert serial_stages({"KTRACE_PARALLEL": "copy"}) == {"critical_path"}
    assert serial_stages({"KTRACE_PARALLEL": "all"}) == set()
    assert serial_stages({"KTRACE_PARALLEL": "all", "KTRACE_SERIAL": "copy"}) == {"copy"}  # serial wins
    with pytest.raises(InputError, match="KTRACE_PARALLEL=cp: unknown stage cp"):
        serial_stages({"KTRACE_PARALLEL": "cp"})
    par = Parallelism.build(4, env={})  # a command's configuration: the walk and the copies in this process
    assert not par.stage("critical_path").parallel and par.threads("copy") == 1 and par.stage("parts").parallel


def test_an_unknown_serial_stage_is_a_usage_error_of_the_command():
    env = {**os.environ, "KTRACE_SERIAL": "nonsense"}
    p = subprocess.run([sys.executable, "-m", "ktrace", "analyze", str(SAMPLES / "waves_ktrace.bin"), "--jobs", "2"],
                       capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert p.returncode == 2 and "KTRACE_SERIAL=nonsense: unknown stage nonsense" in p.stderr
    assert "Traceback" not in p.stderr


def test_stages_held_serial_give_the_figures_of_one_process():
    from ktrace.analysis.figures.numpy.stream import decoder_figures
    from ktrace.decoding.decoder import BufferDecoder

    dec = BufferDecoder(str(SAMPLES / "waves_ktrace.bin"))
    one = decoder_figures(dec, jobs=1, chunk_rows=50)
    for serial in ({"parts"}, {"sweeps", "critical_path"}, {"evidence_tests"}):
        par = Parallelism(jobs=2, cores=2, sweep_min_slices=0, serial=frozenset(serial))
        assert decoder_figures(dec, jobs=par, chunk_rows=50).differences(one) == []


def test_a_thread_pool_of_none_runs_in_this_thread_and_raises_as_a_pool_would():
    import threading

    with thread_pool(0, "x") as pool:
        assert pool.submit(lambda: threading.current_thread().name).result() == threading.current_thread().name
        assert list(pool.map(abs, [-1, -2])) == [1, 2]
        with pytest.raises(ZeroDivisionError):
            pool.submit(lambda: 1 / 0).result()
    with thread_pool(2, "ktrace-test") as pool:
        assert pool.submit(lambda: threading.current_thread().name).result().startswith("ktrace-test")


def test_importing_beside_loads_the_modules_and_never_raises():
    import sys
    import time

    from ktrace.runtime.config import import_beside

    sys.modules.pop("ktrace.analysis.findings.kinds.tail", None)
    import_beside(["no_such_module_anywhere", "ktrace.analysis.findings.kinds.tail"])  # the first fails: quietly
    import_beside(["ktrace.analysis.findings.kinds.tail"])
    deadline = time.monotonic() + 30
    while "ktrace.analysis.findings.kinds.tail" not in sys.modules and time.monotonic() < deadline:
        time.sleep(0.01)
    import ktrace.analysis.findings.kinds.tail as tail  # waits for the other thread's import, if under way

    assert tail.__name__ in sys.modules
