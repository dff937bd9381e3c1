"""Docs that cannot drift: every shell and Python example in README.md and docs/ runs, and where a block shows
the output (``$ command`` followed by lines), the output is compared.

Shell examples run in a sandbox holding the names the docs use (run.bin, before.bin, run.perfetto-trace, ...)
made from the samples, with samples/, examples/ and tests/ linked in; Python blocks run as written from a folder
laid out as a fresh clone's root, with no file made first (they read samples/). A shown line matches when each of its
parts between ``...`` appears in the command's output in order (table borders and runs of spaces ignored).
A command's exit code is 0 unless its comment says ``# exit N``. What cannot run here is listed in
``NOT_HERE`` with the reason (a GPU: the ``gpu`` marker; an install, the suite itself); an entry that no
longer matches any example fails, so the list cannot go stale either.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT, interruptible

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELL_LANGS = ("", "bash", "sh", "shell", "console")
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
_COMMAND = re.compile(r"(ktrace|pip|pytest|\.ci/|trace_processor_shell)\b")

# (doc, the start of the example's command or first line) -> why it does not run here. "gpu": on the device.
NOT_HERE = {
    ("README.md", "pip install . && ktrace analyze"): "installs the package",
    ("README.md", ".ci/run"): "runs the whole CI",
    ("docs/contributing.md", ".ci/run"): "runs the whole CI",
    ("docs/contributing.md", 'pytest -m "not slow"'): "the test suite itself",
    ("docs/viewer.md", "ktrace query --print-package | xclip"): "needs a clipboard (the package itself: tested below)",
    ("docs/capture.md", "import torch, ktrace"): "gpu",
    ("docs/capture.md", "from ktrace.capture import record_runs"): "gpu",
    ("docs/capture.md", "from ktrace.capture import record_ab"): "gpu",
    ("docs/compare.md", "ktrace run --header ktrace --ab"): "gpu",
    ("docs/analysis-schema.md", "trace_processor_shell"): "needs Perfetto's trace_processor_shell",
    ("docs/ci.md", "ktrace check TRACE|BUF [TRACE|BUF ...]"): "the synopsis, not a command",
    ("docs/sidecar.md", "from google.protobuf import json_format"): "needs protoc",
}


def _examples():
    """(doc, line, kind, text): kind 'shell' (one command, its shown output) or 'python' (a block)."""
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        rel = doc.relative_to(ROOT).as_posix()
        for m in _FENCE.finditer(text):
            lang, body = m.group(1), m.group(2)
            line = text[:m.start()].count("\n") + 1
            if lang == "python":
                yield rel, line, "python", body
            elif lang in SHELL_LANGS:
                lines = body.splitlines()
                if any(ln.startswith("$ ") for ln in lines):
                    cmd = None
                    for ln in lines + ["$ "]:
                        if ln.startswith("$ "):
                            if cmd is not None:
                                yield rel, line, "shell", (cmd, shown)
                            cmd, shown = ln[2:], []
                        elif cmd is not None:
                            shown.append(ln)
                else:
                    cmd = None
                    for ln in lines + [""]:
                        if cmd is not None and ln.startswith(" ") and not _balanced(cmd):
                            cmd += "\n" + ln  # a quoted argument over several lines
                            continue
                        if cmd is not None:
                            yield rel, line, "shell", (cmd, [])
                        cmd = ln if _COMMAND.match(ln) else None


def _balanced(cmd: str) -> bool:
    import shlex

    try:
        shlex.split(cmd, comments=True)
        return True
    except ValueError:
        return False


EXAMPLES = list(_examples())


def _key(ex) -> str:
    doc, line, kind, text = ex
    return text.splitlines()[0] if kind == "python" else text[0]


def _not_here(ex) -> str | None:
    for (doc, start), why in NOT_HERE.items():
        if ex[0] == doc and _key(ex).startswith(start):
            return why
    return None


def _id(ex) -> str:
    return f"{ex[0]}:{ex[1]}:{_key(ex)[:60]}"


def test_every_not_here_entry_still_names_an_example():
    for (doc, start), why in NOT_HERE.items():
        assert any(e[0] == doc and _key(e).startswith(start) for e in EXAMPLES), \
            f"NOT_HERE names no example any more: {doc}: {start!r} ({why}); remove the entry"


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory):
    """A folder with the names the docs use, made from the samples."""
    d = tmp_path_factory.mktemp("docs")
    for name in ("samples", "examples", "tests", "ktrace", "proto"):
        (d / name).symlink_to(ROOT / name)
    s = ROOT / "samples"

    def pair(src: str, dst: str) -> None:
        shutil.copy(s / f"{src}.bin", d / f"{dst}.bin")
        shutil.copy(s / f"{src}.json", d / f"{dst}.json")

    pair("imbalance", "buf")
    pair("balanced_ktrace", "run")  # the checks the docs list pass on it
    pair("imbalance_ktrace", "before")
    pair("balanced_ktrace", "after")
    pair("imbalance_ktrace", "base_run1")
    pair("imbalance_run2_ktrace", "base_run2")
    pair("balanced_ktrace", "pr_run1")
    pair("balanced_ktrace", "pr_run2")
    words = np.fromfile(s / "imbalance_ktrace.bin", dtype="<u8")
    words[: len(words) // 2].tofile(d / "cut.bin")  # docs/ci.md: a buffer cut to half its records
    shutil.copy(ROOT / "examples" / "ktrace-rules.toml", d / "rules.toml")
    env = _env(d)
    for cmd in (["convert", "run.bin", "-o", "run.perfetto-trace"], ["convert", "after.bin", "-o",
                "after.perfetto-trace"], ["analyze", "run.bin", "--trace", "run.analyzed.perfetto-trace"]):
        p = subprocess.run(["ktrace", *cmd], cwd=d, env=env, capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr
    return d


def _env(d: Path) -> dict:
    return dict(os.environ, GITHUB_STEP_SUMMARY=str(d / "summary.md"), COLUMNS="200", PYTHONPATH=str(ROOT))


def _normal(text: str) -> str:
    text = re.sub(r"[│┃┆┊║┌┐└┘├┤┬┴┼━─┏┓┗┛┣┫┳┻╋┡┩╇╞╡╪╤╧]", " ", text)
    text = re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:PORT", re.sub(r"-L \d+:", "-L PORT:", text))  # any free port
    return re.sub(r"\s+", " ", text).strip()


def _expected_rc(cmd: str, shown: list[str]) -> int:
    """``# exit N`` on the command's line or on a line of its output; else 0."""
    for text in [cmd, *shown]:
        m = re.search(r"#.*\bexit (\d)\b", text)
        if m:
            return int(m.group(1))
    return 0


