"""``frozen``: ``dataclasses.dataclass(frozen=True)`` whose methods are not compiled per class.

Why: the standard decorator writes each class's ``__init__``, ``__repr__``, ``__eq__``, ``__hash__``,
``__setattr__`` and ``__delattr__`` as source and compiles it, about 0.8 ms a class on this project's
machines: the ~70 classes ``ktrace analyze`` creates at import were a sixth of its start (issue "the first
screen"). ``frozen`` lets the standard decorator read the fields (ClassVar, defaults, ``field()``, kw_only: so
``fields()``, ``asdict()``, ``replace()`` and ``__match_args__`` are the standard ones) and gives the class the
same six methods as closures over its fields, built without compiling anything; ``__signature__`` is the
standard ``__init__``'s. tests/test_records.py holds them to the standard methods' behaviour. What the
project does not use (``__post_init__``, ``InitVar``, ``order``, ``unsafe_hash``, ``slots``, a ``__setattr__``
of its own) is refused when the class is made, never half supported. ``$KTRACE_STDLIB_DATACLASSES=1`` builds every class with the standard
decorator instead (a comparison; the outputs are the same)."""

from __future__ import annotations

import dataclasses
import inspect
import os
from dataclasses import MISSING

__all__ = ["frozen", "is_frozen", "STDLIB_ENV"]

STDLIB_ENV = "KTRACE_STDLIB_DATACLASSES"
_STDLIB = os.environ.get(STDLIB_ENV) == "1"
_MARK = "_built_by_frozen"  # set on each class frozen() builds: its bases must be such classes too


def frozen(cls=None, /, *, eq: bool = True, repr: bool = True, kw_only: bool = False):  # noqa: A002 - dataclass' names
    """``@frozen`` or ``@frozen(kw_only=True)``: as ``@dataclass(frozen=True, ...)``."""

    def wrap(c):
        if _STDLIB:
            return dataclasses.dataclass(c, frozen=True, eq=eq, repr=repr, kw_only=kw_only)
        return _build(c, eq, repr, kw_only)

    return wrap if cls is None else wrap(cls)


def is_frozen(cls) -> bool:
    """Whether ``cls`` is a frozen dataclass: built by ``frozen`` (whose ``__dataclass_params__`` reads
    ``frozen=False``: the standard decorator read its fields without writing its methods) or by the standard
    ``dataclass(frozen=True)``."""
    return dataclasses.is_dataclass(cls) and bool(cls.__dict__.get(_MARK) or cls.__dataclass_params__.frozen)


class _Factory:
    """The default shown for a field made by a default factory (as the standard signature shows it)."""

    def __repr__(self):
        return "<factory>"


_FACTORY = _Factory()


def _build(cls, eq: bool, repr_: bool, kw_only: bool):
    own = cls.__dict__
    for name in ("__post_init__", "__setattr__", "__delattr__"):
        if name in own:
            raise TypeError(f"{cls.__qualname__}: frozen() takes no {name}; use dataclasses.dataclass")
    if any("InitVar" in str(t) for t in own.get("__annotations__", {}).values()):
        raise TypeError(f"{cls.__qualname__}: frozen() does not take InitVar fields")
    for base in cls.__mro__[1:]:
        if "__dataclass_fields__" in base.__dict__ and not base.__dict__.get(_MARK):
            raise TypeError(f"{cls.__qualname__}: a frozen() class derives only from other frozen() classes "
                            f"({base.__qualname__} is not one)")
    had_doc = bool(own.get("__doc__"))
    hash_ = own.get("__hash__", MISSING)  # as the standard decorator: a __hash__ the class sets (None too) is kept
    keep_hash = not (hash_ is MISSING or (hash_ is None and "__eq__" in own))
    # The standard decorator reads the fields and sets __dataclass_fields__, __match_args__ and the class-level
    # defaults; asked for no method, it compiles nothing. A class without a docstring is given one for the
    # moment: else the decorator writes one from inspect.signature(cls) (~0.07 ms a class, ~4 ms of analyze's
    # start), which the one below, from the signature built here, replaces anyway.
    if not had_doc:
        cls.__doc__ = cls.__name__
    dataclasses.dataclass(cls, init=False, repr=False, eq=False, kw_only=kw_only)
    setattr(cls, _MARK, True)
    fields = dataclasses.fields(cls)
    if "__init__" not in own:  # as the standard decorator, a method the class writes itself is kept
        cls.__init__ = _init(cls, fields)
        cls.__signature__ = _signature(fields)
    if repr_ and "__repr__" not in own:
        cls.__repr__ = _repr(cls, tuple(f.name for f in fields if f.repr))
    if eq:
        if "__eq__" not in own:
            cls.__eq__ = _eq(cls, tuple(f.name for f in fields if f.compare))
        if not keep_hash:
            cls.__hash__ = _hash(cls, tuple(f.name for f in fields if (f.compare if f.hash is None else f.hash)))
    names = frozenset(f.name for f in fields)
    cls.__setattr__, cls.__delattr__ = _setattr(cls, names), _delattr(cls, names)
    if not had_doc:  # as the standard decorator: the class's signature
        cls.__doc__ = cls.__name__ + str(cls.__signature__).replace(" -> None", "")
    return cls


