"""Passes and the pass registry.

A pass is a small frozen attrs class with a kebab-case ``name``, its options as fields (each with
a default), a docstring with a before/after example, and ``run(module) -> bool`` (whether it
changed the module)::

    @register_pass
    @attrs.frozen
    class Canonicalize(Pass):
        '''Apply the canonicalization patterns to a fixpoint.

        Before:
            ...IR...
        After:
            ...IR...
        '''
        name = "canonicalize"
        max_iterations: int = 10

        def run(self, module) -> bool: ...

``@register_pass`` checks the declaration; the registry is a table, not an import side effect:
this package never imports a pass module. :func:`ptxc.rewrite.passes.all_passes` and
:func:`ptxc.lower.lowering_passes` list the passes, ``ptxc/__init__.py`` installs them with
:func:`install_pass_table`, and the first :func:`get_pass` or :func:`registered_passes` calls
them. :func:`add_pass` registers a pass at run time (tests, passes outside ptxc).

Option fields are snake_case in Python and kebab-case in pipeline text:
``canonicalize{max-iterations=4}`` is ``get_pass("canonicalize", max_iterations=4)``. Being
frozen, a pass is hashable and its options can key a cache.

The example in the docstring is a ``Before:`` line and an ``After:`` line, each followed by an
indented block of IR. When both blocks are whole modules (they start with ``"builtin.module"``)
the test suite parses "before", runs the pass with default options and expects to print "after"
exactly; see :func:`docstring_example`. A pass whose default options change nothing (a schedule
pass that acts only where asked, ``cpu-schedule``) names the options of its example on a line
``Options: <pipeline option text>`` before ``Before:``; the test runs :func:`example_pass`, the
pass with those options.
"""

from __future__ import annotations

import difflib
import inspect
import re
import textwrap
import typing
from typing import Callable, ClassVar, Mapping

import attrs
from attrs.exceptions import FrozenInstanceError

from ..errors import CompileError
from ..ir.core import Operation

_KEBAB = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")


@attrs.frozen
class Pass:
    """Base of passes; see the module docstring."""

    name: ClassVar[str] = ""

    def run(self, module: Operation) -> bool:
        """Transform ``module`` in place; return whether it changed."""
        raise NotImplementedError(f"{type(self).__name__}.run")

    def options(self) -> dict:
        """Option values by kebab-case name."""
        return {f.name.replace("_", "-"): getattr(self, f.name) for f in attrs.fields(type(self))}

    def __str__(self) -> str:
        """The pass as pipeline text: its name and the options that differ from their defaults."""
        opts = []
        for f in attrs.fields(type(self)):
            v = getattr(self, f.name)
            default = f.default.factory() if isinstance(f.default, attrs.Factory) else f.default
            if default is attrs.NOTHING or v != default:
                opts.append(f"{f.name.replace('_', '-')}={format_option(v)}")
        return self.name + ("{" + " ".join(opts) + "}" if opts else "")

    @classmethod
    def summary(cls) -> str:
        """The first line of the docstring."""
        return (inspect.getdoc(cls) or "").split("\n", 1)[0]


#: the registry: every pass class by name, filled from the installed tables on first use
_PASSES: dict[str, type[Pass]] = {}
#: the installed tables: functions returning {name: pass class} (ptxc/__init__.py installs
#: ptxc.rewrite.passes.all_passes and ptxc.lower.lowering_passes)
_tables: tuple[Callable[[], Mapping[str, type[Pass]]], ...] = ()
_state = "empty"  # -> "loading" -> "loaded"


def register_pass(cls: type[Pass]) -> type[Pass]:
    """Check a pass declaration (a decorator, applied above ``@attrs.frozen``): a ``Pass``
    subclass with a kebab-case ``name``, frozen attrs, every option with a default. It does not
    register the class: the pass tables list it (:func:`ptxc.rewrite.passes.all_passes`,
    :func:`ptxc.lower.lowering_passes`), and :func:`add_pass` adds one at run time."""
    if not (isinstance(cls, type) and issubclass(cls, Pass)):
        raise TypeError(f"{cls!r} is not a Pass subclass")
    name = cls.__dict__.get("name", "")
    if not isinstance(name, str) or not _KEBAB.match(name):
        raise ValueError(f"{cls.__name__}: pass name must be kebab-case, got {name!r}")
    if not attrs.has(cls) or "__attrs_attrs__" not in cls.__dict__:
        raise TypeError(f"{cls.__name__}: a pass must be an @attrs.frozen class")
    attrs.resolve_types(cls)
    for f in attrs.fields(cls):
        if f.default is attrs.NOTHING:
            raise TypeError(f"{cls.__name__}: option {f.name} needs a default")
    try:
        setattr(cls(), "_probe", 1)
    except FrozenInstanceError:
        pass
    except AttributeError:
        raise TypeError(f"{cls.__name__}: a pass must be frozen (@attrs.frozen)") from None
    else:
        raise TypeError(f"{cls.__name__}: a pass must be frozen (@attrs.frozen)")
    cls._declared_pass = True
    return cls


def install_pass_table(*tables: Callable[[], Mapping[str, type[Pass]]]) -> None:
    """Give the registry its tables (each a function returning ``{name: pass class}``); they
    are called on the first lookup."""
    global _tables
    if _tables and _tables != tables:
        raise ValueError("pass tables are installed already ("
                         + ", ".join(f"{t.__module__}.{t.__qualname__}" for t in _tables) + ")")
    _tables = tables


