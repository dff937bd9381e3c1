"""The house rules of docs/architecture.md, checked on the code: no module imports a layer above its own
(not even inside a function), module-level imports form no cycle, and no module is over 800 lines (a sanity bound: files are split by responsibility, not by length)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import ktrace

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


def _imports(name: str, package: str, tree: ast.Module):
    """(target module, at module level?) for every ktrace import in the module."""
    top = set(map(id, tree.body))
    for node in ast.walk(tree):
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


@pytest.mark.slow
def test_no_module_imports_a_layer_above_its_own():
    upward = []
    for name, package, path in MODULES:
        for target, _ in _imports(name, package, ast.parse(path.read_text())):
            if name != "ktrace" and _layer(target) > _layer(name):
                upward.append(f"{name} -> {target}")
    assert upward == []


@pytest.mark.slow
def test_module_level_imports_form_no_cycle():
    known = {n for n, _, _ in MODULES}
    graph = {n: set() for n in known}
    for name, package, path in MODULES:
        for target, top in _imports(name, package, ast.parse(path.read_text())):
            # `from .x import y` of a package's own submodule, or of a name in a package __init__
            while target not in known and "." in target:
                target = target.rsplit(".", 1)[0]
            # A package importing its own submodules (its __init__) is how packages are built, not a cycle.
            if top and target != name and not target.startswith(name + "."):
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


@pytest.mark.parametrize("name,path", [(n, p) for n, _, p in MODULES])
def test_modules_stay_readable_in_one_sitting(name, path):
    assert len(path.read_text().splitlines()) <= 800, name


def test_the_package_root_and_the_analysis_hold_at_most_10_modules_each():
    """The layout is by concern: a new module goes into the subpackage of its concern (core/, runtime/,
    analysis/{model,figures,evidence,findings,compare,gates}/), not beside the others at the top."""
    root = Path(ktrace.__file__).parent
    for folder in (root, root / "analysis"):
        modules = sorted(p.name for p in folder.glob("*.py"))
        assert len(modules) <= 10, (folder, modules)
