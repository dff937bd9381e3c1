"""The house rules of docs/architecture.md, checked on the code: no module imports a layer above its own, nor
an analysis concern above its own (not even inside a function); imports form no cycle (function-level ones
included); the package root and ktrace/analysis/ hold at most 10 modules each; no module is unreadably long."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "ktrace"

# From the bottom up; a module may import its own layer and those below (docs/architecture.md).
LAYERS = [
    ("ktrace._version", 0), ("ktrace.core", 0), ("ktrace.runtime", 0),
    ("ktrace.decoding", 1),
    ("ktrace.export", 2), ("ktrace.engine", 2), ("ktrace.capture", 2),
    ("ktrace.analysis", 3),
    ("ktrace.report", 4),
    ("ktrace.inputs", 5), ("ktrace.api", 5), ("ktrace.replays", 5), ("ktrace.view", 5),
    ("ktrace.cli", 6), ("ktrace.__main__", 6),
    ("ktrace", 5),  # the package facade (__init__): what `import ktrace` gives
]


# Inside the analysis layer, its concerns from the bottom up (docs/architecture.md): the result tables, the
# dependency model, the figures (numpy and SQL), the replay (the cause model), the findings, the package's Analysis, then diff and CI gates.
ANALYSIS_LAYERS = [
    ("ktrace.analysis.model", 0), ("ktrace.analysis.evidence", 1), ("ktrace.analysis.figures", 2),
    ("ktrace.analysis.replay", 2.5), ("ktrace.analysis.findings", 3), ("ktrace.analysis.compare", 5), ("ktrace.analysis.gates", 6),
    ("ktrace.analysis", 4),  # the package's __init__: Analysis and analyze_opened
]


def _analysis_layer(module: str) -> int:
    for prefix, layer in ANALYSIS_LAYERS:
        if module == prefix or module.startswith(prefix + "."):
            return layer
    raise AssertionError(f"{module}: no analysis layer")


def _layer(module: str) -> int:
    for prefix, layer in LAYERS:
        if module == prefix or module.startswith(prefix + "."):
            return layer
    raise AssertionError(f"{module}: no layer")


def _modules():
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        is_pkg = parts[-1] == "__init__"
        name = ".".join(parts[:-1] if is_pkg else parts)
        yield name, (name if is_pkg else name.rsplit(".", 1)[0]), path


def _statements(tree: ast.Module):
    """Every statement, at any depth (in functions, classes, branches, handlers): an import is a statement, so
    the expressions, most of the tree, need no visit."""
    todo = list(tree.body)
    while todo:
        node = todo.pop()
        yield node
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            todo.extend(x for x in getattr(node, field, ()) if isinstance(x, (ast.stmt, ast.excepthandler,
                                                                                  ast.match_case)))


def _imports(name: str, package: str, tree: ast.Module):
    """(target module, at module level?) for every ktrace import in the module."""
    top = set(map(id, tree.body))
    for node in _statements(tree):
        targets = []
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if node.module is None:  # from . import x: the submodule x
                targets = [f"{mod}.{a.name}" for a in node.names]
            else:
                targets = [mod]
        elif isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        for t in targets:
            if t == "ktrace" or t.startswith("ktrace."):
                yield t, id(node) in top


MODULES = list(_modules())
_IMPORTS: dict = {}


def _imports_of(name: str, package: str, path: Path) -> list:
    """_imports of one module, each module parsed once for every test here (the rules run in the quick lane)."""
    if name not in _IMPORTS:
        _IMPORTS[name] = list(_imports(name, package, ast.parse(path.read_text())))
    return _IMPORTS[name]


def test_no_module_imports_a_layer_above_its_own():
    upward = []
    for name, package, path in MODULES:
        for target, _ in _imports_of(name, package, path):
            if name != "ktrace" and _layer(target) > _layer(name):
                upward.append(f"{name} -> {target}")
            elif (_within(name, "ktrace.analysis") and _within(target, "ktrace.analysis") and name != "ktrace.analysis"
                  and _analysis_layer(target) > _analysis_layer(name)):
                upward.append(f"{name} -> {target}")
    assert upward == []


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_imports_form_no_cycle_function_level_included():
    known = {n for n, _, _ in MODULES}
    graph = {n: set() for n in known}
    for name, package, path in MODULES:
        for target, _ in _imports_of(name, package, path):
            # `from .x import y` of a package's own submodule, or of a name in a package __init__
            while target not in known and "." in target:
                target = target.rsplit(".", 1)[0]
            # A package importing its own submodules (its __init__) is how packages are built, not a cycle.
            if target != name and not target.startswith(name + "."):
                graph[name].add(target)
    index, low, stack, on, cycles = {}, {}, [], set(), []

    def visit(v):  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert cycles == []


@pytest.mark.parametrize("folder", ["", "analysis"])
def test_a_package_top_holds_at_most_10_modules(folder):
    """The package root and ktrace/analysis/ are laid out by concern: their modules live in subpackages."""
    top = sorted(p.name for p in (ROOT / folder).glob("*.py"))
    assert len(top) <= 10, top


@pytest.mark.parametrize("name,path", [(n, p) for n, _, p in MODULES])
def test_modules_stay_readable(name, path):
    """A sanity bound, not a rule to split by: files are cut by responsibility (docs/architecture.md)."""
    assert len(path.read_text().splitlines()) <= 800, name


NO_KIND_KNOWLEDGE = ["analysis/findings/stakes.py", "analysis/findings/margins.py", "analysis/findings/verdicts.py",
                     "analysis/findings/causes.py",
                     "analysis/replay/change.py", "analysis/replay/whatif.py", "analysis/replay/replay.py"]


@pytest.mark.parametrize("rel", NO_KIND_KNOWLEDGE)
def test_the_pipeline_keeps_no_kind_knowledge(rel):
    """The stakes, the margins, the loop over the detectors and the replay name no kind and branch on none: what
    differs by kind is the kind's (its detect, change, checks and link; docs/architecture.md): no kind's constant
    (kinds.TAIL), no kind's name as a string, so no branch on one."""
    import ktrace.analysis.findings.kinds as kinds

    consts = {n for n in kinds.__all__ if n.isupper() and n not in ("KINDS", "LEAD_ORDER")}
    tree = ast.parse((ROOT / rel).read_text())
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in consts:
            bad.append(f"line {node.lineno}: .{node.attr}")
        if isinstance(node, ast.Constant) and node.value in kinds.names():
            bad.append(f"line {node.lineno}: {node.value!r}")
    assert not bad, f"{rel}: {bad}"