def _shown_in(shown: list[str], out: str) -> list[str]:
    """The shown lines whose parts are not in ``out`` in order (empty when all match)."""
    hay = _normal(out)
    missing = []
    pos = 0
    for line in shown:
        line = re.sub(r"\s{2,}#.*$", "", line)  # the doc's comment on a line, not output
        if not line.strip() or line.strip() in ("...", "…") or re.fullmatch(r"\s*\(.*\)\s*", line):
            continue  # elided, or the doc's own remark in parentheses
        for part in re.split(r"\s*(?:\.\.\.|…)\s*", _normal(line)):
            if not part:
                continue
            at = hay.find(part, pos)
            if at < 0:
                at = hay.find(part)  # tables may print a column's parts in another order than the doc
            if at < 0:
                missing.append(part)
            else:
                pos = at + len(part)
    return missing


def _run_view(cmd: str, cwd: Path) -> tuple[int, str]:
    """``ktrace view``: serve, read what it prints up to its URL lines, stop it with Ctrl-C."""
    p = subprocess.Popen(["bash", "-c", f"exec {cmd.split('#')[0]} --no-browser"], cwd=cwd, env=_env(cwd),
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         preexec_fn=interruptible)  # Ctrl-C stops it even when the tests run in the background
    lines = []
    try:
        for line in p.stdout:
            lines.append(line)
            if line.startswith("Online instead"):
                break
    finally:
        p.send_signal(signal.SIGINT)
        p.wait(timeout=60)
    return (0 if lines and lines[-1].startswith("Online instead") else 1), "".join(lines)


@pytest.mark.slow
@pytest.mark.parametrize("ex", [e for e in EXAMPLES if e[2] == "shell"], ids=_id)
def test_shell_example_runs_and_prints_what_the_doc_shows(ex, sandbox):
    why = _not_here(ex)
    if why:
        pytest.skip(why)
    cmd, shown = ex[3]
    if cmd.startswith("ktrace view"):
        rc, out = _run_view(cmd, sandbox)
    else:
        p = subprocess.run(["bash", "-c", cmd], cwd=sandbox, env=_env(sandbox), capture_output=True, text=True,
                           timeout=600)
        rc, out = p.returncode, p.stdout + p.stderr
    assert rc == _expected_rc(cmd, shown), f"{_id(ex)}: exit {rc}\n{out[-3000:]}"
    assert "Traceback" not in out
    missing = _shown_in(shown, out)
    assert not missing, f"{_id(ex)}: the doc shows what the command does not print:\n" + "\n".join(missing) + \
        f"\n--- it printed:\n{out[-4000:]}"


@pytest.fixture
def clone(tmp_path):
    """A folder as the root of a fresh clone holds it: the repository's folders, nothing made from them. A
    Python example runs from here as written (docs/api.md says so), on the files in samples/."""
    for name in ("samples", "examples", "tests", "ktrace", "proto", "docs", "scripts"):
        (tmp_path / name).symlink_to(ROOT / name)
    return tmp_path


@pytest.mark.slow
@pytest.mark.parametrize("ex", [e for e in EXAMPLES if e[2] == "python"], ids=_id)
def test_python_example_runs_from_a_fresh_clone(ex, clone):
    why = _not_here(ex)
    if why == "gpu":
        pytest.skip("needs a GPU: tests/gpu runs it on the device")
    if why:
        pytest.skip(why)
    p = subprocess.run([sys.executable, "-c", ex[3]], cwd=clone, env=_env(clone), capture_output=True,
                       text=True, timeout=600)
    assert p.returncode == 0, f"{_id(ex)}:\n{p.stderr[-3000:]}"


def test_the_package_the_readme_copies_to_the_clipboard_is_printed():
    p = subprocess.run(["ktrace", "query", "--print-package"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "CREATE OR REPLACE PERFETTO TABLE ktrace_phase" in p.stdout


def test_help_lists_every_threshold_and_table_the_docs_list():
    from dataclasses import fields

    from ktrace.analysis import Thresholds
    from ktrace.analysis.figures.sql.package import public_tables

    analyze = subprocess.run(["ktrace", "analyze", "--help"], capture_output=True, text=True, env=dict(
        os.environ, COLUMNS="1000")).stdout
    query = subprocess.run(["ktrace", "query", "--help"], capture_output=True, text=True, env=dict(
        os.environ, COLUMNS="1000")).stdout
    schema = (ROOT / "docs" / "analysis-schema.md").read_text() + (ROOT / "docs" / "trace-format.md").read_text()
    for f in fields(Thresholds):
        assert f.name in analyze and f"`{f.name}`" in schema, f.name
    for tables in public_tables().values():
        for t in tables:
            assert t in query and f"`{t}`" in schema, t
