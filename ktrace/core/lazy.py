"""A package's public names imported on first use (PEP 562), one definition for every lazy package.

    __getattr__, __dir__ = lazy_names(__name__, {"analyze": "api"}, lambda: __all__, globals())
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Callable

__all__ = ["lazy_names", "text_renderer", "text_of"]

# What ``str()`` of a result gives, by its class name: registered by the package facade (ktrace/__init__.py), so
# that a result class (analysis, layer 3) prints its report (report, layer 4) without importing a layer above.
_TEXT: dict[str, Callable[[object], str]] = {}


def text_renderer(kind: str, render: Callable[[object], str]) -> None:
    """Make ``str(x)`` of a result of class ``kind`` be ``render(x)``."""
    _TEXT[kind] = render


def text_of(obj) -> str:
    """The text ``str(obj)`` gives: its registered renderer's, else ``repr(obj)``."""
    render = _TEXT.get(type(obj).__name__)
    return render(obj) if render is not None else repr(obj)


def lazy_names(package: str, names: dict[str, str], public: Callable[[], list], space: dict):
    """(``__getattr__``, ``__dir__``) for the package: a name of ``names`` (name -> submodule) comes from that
    submodule, any other submodule by its own name, as an eager package gave them; each is kept in the
    package's namespace ``space`` once imported."""
    def __getattr__(name: str):
        if name in names:
            value = getattr(importlib.import_module(f"{package}.{names[name]}"), name)
        elif not name.startswith("__") and importlib.util.find_spec(f"{package}.{name}") is not None:
            value = importlib.import_module(f"{package}.{name}")
        else:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        space[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(space) | set(public()))

    return __getattr__, __dir__
