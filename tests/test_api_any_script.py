"""The library in any caller: a plain script with no ``if __name__ == "__main__"`` guard, code given with ``-c``
or on stdin, and a Jupyter kernel all call ``ktrace.diff`` (whose captures are analyzed by worker processes)
and ``ktrace.whatif`` with exit 0. Workers are forked copies of the caller, never fresh interpreters that run
its script again; a worker that cannot start, or ends with an exit status, is said as that (not as "out of
memory")."""

from __future__ import annotations

import gzip
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ktrace.core.errors import KtraceError
from ktrace.runtime.workers import run_in_workers

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "samples"

# What a user writes first: no main guard, the defaults, then the same with two workers asked for by name
# (the default keeps a one-core machine in one process), and the serial diff it must equal.
SCRIPT = """
import ktrace

d = ktrace.diff("mla1.bin", "mla2.bin")
two = ktrace.diff("mla1.bin", "mla2.bin", jobs=2)
one = ktrace.diff("mla1.bin", "mla2.bin", jobs=1)
print("diff", d.to_json() == two.to_json() == one.to_json(), d.headline.split(":")[0])
w = ktrace.whatif("mla1.bin")
print("whatif", w.measured_wall_ns > 0 and w.predicted_wall_ns == w.replayed_wall_ns)
"""


@pytest.fixture(scope="module")
def mla(tmp_path_factory) -> Path:
    """The two mixed MLA captures gunzipped (8 MiB each: past the size where diff starts workers) with their
    sidecars, in a folder of their own."""
    folder = tmp_path_factory.mktemp("mla")
    for run in (1, 2):
        with gzip.open(SAMPLES / f"fi_mla_mixed_run{run}.bin.gz") as src, open(folder / f"mla{run}.bin", "wb") as dst:
            shutil.copyfileobj(src, dst)
        shutil.copy(SAMPLES / f"fi_mla_mixed_run{run}.json", folder / f"mla{run}.json")
    return folder


def _python(args: list[str], cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, *args], input=stdin, capture_output=True, text=True, cwd=cwd, env=env,
                          timeout=300)


def _assert_ran(r: subprocess.CompletedProcess) -> None:
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-3000:]
    lines = r.stdout.split("\n")
    assert lines[0].startswith("diff True ") and lines[1] == "whatif True", r.stdout


@pytest.mark.slow
def test_a_plain_script_without_a_main_guard_calls_diff_and_whatif(mla):
    # diff's spawned workers ran the script again, each calling diff again: "WorkerLost ... out of memory, or
    # killed?", exit 1 with three tracebacks
    (mla / "plain.py").write_text(SCRIPT)
    _assert_ran(_python(["plain.py"], mla))


@pytest.mark.slow
@pytest.mark.parametrize("how", ["-c", "stdin"])
def test_code_given_on_the_command_line_or_stdin_calls_diff_and_whatif(mla, how):
    _assert_ran(_python(["-c", SCRIPT] if how == "-c" else ["-"], mla, stdin=SCRIPT if how == "stdin" else None))


@pytest.mark.slow
def test_a_jupyter_kernel_calls_diff_and_whatif(mla):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(SCRIPT)])
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(mla)}},
                            ).execute()
    out = "".join(o.get("text", "") for o in nb.cells[0].outputs if o.get("name") == "stdout")
    assert out.startswith("diff True ") and "\nwhatif True" in out, nb.cells[0].outputs


def _pid(_x) -> int:
    return os.getpid()


def test_the_workers_are_forked_copies_and_stay_here_beside_the_engine(monkeypatch):
    monkeypatch.delitem(sys.modules, "wasmtime", raising=False)  # an earlier test of this process may have loaded it
    pids = run_in_workers(_pid, [1, 2, 3], jobs=2)
    assert os.getpid() not in pids and len(set(pids)) >= 1
    # where the embedded engine's runtime is loaded, a fork would copy it half-way: this process does the work
    monkeypatch.setitem(sys.modules, "wasmtime", sys)
    assert run_in_workers(_pid, [1, 2, 3], jobs=2) == [os.getpid()] * 3


def test_a_worker_that_cannot_be_started_is_said_as_that(monkeypatch):
    def refused():
        raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(os, "fork", refused)
    monkeypatch.delitem(sys.modules, "wasmtime", raising=False)  # as if no earlier test of this process loaded it
    with pytest.raises(KtraceError) as e:
        run_in_workers(_pid, [1, 2], jobs=2)
    assert str(e.value) == ("could not start a worker process (Resource temporarily unavailable: too many processes, "
                            "or too little memory for another?); run with --jobs 1 (one process)")
    assert "out of memory" not in str(e.value) and e.value.exit_code == 2
    from ktrace.runtime import forked

    with pytest.raises(KtraceError, match="could not start a worker process"):
        forked.fork_map(lambda shared, x: x, None, [1, 2], jobs=2)
    from ktrace.export.workers import parallel_parts

    class State:
        def wire(self):
            return ()

    with pytest.raises(KtraceError, match="could not start a worker process"):  # convert's own workers
        list(parallel_parts(None, [[(0, 0, 1)], [(1, 1, 2)]], None, State(), jobs=2))


def test_a_worker_that_exits_with_a_status_is_not_said_to_be_out_of_memory(tmp_path):
    prog = tmp_path / "prog.py"
    prog.write_text(textwrap.dedent("""
        import multiprocessing, os
        from ktrace.runtime.workers import run_in_workers
        from ktrace.core.errors import KtraceError

        def work(x):
            if x == 2:
                os._exit(3)  # as a native library calling exit()
            return x

        try:
            run_in_workers(work, [1, 2, 3], jobs=2)
            print("no error")
        except KtraceError as e:
            print("error:", e)
        print("left:", len(multiprocessing.active_children()))
        """))
    r = _python([str(prog)], tmp_path)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert r.stdout.split("\n")[:2] in (
        ["error: a worker process ended unexpectedly (exit status 3): run again, or with --jobs 1 (one process)",
         "left: 0"],
        ["error: a worker process ended unexpectedly (its exit status is unknown): out of memory, or killed? Run "
         "again, or with --jobs 1 (one process)", "left: 0"]), r.stdout