def _load() -> None:
    global _state
    if _state == "loaded":
        return
    if _state == "loading":
        raise CompileError("pass lookup while the pass tables load: a pass module looks a pass "
                           "up when it is imported; look it up when the pass runs")
    if not _tables:
        raise CompileError("no pass table is installed: ptxc/__init__.py installs "
                           "ptxc.rewrite.passes.all_passes and ptxc.lower.lowering_passes with "
                           "ptxc.rewrite.pass_.install_pass_table")
    _state = "loading"
    try:
        for table in _tables:
            for name, cls in table().items():
                if "_declared_pass" not in cls.__dict__ or cls.name != name:
                    raise ValueError(f"pass table {table.__module__}.{table.__qualname__}: "
                                     f"{name!r} -> {cls!r} is no @register_pass class of "
                                     "that name")
                _add(cls)
    except BaseException:
        _PASSES.clear()
        _state = "empty"
        raise
    _state = "loaded"


def _add(cls: type[Pass]) -> None:
    if cls.name in _PASSES and _PASSES[cls.name] is not cls:
        raise ValueError(f"pass {cls.name!r} registered twice ({_PASSES[cls.name].__name__} and "
                         f"{cls.__name__})")
    _PASSES[cls.name] = cls


def add_pass(cls: type[Pass]) -> type[Pass]:
    """Register one pass class at run time (tests, passes outside ptxc; a decorator too): it is
    checked as :func:`register_pass` does, and a name taken already is a ValueError."""
    register_pass(cls)
    _load()
    _add(cls)
    return cls


def registered_passes() -> dict[str, type[Pass]]:
    """Every registered pass class by name, sorted by name."""
    _load()
    return dict(sorted(_PASSES.items()))


def get_pass(name: str, **options) -> Pass:
    """An instance of the pass ``name`` with ``options`` (snake_case or kebab-case names; values
    of the option's type, or strings as in pipeline text)."""
    _load()
    cls = _PASSES.get(name)
    if cls is None:
        close = difflib.get_close_matches(name, list(_PASSES), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise CompileError(f"unknown pass {name!r}{hint} (registered: "
                           f"{', '.join(sorted(_PASSES))})")
    fields = {f.name: f for f in attrs.fields(cls)}
    kwargs = {}
    for key, value in options.items():
        field = fields.get(key.replace("-", "_"))
        if field is None:
            known = ", ".join(k.replace("_", "-") for k in fields) or "none"
            raise CompileError(f"pass {name!r} has no option {key!r} (options: {known})")
        kwargs[field.name] = convert_option(name, field, value)
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as e:  # attrs validators
        raise CompileError(f"pass {name!r}: bad options {options}: {e}") from None


# ---- option values ------------------------------------------------------------------------------

def format_option(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (tuple, list)):
        return "[" + ",".join(format_option(x) for x in v) + "]"
    return str(v)


def convert_option(pass_name: str, field: attrs.Attribute, value):
    """``value`` as the option's declared type (bool, int, float, str, or a tuple of one of
    those); strings from pipeline text are parsed (tuples as comma-separated items)."""
    t = field.type
    try:
        if typing.get_origin(t) is tuple:
            elem = next((a for a in typing.get_args(t) if a is not Ellipsis), str)
            items = value.split(",") if isinstance(value, str) else list(value)
            return tuple(_scalar(elem, x.strip() if isinstance(x, str) else x) for x in items
                         if not (isinstance(x, str) and not x.strip()))
        return _scalar(t, value)
    except (ValueError, TypeError):
        raise CompileError(f"pass {pass_name!r} option {field.name.replace('_', '-')}: "
                           f"{value!r} is not a valid {getattr(t, '__name__', t)}") from None


def _scalar(t, value):
    if t is bool:
        if isinstance(value, str) and value.lower() in ("true", "false", "1", "0"):
            return value.lower() in ("true", "1")
        if isinstance(value, bool):
            return value
        raise ValueError(value)
    if t in (int, float):
        if isinstance(value, bool):
            raise ValueError(value)
        if t is int and isinstance(value, float) and not value.is_integer():
            raise ValueError(value)
        return t(value)
    if t is str:
        return str(value)
    return value  # other option types are taken as given


# ---- docstring examples -------------------------------------------------------------------------

def docstring_example(cls) -> tuple[str, str] | None:
    """The (before, after) IR blocks of a pass's docstring, dedented; None when there are none.

    Each block follows a line that is exactly ``Before:`` / ``After:`` (any case), and is made of
    the following lines that are blank or indented deeper than that line."""
    doc = inspect.getdoc(cls)
    if not doc:
        return None
    lines = doc.split("\n")
    blocks = {}
    for i, line in enumerate(lines):
        key = line.strip().lower()
        if key not in ("before:", "after:") or key in blocks:
            continue
        indent = len(line) - len(line.lstrip())
        body = []
        for nxt in lines[i + 1:]:
            if nxt.strip() and len(nxt) - len(nxt.lstrip()) <= indent:
                break
            body.append(nxt)
        text = textwrap.dedent("\n".join(body)).strip("\n")
        if text:
            blocks[key] = text + "\n"
    if "before:" not in blocks or "after:" not in blocks:
        return None
    return blocks["before:"], blocks["after:"]


def example_options(cls) -> str:
    """The text of the docstring's ``Options:`` line (pipeline option text, without braces:
    ``vector-width=8 unroll=4``); empty where there is none."""
    for line in (inspect.getdoc(cls) or "").split("\n"):
        head, sep, rest = line.strip().partition(":")
        if sep and head.lower() == "options" and rest.strip():
            return rest.strip()
    return ""


def example_pass(cls) -> Pass:
    """The pass instance a docstring example runs: ``cls`` with :func:`example_options`' values
    (parsed as pipeline text), else with its defaults."""
    opts = example_options(cls)
    if not opts:
        return cls()
    from .pipeline import parse_pipeline
    (p,) = parse_pipeline(f"{cls.name}{{{opts}}}")
    return p
