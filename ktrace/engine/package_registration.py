"""PerfettoSQL packages: checking them, and running them on an engine that cannot register them.

An engine that knows TPM_REGISTER_SQL_PACKAGE (the v52 WebAssembly build does, and so does a recent
trace_processor_shell) keeps the modules and runs each on its first ``INCLUDE PERFETTO MODULE``. For an
older engine the Session falls back to this module: it runs every module's SQL once, dependencies
first (with the INCLUDE lines of its own package removed), and from then on strips ``INCLUDE PERFETTO
MODULE`` lines naming that package's modules from queries.
"""

from __future__ import annotations

import re

from ktrace.core.errors import InputError

__all__ = ["check_package", "dependency_order", "strip_includes"]

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\Z")
_INCLUDE = re.compile(r"(?<![\w.])INCLUDE\s+PERFETTO\s+MODULE\s+([\w.*]+)\s*;", re.IGNORECASE)


def check_package(name: str, modules: dict[str, str]) -> None:
    """Raises InputError unless ``name`` is a dotted identifier and every module is ``name`` or below it."""
    if not _NAME.match(name or ""):
        raise InputError(f"SQL package name {name!r} is not a dotted identifier like 'ktrace'")
    if not modules:
        raise InputError(f"SQL package {name!r} has no modules")
    for module in modules:
        if not _NAME.match(module) or not (module == name or module.startswith(name + ".")):
            raise InputError(f"SQL module {module!r} is not inside package {name!r} "
                             f"(its name should start with '{name}.')")


def dependency_order(modules: dict[str, str]) -> list[str]:
    """Module names ordered so that each comes after the modules of this package it INCLUDEs."""
    order: list[str] = []
    state: dict[str, str] = {}

    def visit(module: str, chain: tuple[str, ...]) -> None:
        if state.get(module) == "done":
            return
        if state.get(module) == "visiting":
            raise InputError(f"SQL modules include each other in a cycle: {' -> '.join(chain + (module,))}")
        state[module] = "visiting"
        for included in _INCLUDE.findall(modules[module]):
            for dependency in _matching(included, modules):
                visit(dependency, chain + (module,))
        state[module] = "done"
        order.append(module)

    for module in modules:
        visit(module, ())
    return order


def strip_includes(sql: str, packages: set[str]) -> str:
    """``sql`` without the INCLUDE PERFETTO MODULE lines naming a module (or wildcard) inside ``packages``."""
    def inside(target: str) -> bool:
        return any(target == p or target.startswith(p + ".") for p in packages)

    return _INCLUDE.sub(lambda m: "" if inside(m.group(1)) else m.group(0), sql)


def _matching(pattern: str, modules: dict[str, str]) -> list[str]:
    # INCLUDE takes a module name or a wildcard ending in '.*' (every module below that prefix).
    if pattern.endswith(".*"):
        return [m for m in modules if m.startswith(pattern[:-1])]
    return [pattern] if pattern in modules else []