def test_a_toy_kind_from_a_temporary_module_is_detected_ranked_replayed_and_drawn(tmp_path, monkeypatch):
    """A new kind is one module and its registry line: registered from a module written here (no other file
    edited), its detector runs in the loop, its verdict is ranked into a finding, its change replayed into its
    stake, and the annotated trace draws it."""
    import importlib
    import sys

    import numpy as np

    import ktrace
    import ktrace.analysis.findings.kinds as kinds

    (tmp_path / "toy_kind.py").write_text('''
from ktrace.analysis.findings.kinds.base import Kind, KindFigures, claim_words, fixed_rank, no_roles, no_span
from ktrace.analysis.findings.verdict import Verdict
from ktrace.analysis.replay.change import Change
from ktrace.core.records import frozen

NAME = "toy_slow_phase"


@frozen(kw_only=True)
class ToyFigures(KindFigures):
    mean_dur_ns: float


def detect(ctx, scope):
    if scope.phase is None or scope.phase["phase"] != "compute":
        return []
    p = scope.phase
    claims = ctx.claim_phase("compute", 0.5)
    return [Verdict(NAME, "compute", "compute: half of it could go", "toy", float(claims.sum()), True,
                    ToyFigures(mean_dur_ns=float(p["mean_dur_ns"])), claims, None)]


def change(v):
    return Change(speedup=(("compute", 2.0),))


def headline(f, v):
    return "compute could take half as long", "make it twice as fast"


KIND = Kind(NAME, "a toy", (ToyFigures,), 20, fixed_rank, claim_words, headline, no_span, no_roles, None,
            change=change, detect=detect)
''')
    monkeypatch.syspath_prepend(str(tmp_path))
    toy = importlib.import_module("toy_kind")
    monkeypatch.setattr(kinds, "KINDS", kinds.KINDS + (toy.KIND,))
    monkeypatch.setitem(kinds._BY_NAME, toy.NAME, toy.KIND)
    try:
        src = Path(__file__).resolve().parents[1] / "samples" / "imbalance_ktrace.bin"
        a = ktrace.analyze(ktrace.decode(src))
        mine = [f for f in a.findings if f.kind == toy.NAME]
        assert len(mine) == 1
        f = mine[0]
        assert f.change == toy.change(None) and f.figures["replayed_saving_ns"] > 0  # replayed
        assert f.impact_ns <= f.figures["replayed_saving_ns"]
        assert f.severity in ("warning", "info") and f.figures["mean_dur_ns"] > 0  # ranked into the findings
        w = ktrace.whatif(src, f.change)
        assert w.saving_ns == f.figures["replayed_saving_ns"]
        from ktrace.report.trace_annotations import finding_label, finding_span  # drawn
        b, e = finding_span(f, a.figures)
        assert a.figures.kernel.begin_ns <= b < e <= a.figures.kernel.end_ns
        assert "toy slow phase · compute" in finding_label(f)
        assert np.isfinite(f.impact_ns)
    finally:
        sys.modules.pop("toy_kind", None)
