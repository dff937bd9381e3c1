"""The first screen: ``ktrace analyze X`` on every sample fits 40 lines of 100 columns, and 80 columns without
a number split across lines; each warning is a headline of at most 100 characters built from its figures, with
its stake, the one thing to do and its evidence, wrapped at any width, never cut; --details adds tables that fit
the width."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

from conftest import SAMPLES as SAMPLE_DIR, run_ktrace, sample

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = sorted(p for p in (ROOT / "samples").rglob("*") if p.is_file() and re.search(
    r"\.(bin|bin\.gz|chrome_trace|chrome_trace\.gz|perfetto-trace|trace\.json\.gz)$", p.name))
_NUMBER = re.compile(r"\d(?:[\d,.]*\d)?")


def _render(result, columns: int, monkeypatch, **kw) -> str:
    from ktrace.cli.analysis import print_analysis

    monkeypatch.setenv("COLUMNS", str(columns))
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        print_analysis(result, **kw)
    return buf.getvalue()


def _split_numbers(narrow: str, wide: str) -> list[str]:
    """Numbers in the narrow rendering that the wide one does not hold: pieces of a number split by a wrap."""
    whole = set(_NUMBER.findall(wide))
    return [n for n in _NUMBER.findall(narrow) if n not in whole]


def test_the_samples_are_all_found():
    names = {p.name for p in SAMPLES}
    assert len(SAMPLES) >= 100 and "fi_mla_decode_run1.bin.gz" in names and "triton_matmul.chrome_trace.gz" in names
    assert any(p.parent.name == "repeats" for p in SAMPLES) and any(p.parent.name == "ab" for p in SAMPLES)
    assert any(p.parent.name == "iket" for p in SAMPLES)


@pytest.mark.slow
def test_every_sample_fits_the_first_screen(monkeypatch):
    import ktrace
    from ktrace.analysis.findings.headlines import HEADLINE_CHARS, Vocabulary, headline

    bad = []
    for path in SAMPLES:
        a = ktrace.analyze(path)
        text100 = _render(a, 100, monkeypatch)
        text80 = _render(a, 80, monkeypatch)
        wide = _render(a, 10_000, monkeypatch)
        lines100, lines80 = text100.splitlines(), text80.splitlines()
        if len(lines100) > 40 or max(map(len, lines100)) > 100:
            bad.append(f"{path.name}: {len(lines100)} lines, {max(map(len, lines100))} columns at COLUMNS=100")
        if len(lines80) > 40 or max(map(len, lines80)) > 80:
            bad.append(f"{path.name}: {len(lines80)} lines, {max(map(len, lines80))} columns at COLUMNS=80")
        split = _split_numbers(text80, wide)
        if split:
            bad.append(f"{path.name}: numbers split at 80 columns: {split}")
        for columns, text in ((80, text80), (100, text100)):  # wrapped, never cut: the same words as wide
            if "".join(text.split()) != "".join(wide.split()):  # (a word wider than the screen is folded)
                bad.append(f"{path.name}: at {columns} columns the report is not the wide one wrapped")
        v = Vocabulary.of(a)
        for f in a.findings:
            h = headline(f, v)
            if len(h.text) > HEADLINE_CHARS or (f.severity == "warning" and h.text.endswith("…")):
                bad.append(f"{path.name}: {f.kind} headline too long: {h.text}")
            if f.severity == "warning" and (not h.action or h.text in f.message):
                bad.append(f"{path.name}: {f.kind} headline not built from its figures: {h.text}")
            if f.severity == "warning" and h.text not in " ".join(wide.split()):
                bad.append(f"{path.name}: {f.kind} headline not in the report")
        assert "--details" in text100 and "phases (means" not in text100  # the tables wait for --details
    assert not bad, "\n".join(bad)


def _plain_and_drawn(a, monkeypatch, columns, **options) -> tuple[str, str]:
    """The short report at $COLUMNS ``columns`` (None: unset) as written to a pipe, and as rich's console draws
    it (a console given)."""
    from ktrace.cli._common import console
    from ktrace.cli.analysis import print_analysis

    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    plain, drawn = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(plain):
        print_analysis(a, **options)
    with contextlib.redirect_stdout(drawn):
        print_analysis(a, console(), **options)
    return plain.getvalue(), drawn.getvalue()


@pytest.mark.parametrize("name", ["fi_mla_decode_run1.bin.gz", "imbalance.bin", "late_start_flashinfer.bin",
                                  "warpgroups.bin", "ab/imbalance_before.bin"])
def test_the_short_report_into_a_pipe_is_what_rich_prints(monkeypatch, name):
    """Into a pipe the short report is written as plain lines, without rich: byte for byte what rich's console
    prints, at $COLUMNS 100, 80 and 60, without $COLUMNS, and with --all; a width where a line needs rich's own
    wrapping (40) is left to rich."""
    import ktrace
    from ktrace.cli._common import PIPE_MIN_WIDTH
    from ktrace.report.analysis_report import short_lines

    a = ktrace.analyze(SAMPLE_DIR / name)
    for columns in ("100", "80", "60", None, "40"):
        for show_all in (False, True):
            plain, drawn = _plain_and_drawn(a, monkeypatch, columns, show_all=show_all)
            assert plain == drawn, (columns, show_all)
            lines = short_lines(a, show_all, int(columns) if columns else None, PIPE_MIN_WIDTH)
            if columns in ("100", "80", None):  # the plain lines were written, not rich's
                assert lines is not None, (columns, show_all)
            elif columns == "40":
                assert lines is None


@pytest.mark.parametrize("kernel", ["k" * 130, "注意力_kernel", "kernel\x1b[2J"])
def test_a_kernel_name_too_long_wide_or_raw_prints_as_rich_prints_it(monkeypatch, tmp_path, kernel):
    """A kernel name longer than a pipe's 100 columns (its paragraph as wide as the name), of characters two
    columns wide, or holding an escape: into a pipe the same bytes as rich's console prints."""
    import json
    import shutil

    import ktrace

    shutil.copy(SAMPLE_DIR / "imbalance.bin", tmp_path / "k.bin")
    meta = json.loads((SAMPLE_DIR / "imbalance.json").read_text())
    (tmp_path / "k.json").write_text(json.dumps({**meta, "kernel": kernel}))
    a = ktrace.analyze(tmp_path / "k.bin")
    for columns in (None, "100", "80"):
        plain, drawn = _plain_and_drawn(a, monkeypatch, columns)
        assert plain == drawn, columns
        assert "\x1b[" not in plain