def _named(cls, fn, name: str):
    fn.__name__, fn.__qualname__, fn.__module__ = name, f"{cls.__qualname__}.{name}", cls.__module__
    return fn


def _init(cls, fields):
    """__init__ binding its arguments as the standard one's signature does (positional fields in order, then
    keywords; the kw_only fields by keyword alone), default factories called for each instance."""
    positional = tuple(f.name for f in fields if f.init and not f.kw_only)
    accepted = frozenset(f.name for f in fields if f.init)
    steps = []  # (name, default or MISSING, factory or MISSING, init): in field order
    for f in fields:
        if f.init or f.default_factory is not MISSING:
            steps.append((f.name, f.default, f.default_factory, f.init))
    steps = tuple(steps)
    where = f"{cls.__qualname__}.__init__()"

    def __init__(self, *args, **kwargs):
        if len(args) > len(positional):
            raise TypeError(f"{where} takes {len(positional) + 1} positional arguments but {len(args) + 1} were "
                            "given")
        given = dict(zip(positional, args))
        for k, v in kwargs.items():
            if k not in accepted:
                raise TypeError(f"{where} got an unexpected keyword argument {k!r}")
            if k in given:
                raise TypeError(f"{where} got multiple values for argument {k!r}")
            given[k] = v
        state = self.__dict__
        missing = []
        for name, default, factory, init in steps:
            if init and name in given:
                state[name] = given[name]
            elif default is not MISSING:
                state[name] = default
            elif factory is not MISSING:
                state[name] = factory()
            else:
                missing.append(name)
        if missing:
            raise TypeError(f"{where} missing {len(missing)} required argument{'s' * (len(missing) > 1)}: "
                            + ", ".join(map(repr, missing)))

    return _named(cls, __init__, "__init__")


def _signature(fields) -> inspect.Signature:
    P = inspect.Parameter
    params = []
    after_default = False
    for f in fields:
        if f.init and not f.kw_only:
            has_default = f.default is not MISSING or f.default_factory is not MISSING
            if after_default and not has_default:
                raise TypeError(f"non-default argument {f.name!r} follows default argument")
            after_default = after_default or has_default
    for kw in (False, True):
        for f in fields:
            if f.init and f.kw_only == kw:
                default = f.default if f.default is not MISSING else (
                    _FACTORY if f.default_factory is not MISSING else P.empty)
                params.append(P(f.name, P.KEYWORD_ONLY if kw else P.POSITIONAL_OR_KEYWORD, default=default,
                                annotation=f.type))
    return inspect.Signature(params, return_annotation=None)


def _repr(cls, shown: tuple[str, ...]):
    def __repr__(self):
        return self.__class__.__qualname__ + "(" + ", ".join(f"{n}={getattr(self, n)!r}" for n in shown) + ")"

    return _named(cls, __repr__, "__repr__")


def _eq(cls, compared: tuple[str, ...]):
    def __eq__(self, other):
        if other.__class__ is self.__class__:
            return tuple(getattr(self, n) for n in compared) == tuple(getattr(other, n) for n in compared)
        return NotImplemented

    return _named(cls, __eq__, "__eq__")


def _hash(cls, hashed: tuple[str, ...]):
    def __hash__(self):
        return hash(tuple(getattr(self, n) for n in hashed))

    return _named(cls, __hash__, "__hash__")


def _setattr(cls, names: frozenset):
    def __setattr__(self, name, value):
        if type(self) is cls or name in names:
            raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")
        super(cls, self).__setattr__(name, value)

    return _named(cls, __setattr__, "__setattr__")


def _delattr(cls, names: frozenset):
    def __delattr__(self, name):
        if type(self) is cls or name in names:
            raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")
        super(cls, self).__delattr__(name)

    return _named(cls, __delattr__, "__delattr__")
