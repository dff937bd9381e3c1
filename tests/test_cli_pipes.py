"""The command line in a pipe: a reader that stops early (`| head`) is not a failed gate, and `ktrace query`
takes its options anywhere."""

import shutil
import subprocess
import sys

import pytest

from conftest import run_ktrace, sample


def piped_to_head(*args) -> int:
    """Runs ktrace with stdout into `head -c 1`, which exits after one byte: ktrace's exit code."""
    exe = shutil.which("ktrace")
    cmd = [exe, *map(str, args)] if exe else [sys.executable, "-m", "ktrace", *map(str, args)]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    p.stdout.read(1)
    p.stdout.close()  # the reader goes away: ktrace's next writes hit a broken pipe
    return p.wait(timeout=300)


@pytest.mark.slow
def test_a_broken_pipe_is_not_exit_1():
    assert piped_to_head("diff", sample("imbalance"), sample("imbalance"), "--all") == 0
    # a failed gate still says so through a broken pipe
    assert piped_to_head("check", sample("imbalance"), "--rule", "kernel.slices < 1",
                         "--sql", "SELECT * FROM slice") == 1


@pytest.mark.slow
def test_query_takes_options_anywhere():
    for args in (("--csv", sample("imbalance"), "SELECT 7 AS x"), (sample("imbalance"), "--csv", "SELECT 7 AS x")):
        rc, out, err = run_ktrace("query", *args)
        assert rc == 0 and out.split() == ["x", "7"], err
    rc, _, err = run_ktrace("query", sample("imbalance"), "--csv", "SELECT 1", "extra")
    assert rc == 2 and "unrecognized arguments: extra" in err


def test_run_repeat_runs_the_driver_n_times_with_numbered_names(tmp_path, monkeypatch):
    """CPU-only: the driver itself needs a GPU, so it is replaced by a fake that records each run's names."""
    from ktrace.capture import runner, settings
    from ktrace.cli import main

    seen = []
    monkeypatch.setattr(settings, "_current", settings.current())  # restored after the test
    monkeypatch.setattr(runner, "run_driver", lambda path, argv: seen.append(settings.current().suffix) or [])
    driver = tmp_path / "driver.py"
    driver.write_text("")
    rc = main(["run", "--no-calibrate", "--no-timing", "--repeat", "3", "--suffix", "_k", "-o", str(tmp_path),
               str(driver)])
    assert seen == ["_k_run1", "_k_run2", "_k_run3"]
    assert rc == 2  # the fake saved nothing: said so, as for a real driver that saves nothing
    assert main(["run", "--repeat", "0", str(driver)]) == 2