def test_the_short_report_of_the_imbalance_sample_says_what_to_do(monkeypatch):
    import ktrace

    text = _render(ktrace.analyze(sample("imbalance")), 100, monkeypatch)
    lines = text.splitlines()
    assert lines[0] == "persistent_phases: 132 blocks x 1 warp group on 132 SMs (1 wave), 3 phases, wall 602 µs"
    # one warning: the barrier after compute waits for block 17, and its own release is a tight barrier's
    # (model/barrier.py), so it is no second cause to act on
    assert "1 warning, 338 µs at stake (56% of the wall):" in lines
    flat = " ".join(text.split())
    assert "1. block 17 finishes compute last in 8 of 8 instances (42.4 µs over the median); the others wait" in flat
    assert "stake 338 µs (56% of the wall); do: give block 17 less of the compute work, or split its items" in flat
    assert "evidence: same block last in 8/8 instances" in flat
    assert lines[-1] == "more: --details for the tables and each finding in full, --all for 3 info findings"
    assert len(lines) <= 14


@pytest.mark.parametrize("name", ["blocks5000_ktrace", "blocks5000_flashinfer"])
def test_a_tail_of_uneven_blocks_is_headed_by_its_cause(monkeypatch, name):
    # Each block's work is 1 to 8 units (block % 8): evening the blocks out saves the stake, which may be
    # longer than the tail itself (8.45 µs against a 2.75 µs tail in the ktrace capture), so the cause leads.
    import ktrace

    text = " ".join(_render(ktrace.analyze(SAMPLE_DIR / f"{name}.bin"), 100, monkeypatch).split())
    assert re.search(r"1\. blocks of uneven length: the last [\d.]+ µs run with under half the SMs busy", text), text
    assert "do: schedule the heavy blocks first, split heavy blocks, or use a persistent scheduler" in text


