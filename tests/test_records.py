"""ktrace.core.records.frozen against the standard ``dataclass(frozen=True)``: the same class built both ways
behaves the same (construction, defaults, errors, repr, ==, hash, frozenness, signature, fields/replace/asdict,
pickling), and every frozen() class of the package has the signature, __match_args__ and doc the standard
decorator gives it (built with $KTRACE_STDLIB_DATACLASSES=1 in another process)."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import json
import pickle
import subprocess
import sys
import typing
from dataclasses import field

import pytest

from ktrace.core.records import STDLIB_ENV, frozen, is_frozen

# The class bodies each test builds twice: once with frozen(), once with the standard decorator.
BODIES = {
    "plain": ('"""A record."""\n    a: int\n    b: float = 1.5\n    c: tuple = ()\n', {}),
    "factory": ("a: int\n    items: list = field(default_factory=list)\n    name: str = 'x'\n", {}),
    "kw_only": ('"""kw."""\n    a: int\n    b: int = 2\n    made: dict = field(default_factory=dict)\n',
                {"kw_only": True}),
    "no_repr_field": ("a: int\n    secret: str = field(default='s', repr=False)\n"
                      "    ignored: int = field(default=0, compare=False)\n", {}),
    "init_false": ("a: int\n    later: list = field(default_factory=list, init=False)\n"
                   "    fixed: int = field(default=7, init=False)\n", {}),
    "classvar": ("TABLE: ClassVar[str] = 't'\n    a: int = 0\n", {}),
    "eq_false": ("a: int\n    b: int = 0\n", {"eq": False}),
    "repr_false": ("a: int\n", {"repr": False}),
    "empty": ('"""Nothing."""\n', {}),
    "mixed_kw": ("a: int\n    b: int = field(default=1, kw_only=True)\n    c: int = 3\n", {}),
}


def _build(name: str, standard: bool):
    body, kw = BODIES[name]
    src = f"class R_{name}:\n    {body}"
    ns = {"field": field, "ClassVar": typing.ClassVar, "__name__": __name__}
    exec(src, ns)  # noqa: S102 - the test's own class bodies
    cls = ns[f"R_{name}"]
    return dataclasses.dataclass(cls, frozen=True, **kw) if standard else frozen(**kw)(cls)


CALLS = {  # (args, kwargs) to try on each class: good and bad ones
    "plain": [((1,), {}), ((1, 2.0, (3,)), {}), ((), {"a": 1, "c": (1,)}), ((), {}), ((1, 2, 3, 4), {}),
              ((1,), {"a": 2}), ((1,), {"zz": 1})],
    "factory": [((1,), {}), ((1, [2]), {}), ((), {"a": 1, "name": "y"}), ((), {"items": []})],
    "kw_only": [((), {"a": 1}), ((1,), {}), ((), {"a": 1, "b": 3, "made": {"k": 1}}), ((), {"b": 1})],
    "no_repr_field": [((1,), {}), ((1, "t", 9), {})],
    "init_false": [((1,), {}), ((), {"a": 1, "later": [1]}), ((1, 2), {})],
    "classvar": [((), {}), ((5,), {}), ((), {"TABLE": "x"})],
    "eq_false": [((1,), {}), ((1, 2), {})],
    "repr_false": [((1,), {})],
    "empty": [((), {}), ((1,), {})],
    "mixed_kw": [((1,), {}), ((1, 4), {}), ((1,), {"b": 2, "c": 5}), ((1, 2, 3), {})],
}


def _outcome(cls, args, kwargs):
    try:
        obj = cls(*args, **kwargs)
    except TypeError:
        return "TypeError", None
    return "ok", obj


@pytest.mark.parametrize("name", sorted(BODIES))
def test_same_behaviour_as_the_standard_decorator(name):
    ours, theirs = _build(name, False), _build(name, True)
    assert str(inspect.signature(ours)) == str(inspect.signature(theirs))
    assert ours.__doc__.replace("R_", "") == theirs.__doc__.replace("R_", "")
    assert ours.__match_args__ == theirs.__match_args__
    assert [(f.name, f.init, f.repr, f.compare, f.kw_only) for f in dataclasses.fields(ours)] == \
        [(f.name, f.init, f.repr, f.compare, f.kw_only) for f in dataclasses.fields(theirs)]
    for args, kwargs in CALLS[name]:
        (got, a), (want, b) = _outcome(ours, args, kwargs), _outcome(theirs, args, kwargs)
        assert got == want, (name, args, kwargs)
        if a is None:
            continue
        assert repr(a) == repr(b).replace(object.__repr__(b).split(" object at ")[-1],
                                          object.__repr__(a).split(" object at ")[-1])
        assert vars(a) == vars(b) and list(vars(a)) == list(vars(b))
        assert dataclasses.asdict(a) == dataclasses.asdict(b)
        twin = ours(*args, **kwargs)
        assert (a == twin) == (b == theirs(*args, **kwargs))
        assert (a == object()) is False and (a != twin) == (b != theirs(*args, **kwargs))
        if ours.__hash__ is not None and all(isinstance(v, typing.Hashable) for v in vars(a).values()):
            assert (hash(a) == hash(twin)) == (hash(b) == hash(theirs(*args, **kwargs)))
        for f in dataclasses.fields(ours):
            with pytest.raises(dataclasses.FrozenInstanceError, match=f"cannot assign to field '{f.name}'"):
                setattr(a, f.name, 1)
            with pytest.raises(dataclasses.FrozenInstanceError, match=f"cannot delete field '{f.name}'"):
                delattr(a, f.name)
        with pytest.raises(dataclasses.FrozenInstanceError):
            a.not_a_field = 1
        assert copy.deepcopy(a).__dict__ == a.__dict__


def test_default_factories_run_for_each_instance():
    cls = _build("factory", False)
    x, y = cls(1), cls(2)
    x.items.append(1)
    assert y.items == [] and x.items == [1]


def test_equal_records_hash_alike_and_differ_by_field():
    cls = _build("plain", False)
    assert cls(1, 2.0) == cls(1, 2.0) and hash(cls(1, 2.0)) == hash(cls(1, 2.0))
    assert cls(1, 2.0) != cls(1, 3.0)
    assert len({cls(1), cls(1), cls(2)}) == 2
    c = _build("no_repr_field", False)
    assert c(1, "s", 1) == c(1, "s", 2)  # compare=False is left out of == and hash
    assert c(1, "s", 1) != c(1, "t", 1)


def test_replace_and_pickle():
    cls = _build("kw_only", False)
    globals()[cls.__qualname__] = cls  # pickled by name, as a module-level class is
    try:
        x = cls(a=1, made={"k": [1]})
        y = dataclasses.replace(x, b=9)
        assert (y.a, y.b, y.made) == (1, 9, {"k": [1]})
        assert pickle.loads(pickle.dumps(y)) == y
        with pytest.raises(TypeError):
            dataclasses.replace(x, nope=1)
    finally:
        del globals()[cls.__qualname__]


def test_inheritance_adds_fields_after_the_base():
    @frozen(kw_only=True)
    class Base:
        a: int
        b: int = 1

    @frozen(kw_only=True)
    class Child(Base):
        c: int = 2

    x = Child(a=0, c=5)
    assert (x.a, x.b, x.c) == (0, 1, 5)
    assert repr(x).endswith("Child(a=0, b=1, c=5)")
    assert str(inspect.signature(Child)) == "(*, a: 'int', b: 'int' = 1, c: 'int' = 2) -> None"
    assert x != Base(a=0)  # another class never compares equal, as the standard __eq__


def test_what_it_does_not_support_is_refused():
    class WithPostInit:
        a: int

        def __post_init__(self):
            pass

    with pytest.raises(TypeError, match="__post_init__"):
        frozen(WithPostInit)

    @dataclasses.dataclass(frozen=True)
    class Standard:
        a: int

    class Derived(Standard):
        b: int = 0

    with pytest.raises(TypeError, match="derives only from other frozen"):
        frozen(Derived)
    assert is_frozen(_build("plain", False)) and is_frozen(_build("plain", True)) and not is_frozen(WithPostInit)
    with pytest.raises(TypeError, match="non-default argument 'b'"):
        exec("class Bad:\n    a: int = 0\n    b: int\n", ns := {})  # noqa: S102
        frozen(ns["Bad"])


_DESCRIBE = r"""
import dataclasses, importlib, inspect, json, pkgutil, re, sys
import ktrace
out = {}
for m in sorted(pkgutil.walk_packages(ktrace.__path__, "ktrace."), key=lambda m: m.name):
    if m.name.endswith("__main__"):
        continue
    mod = importlib.import_module(m.name)
    for name, cls in sorted(vars(mod).items()):
        if isinstance(cls, type) and cls.__module__ == m.name and "_built_by_frozen" in cls.__dict__ \
                or isinstance(cls, type) and cls.__module__ == m.name and getattr(
                    cls.__dict__.get("__dataclass_params__"), "frozen", False):
            # a default that is a function reads by its address, another in each process: compared without it
            out[f"{m.name}.{name}"] = [re.sub(r" at 0x[0-9a-f]+", "", str(inspect.signature(cls))), list(getattr(cls, "__match_args__", ())),
                                       cls.__doc__, [f.name for f in dataclasses.fields(cls)],
                                       cls.__hash__ is None]
json.dump(out, sys.stdout)
"""


@pytest.mark.slow
def test_every_class_of_the_package_matches_the_standard_decorator():
    def describe(standard: bool) -> dict:
        env = {STDLIB_ENV: "1"} if standard else {}
        import os

        p = subprocess.run([sys.executable, "-c", _DESCRIBE], capture_output=True, text=True, check=True,
                           env={**os.environ, **env, STDLIB_ENV: "1" if standard else "0"})
        return json.loads(p.stdout)

    ours, theirs = describe(False), describe(True)
    assert len(ours) >= 60 and sorted(ours) == sorted(theirs)
    assert {k: v for k, v in ours.items() if v != theirs[k]} == {}
