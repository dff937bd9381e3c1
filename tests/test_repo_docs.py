"""What the repository says about itself stays true: the captures samples/kernels/README.md lists are committed,
and CI installs only what the tests need (no system upgrade)."""

from __future__ import annotations

import re

from conftest import ROOT

KERNELS_README = ROOT / "samples" / "kernels" / "README.md"


def test_every_capture_the_drivers_table_lists_is_in_samples():
    rows = [line for line in KERNELS_README.read_text().splitlines() if line.startswith("| `") and ".py`" in line]
    assert len(rows) >= 15
    for row in rows:
        last = row.rstrip(" |").split(" | ")[-1]
        assert "not yet" not in last, row[:80]
        for stem in re.findall(r"`(\w+)_\*`", last):
            assert sorted((ROOT / "samples").glob(f"{stem}_*")), f"{stem}_*: listed, not in samples/"


def test_ci_installs_chromium_alone_and_upgrades_nothing():
    script = (ROOT / ".ci" / "run").read_text()
    apt = [line for line in script.splitlines() if "apt-get" in line and not line.lstrip().startswith("#")]
    assert apt
    assert not re.search(r"apt-get\s+(-\S+\s+)*(dist-|full-)?upgrade\b", script)
    install = re.search(r"apt-get install ([^)\n]*)", script).group(1).split()
    assert "--no-upgrade" in install and "--no-install-recommends" in install and install[-1] == "chromium"


DOCS = [ROOT / "README.md", ROOT / "LICENSE", *sorted((ROOT / "docs").glob("*.md"))]
# A path in the repository (not proto/ktrace/..., ~/.config/ktrace/...: a slash or a dot before it).
_PATH = re.compile(r"(?<![\w/.~$-])ktrace/[\w/.*-]*[\w*/]")
# A dotted name under one of the package's modules (not a schema name such as ktrace.analysis/2).
_DOTTED = re.compile(r"(?<![\w/.])ktrace(?:\.[A-Za-z_]\w*)+(?![\w/])")


def _repo_files() -> list[str]:
    return [p.relative_to(ROOT).as_posix() for top in ("ktrace", "proto", "scripts", "tests", "examples", "samples")
            for p in (ROOT / top).rglob("*") if "__pycache__" not in p.parts]


def test_every_module_path_the_docs_name_exists():
    from fnmatch import fnmatch

    files = _repo_files()
    stale = []
    for doc in DOCS[:1] + DOCS[2:]:
        for m in _PATH.finditer(doc.read_text(encoding="utf-8")):
            path = m.group(0).rstrip("/")
            if (ROOT / path).exists() or any(fnmatch(f, path) or fnmatch(f, f"*/{path}") for f in files):
                continue
            stale.append(f"{doc.relative_to(ROOT)}: {m.group(0)}")
    assert not stale, "paths the docs name that are not in the repository:\n" + "\n".join(stale)


def test_every_dotted_module_the_docs_name_resolves():
    import importlib
    import warnings

    import ktrace

    warnings.simplefilter("ignore", DeprecationWarning)  # a deprecated alias still resolves
    stale = []
    for doc in DOCS[:1] + DOCS[2:]:
        for m in _DOTTED.finditer(doc.read_text(encoding="utf-8")):
            parts = m.group(0).split(".")
            first = ROOT / "ktrace" / parts[1]
            if not (first.is_dir() or first.with_suffix(".py").exists()):
                continue  # an SQL module (ktrace.phases), an arg (ktrace.role): not a Python name
            obj, name = ktrace, "ktrace"
            for part in parts[1:]:
                name += "." + part
                if hasattr(obj, part) and not isinstance(getattr(obj, part), type(ktrace)):
                    obj = getattr(obj, part)
                    continue
                try:
                    obj = importlib.import_module(name)
                except ModuleNotFoundError:
                    if not hasattr(obj, part):
                        stale.append(f"{doc.relative_to(ROOT)}: {m.group(0)} ({name} does not exist)")
                        break
                    obj = getattr(obj, part)
    assert not stale, "dotted names the docs give that do not resolve:\n" + "\n".join(stale)


def test_no_stray_file_at_the_root_and_the_license_is_apache():
    import subprocess

    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True).stdout.splitlines()
    if tracked:  # a git checkout
        root_files = sorted(f for f in tracked if "/" not in f)
        assert root_files == [".gitignore", "LICENSE", "README.md", "pyproject.toml"], root_files
    text = (ROOT / "LICENSE").read_text()
    assert text.lstrip().startswith("Apache License\n") and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text and len(text) > 11_000


def test_every_test_the_slow_list_names_exists():
    listed = [line.strip() for line in (ROOT / "tests" / "slow_tests.txt").read_text().splitlines()
              if line.strip() and not line.startswith("#")]
    for node in listed:
        path, _, name = node.partition("::")
        function = name.split("[")[0]
        assert (ROOT / path).exists() and f"def {function}(" in (ROOT / path).read_text(), f"no test {node}"
