"""Small frictions a new user meets: each command says what went wrong in the words of what was meant."""

import pytest

from conftest import run_ktrace, sample


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    out = tmp_path_factory.mktemp("t") / "w.perfetto-trace"
    assert run_ktrace("convert", sample("warpgroups"), "-o", out)[0] == 0
    return out


@pytest.mark.slow
@pytest.mark.parametrize("cmd", ["inspect", "convert"])
def test_a_trace_given_where_a_buffer_is_meant_is_named_a_trace(trace, cmd, tmp_path):
    args = [cmd, trace] + (["-o", tmp_path / "x.perfetto-trace"] if cmd == "convert" else [])
    rc, _, err = run_ktrace(*args)
    assert rc == 2 and "a Perfetto trace, not a profiler buffer" in err and f"ktrace analyze {trace}" in err
    assert "8-byte records" not in err


def test_a_mistyped_option_gets_the_command_s_usage_and_a_suggestion():
    rc, _, err = run_ktrace("analyze", "--jsn", sample("warpgroups"))
    assert rc == 2 and err.startswith("usage: ktrace analyze") and "did you mean --json?" in err


def test_view_of_a_folder_says_it_is_a_folder(tmp_path):
    rc, _, err = run_ktrace("view", tmp_path, "--no-browser")
    assert rc == 2 and "is a folder" in err and "no such file" not in err


def _before_tables(out: str) -> list[str]:
    """The report's text: the lines above its first table (the headline, warnings, findings), all of them
    without --details."""
    lines = out.splitlines()
    first = next((i for i, ln in enumerate(lines) if ln.startswith(("┏", "─"))), len(lines) + 2)
    return [ln.rstrip() for ln in lines[:first - 2]]


@pytest.mark.slow
def test_piped_text_wraps_at_100_columns_or_at_columns():
    _, out, _ = run_ktrace("analyze", sample("waves_ktrace"), env={"COLUMNS": ""})
    assert max(map(len, _before_tables(out))) <= 100
    _, out, _ = run_ktrace("analyze", sample("waves_ktrace"), env={"COLUMNS": "80"})
    assert max(map(len, out.splitlines())) <= 80


@pytest.mark.slow
def test_a_narrow_table_folds_headers_instead_of_cutting_them():
    _, out, _ = run_ktrace("analyze", sample("imbalance"), "--details", env={"COLUMNS": "120"})
    assert "…" not in out and "imbalance" in out


@pytest.mark.slow
def test_columns_that_make_no_sense_are_ignored():
    rc, out, _ = run_ktrace("analyze", sample("warpgroups"), env={"COLUMNS": "3"})
    assert rc == 0 and max(map(len, _before_tables(out))) <= 100


@pytest.mark.slow
def test_gpu_end_skews_below_the_clock_uncertainty_are_not_called_a_last_finisher():
    rc, out, err = run_ktrace("analyze", sample("multigpu_gpu0"), sample("multigpu_gpu1"), env={"COLUMNS": "250"})
    assert rc == 0, err
    assert "(within clock uncertainty)" in out
    assert "within the clocks' uncertainty (±2.24 µs): which GPU finishes last is not known" in out
    rc, md, _ = run_ktrace("analyze", sample("multigpu_gpu0"), sample("multigpu_gpu1"), "--markdown")
    assert rc == 0 and "which GPU finishes last is not known" in md
