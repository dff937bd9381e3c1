"""The allocator's settings (ktrace/allocator.py): a ktrace command's numpy temporaries of a few MB reuse their
pages instead of faulting fresh ones in, and a user's own malloc settings are left alone. Each case runs in a
fresh interpreter (the C allocator's state is per process) and counts its page faults."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux") or not hasattr(os, "confstr"),
                                reason="glibc's malloc")

# Page faults of touching a 24 MiB temporary, twice (freed in between), after tune_allocator() or not.
_RUN = """
import json, resource, sys
import numpy as np
from ktrace.runtime.allocator import tune_allocator
tuned = tune_allocator() if sys.argv[1] == "tune" else False
faults = []
for _ in range(2):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    a = np.ones(3 << 20)  # 24 MiB: above glibc's first mmap threshold, below ktrace's
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    del a
print(json.dumps({"tuned": tuned, "faults": faults}))
"""


def _faults(mode: str, **env) -> dict:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "GLIBC_TUNABLES"}
    p = subprocess.run([sys.executable, "-c", _RUN, mode], capture_output=True, text=True, timeout=120, cwd=ROOT,
                       env={**clean, **env})
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


def _glibc() -> bool:
    try:
        return bool(os.confstr("CS_GNU_LIBC_VERSION"))
    except (ValueError, OSError):
        return False


@pytest.mark.skipif(not _glibc(), reason="glibc's malloc")
def test_a_freed_temporary_s_pages_are_reused_once_tuned():
    plain, tuned = _faults("plain"), _faults("tune")
    assert tuned["tuned"] is True and plain["tuned"] is False
    # Untuned, glibc maps the second 24 MiB block afresh too (its threshold is then 24 MiB, not above it).
    assert plain["faults"][1] >= plain["faults"][0] // 2 > 0
    assert tuned["faults"][0] > 0 and tuned["faults"][1] <= tuned["faults"][0] // 10


@pytest.mark.slow
@pytest.mark.parametrize("setting", ["MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "GLIBC_TUNABLES"])
def test_the_user_s_own_malloc_settings_are_left_alone(setting):
    value = "glibc.malloc.trim_threshold=1000000" if setting == "GLIBC_TUNABLES" else "1000000"
    assert _faults("tune", **{setting: value})["tuned"] is False


@pytest.mark.parametrize("argv, tuned", [(["analyze", "imbalance", "--json"], True),
                                          (["inspect", "imbalance"], False)])
def test_the_analysis_commands_tune_their_process(monkeypatch, capsys, argv, tuned):
    import ktrace.cli as cli
    from conftest import sample

    called = []
    monkeypatch.setattr(cli, "tune_allocator", lambda: called.append(True) or True)
    argv = [str(sample(a)) if a == "imbalance" else a for a in argv]
    assert cli.main(argv) == 0
    assert called == ([True] if tuned else [])
    assert {"analyze", "diff", "check"} == cli.TUNED_COMMANDS


# A ktrace command's process, then numpy loaded in it: what it set, and how many threads the process runs.
_BLAS = """
import json, os, sys
import ktrace.cli as cli
rc = cli.main(["inspect", sys.argv[1]])
import numpy as np
deps = np.show_config(mode="dicts").get("Build Dependencies", {})
print(json.dumps({"rc": rc, "setting": os.environ.get("OPENBLAS_NUM_THREADS"),
                  "openblas": "openblas" in str(deps.get("blas", {}).get("name", "")).lower(),
                  "threads": len(os.listdir(f"/proc/{os.getpid()}/task"))}))
"""


def _blas(**env) -> dict:
    from ktrace.runtime.allocator import BLAS_THREAD_SETTINGS
    from conftest import sample

    clean = {k: v for k, v in os.environ.items() if k not in BLAS_THREAD_SETTINGS}
    p = subprocess.run([sys.executable, "-c", _BLAS, str(sample("imbalance"))], capture_output=True, text=True,
                       timeout=120, cwd=ROOT, env={**clean, **env})
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_a_command_s_blas_library_starts_one_thread():
    got = _blas()
    assert got["rc"] == 0 and got["setting"] == "1"
    if got["openblas"]:  # no BLAS thread waiting beside the command's own
        assert got["threads"] == 1


@pytest.mark.slow
def test_the_user_s_own_blas_threads_are_left_alone():
    assert _blas(OPENBLAS_NUM_THREADS="2")["setting"] == "2"
    assert _blas(OMP_NUM_THREADS="3")["setting"] is None