MLA = SAMPLE_DIR / "fi_mla_decode_run1.bin.gz"


@pytest.mark.parametrize("path", [sample("imbalance"), MLA], ids=["imbalance", "mla"])
def test_details_tables_fit_80_columns_without_splitting_a_number(monkeypatch, path):
    import ktrace

    a = ktrace.analyze(path)
    narrow = _render(a, 80, monkeypatch, details=True)
    wide = _render(a, 10_000, monkeypatch, details=True)
    assert max(map(len, narrow.splitlines())) <= 80
    assert not _split_numbers(narrow, wide)
    assert "phases (means over instances)" in narrow and ": instances" in narrow
    assert "not shown for width:" in narrow and "not shown for width:" not in wide
    assert "the warnings account for" in narrow  # each finding in full, with the accounting


def test_the_command_line_prints_the_short_report_and_the_tables_on_request():
    rc, out, err = run_ktrace("analyze", MLA, env={"COLUMNS": "100"})
    assert rc == 0, err
    lines = out.splitlines()
    assert len(lines) <= 40 and max(map(len, lines)) <= 100
    assert "warp group 1 (compute) bounds each block" in out
    rc, more, err = run_ktrace("analyze", MLA, "--tables", "--all", env={"COLUMNS": "100"})
    assert rc == 0, err
    assert "rescale-o: instances" in more and max(map(len, more.splitlines())) <= 100
    assert "info findings" in more and "--all for" not in more


def test_whatif_and_runs_wrap_at_the_terminal_width_under_their_indent():
    args = ("whatif", sample("imbalance"), "--straggler-to-median", "compute")
    rc, narrow, err = run_ktrace(*args, env={"COLUMNS": "80"})
    assert rc == 0, err
    wide = run_ktrace(*args, env={"COLUMNS": "1000"})[1]
    lines = narrow.splitlines()
    assert max(map(len, lines)) <= 80 and len(lines) > len(wide.splitlines())  # the path lines were 170 wide
    assert "".join(narrow.split()) == "".join(wide.split())  # wrapped, not cut
    assert all(line.startswith("  ") for line in lines[1:]), narrow  # under its line's indent, not at column 0
    rc, out, err = run_ktrace("analyze", "--runs", sample("imbalance_ktrace"), sample("imbalance_run2_ktrace"),
                              env={"COLUMNS": "80"})
    assert rc == 0, err
    lines = out.splitlines()
    end = next(i for i, x in enumerate(lines) if x.startswith("phases:"))
    warnings = lines[lines.index("warnings in every run") + 1:end]
    assert len(warnings) > 4 and all(line.startswith("  ") and len(line) <= 80 for line in warnings), out
    assert all(line.startswith("    ") for line in warnings if not line.startswith("  in ")), out


def test_print_of_an_analysis_in_python_ends_with_python_not_flags():
    import ktrace

    a = ktrace.analyze(sample("imbalance"))
    text = " ".join(str(a).split())
    assert "--details" not in text and "--all" not in text
    assert "more: a.findings for each finding in full (3 info findings too" in text and "a.phases" in text
    rc, out, _ = run_ktrace("analyze", sample("imbalance"))  # the command keeps its flags
    assert rc == 0 and "more: --details for the tables" in out and "--all for 3 info findings" in out
