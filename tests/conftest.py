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


def _test_home() -> Path:
    """The tests' own cache and config folders, in the system's temporary folder (one per checkout, private to
    this user): the compiled trace processor is kept between runs, and nothing lands in ~/.cache/ktrace,
    ~/.config/ktrace or the checkout. Every ktrace a test starts inherits them (a test that wants another cache
    sets KTRACE_CACHE_DIR itself)."""
    import hashlib
    import tempfile

    tag = hashlib.sha256(str(ROOT).encode()).hexdigest()[:10]
    home = Path(tempfile.gettempdir()) / f"ktrace-tests-{os.getuid()}-{tag}"
    for sub in ("cache", "config", "hypothesis"):
        (home / sub).mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(home, 0o700)
    return home


TEST_HOME = _test_home()
os.environ["KTRACE_CACHE_DIR"] = str(TEST_HOME / "cache")
os.environ["XDG_CONFIG_HOME"] = str(TEST_HOME / "config")  # the snapshot secret: ktrace/engine/wasm_snapshot.py

try:  # hypothesis keeps its examples database in ./.hypothesis unless told otherwise
    from hypothesis import settings as _hypothesis_settings
    from hypothesis.database import DirectoryBasedExampleDatabase

    _hypothesis_settings.register_profile(
        "ktrace-tests", database=DirectoryBasedExampleDatabase(str(TEST_HOME / "hypothesis")))
    _hypothesis_settings.load_profile("ktrace-tests")
except ImportError:
    pass
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


def _files_under(folder: Path) -> dict:
    return {str(p): p.stat().st_mtime_ns for p in folder.rglob("*") if "__pycache__" not in p.parts}


@pytest.fixture(scope="session", autouse=True)
def _samples_untouched():
    """Tests write only to temporary folders: samples/ (and examples/) hold after the run what they held
    before it, file for file (an error at the end of the session names what was written)."""
    before = {d: _files_under(ROOT / d) for d in ("samples", "examples")}
    yield
    for d, files in before.items():
        now = _files_under(ROOT / d)
        changed = sorted(set(now) - set(files)) + sorted(f for f in files if now.get(f, files[f]) != files[f])
        assert not changed, f"tests wrote into {d}/ (write to tmp_path instead): " + ", ".join(changed[:10])


@pytest.fixture(autouse=True)
def _no_terminal_width(monkeypatch):
    """Reports into a pipe are what the tests read: $COLUMNS (a developer's terminal's, or the 80 pytest-xdist
    gives its workers) would re-wrap them. A test that wants a width sets it."""
    monkeypatch.delenv("COLUMNS", raising=False)


def quick_first(values, n: int) -> list:
    """``values`` as test parameters of which only the first ``n`` run in the quick lane (-m "not slow"); the
    rest are marked slow (CI runs them all)."""
    return [v if i < n else pytest.param(v, marks=pytest.mark.slow) for i, v in enumerate(values)]


def wait_until(ready, what: str, timeout_s: float = 60.0, every_s: float = 0.05):
    """Polls ``ready()`` until it is true (its value is returned): a test waits for a state, never a fixed time.
    ``timeout_s`` only bounds a hang; the AssertionError names ``what`` did not happen."""
    import time

    deadline = time.monotonic() + timeout_s
    while True:
        value = ready()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout_s:g} s: {what} did not happen")
        time.sleep(every_s)


# A child ``ktrace`` (python -c KTRACE_SAYING_QUERIES CMD ...) that prints "ktrace-test: querying <sql>" on
# stdout as each SQL statement goes to the engine: a test reads up to the one it waits for, and knows the
# child is inside that query (no fixed sleep).
KTRACE_SAYING_QUERIES = (
    "import sys\nfrom ktrace.engine.session import Session\n_query = Session.query\n"
    "def query(self, sql, *args, **kwargs):\n"
    "    print('ktrace-test: querying', ' '.join(sql.split())[:200], flush=True)\n"
    "    return _query(self, sql, *args, **kwargs)\n"
    "Session.query = query\nfrom ktrace.cli import main\nsys.exit(main(sys.argv[1:]))\n")


def read_until_querying(p, start: str) -> None:
    """Reads the stdout of a child started with KTRACE_SAYING_QUERIES until it says it is running the query
    that starts with ``start`` (an AssertionError if it exits first)."""
    seen = []
    for line in p.stdout:
        seen.append(line)
        if line.startswith(f"ktrace-test: querying {start}"):
            return
    raise AssertionError(f"the child ended (exit {p.wait()}) before querying {start!r}: {''.join(seen)[-2000:]}")


# Tests measured at 0.6 s or more on a 2-core machine that carried no `slow` mark (the quick lane's rule,
# pyproject.toml): one node id a line in tests/slow_tests.txt, marked slow here when collected, so that the
# quick lane stays quick without editing each test (CI runs every test either way).
_SLOW_LIST = Path(__file__).with_name("slow_tests.txt")


def pytest_collection_modifyitems(config, items):
    if not _SLOW_LIST.exists():
        return
    listed = {line.strip() for line in _SLOW_LIST.read_text().splitlines()
              if line.strip() and not line.startswith("#")}
    for item in items:
        if item.nodeid in listed:
            item.add_marker(pytest.mark.slow)
