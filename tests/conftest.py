import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
SAMPLE_NAMES = sorted(p.stem for p in SAMPLES.glob("*.bin"))


def sample(name: str) -> Path:
    return SAMPLES / f"{name}.bin"


def sample_meta(name: str) -> dict:
    return json.loads((SAMPLES / f"{name}.json").read_text())


def run_ktrace(*args, cwd=None, env=None, timeout=300):
    """The installed ``ktrace`` command in a subprocess: (returncode, stdout, stderr)."""
    exe = shutil.which("ktrace")
    cmd = [exe, *map(str, args)] if exe else [sys.executable, "-m", "ktrace", *map(str, args)]
    full_env = dict(os.environ, **(env or {}))
    p = subprocess.run(cmd, cwd=cwd, env=full_env, capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def run_ktrace_peak_mb(*args):
    """The ``ktrace`` command in a child process: (returncode, stderr, its peak RSS in MB)."""
    code = ("import resource, subprocess, sys; p = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
            "print(p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024); "
            "sys.stderr.write(p.stderr)")
    p = subprocess.run([sys.executable, "-c", code, sys.executable, "-m", "ktrace", *map(str, args)],
                       capture_output=True, text=True, timeout=300)
    rc, mb = p.stdout.split()
    return int(rc), p.stderr, int(mb)


def write_buffer(tmp_path: Path, words: np.ndarray, name: str = "buf", meta: dict | None = None) -> Path:
    p = tmp_path / f"{name}.bin"
    np.asarray(words, np.uint64).astype("<u8").tofile(p)
    if meta is not None:
        (tmp_path / f"{name}.json").write_text(json.dumps(meta))
    return p


@pytest.fixture
def samples_dir():
    return SAMPLES


def interruptible() -> None:
    """preexec_fn for a child that a test stops with Ctrl-C (SIGINT): the default disposition, as in a
    terminal, even when the test run itself was started in the background (where SIGINT is ignored and a
    child would inherit that)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.fixture(autouse=True)
def _no_terminal_width(monkeypatch):
    """Reports into a pipe are what the tests read: $COLUMNS (a developer's terminal's, or the 80 pytest-xdist
    gives its workers) would re-wrap them. A test that wants a width sets it."""
    monkeypatch.delenv("COLUMNS", raising=False)


def quick_first(values, n: int) -> list:
    """``values`` as test parameters of which only the first ``n`` run in the quick lane (-m "not slow"); the
    rest are marked slow (CI runs them all)."""
    return [v if i < n else pytest.param(v, marks=pytest.mark.slow) for i, v in enumerate(values)]
