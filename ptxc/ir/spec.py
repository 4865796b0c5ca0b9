"""Declarative op specs, and the registry that finds them by name.

An op is declared once, as a subclass of :class:`OpSpec`::

    class Conv(OpSpec):
        '''2-D/N-D convolution with ONNX semantics.'''
        name = "graph.conv"
        operands = ("X", "W", Operand("B", optional=True))
        results = ("Y",)
        attributes = {"strides": Attr("ints", required=True), "group": Attr("int", default=1)}
        traits = {"pure"}

        def infer_types(self, op): ...      # result types from operand types and attributes
        def reference(self, op, args, interp): ...   # numpy semantics

From that one declaration the verifier checks operand and result counts, attribute kinds, required
attributes, region counts and inferred result types; the printer and parser need nothing from it
(the textual form is generic). An op hand-writes only what is special: ``infer_types``, ``verify``
and ``reference``.

Operands are single, optional or variadic. When an op has more than one optional or variadic group,
its operation carries the attribute ``operand_segments`` (one count per group), as MLIR's
``operandSegmentSizes``; :func:`make_op` fills it in.

The registry is a table, not an import side effect. ``ptxc.ir`` is the lowest layer and imports
nothing from ``ptxc.dialects``, not even inside a function; declaring an op class registers
nothing. Each dialect module lists its declarations in a tuple ``OPS``, and
:func:`ptxc.dialects.all_ops` gathers them (as xDSL's ``get_all_dialects``). The root package
(``ptxc/__init__.py``) hands that function to :func:`install_op_table`, and the first
:func:`lookup` calls it and fills the registry, so every import arrow points from the dialects
down to the IR core. :func:`register` adds one declaration at run time (tests).
"""

from __future__ import annotations

from typing import Any, Callable, ClassVar, Iterable

import attrs

from ..errors import BindingError, CompileError, VerifyError
from .attributes import normalize
from .core import Operation, Value


@attrs.frozen
class Operand:
    name: str
    optional: bool = False
    variadic: bool = False

    @property
    def single(self) -> bool:
        return not (self.optional or self.variadic)


@attrs.frozen
class Result:
    name: str
    variadic: bool = False


@attrs.frozen
class Attr:
    """An attribute declaration: its kind (see ``attributes.KINDS``), default, whether required."""

    kind: str
    default: Any = None
    required: bool = False
    doc: str = ""


#: traits an op can declare
TRAITS = frozenset({
    "pure",          # no side effects: dead if unused, foldable when its operands are constant
    "elementwise",   # result[i] depends on operand[i] only (after broadcasting)
    "commutative",   # operand order does not matter
    "terminator",    # ends its block
    "isolated",      # its regions cannot see values defined outside (functions)
    "constant",      # has no operands and materializes its `value` attribute
    "shape_only",    # its result depends only on operand types, never their values
})


class OpSpec:
    """Base of op declarations; see the module docstring."""

    name: ClassVar[str] = ""
    operands: ClassVar[tuple] = ()
    results: ClassVar[tuple] = ("result",)
    attributes: ClassVar[dict[str, Attr]] = {}
    regions: ClassVar[int] = 0
    traits: ClassVar[frozenset] = frozenset()

    # normalized forms, filled when a subclass with a name is declared (__init_subclass__)
    operand_defs: ClassVar[tuple[Operand, ...]] = ()
    result_defs: ClassVar[tuple[Result, ...]] = ()
    #: (needs segments, single operands, optional operands, any variadic operand group,
    #: non-variadic results, any variadic result group), for the verifier's hot path
    arity: ClassVar[tuple] = (False, 0, 0, False, 1, False)

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.name:
            _normalize(cls)

    # ---- what an op may override ---------------------------------------------------------
    def infer_types(self, op: Operation) -> list | None:
        """The result types, from operand types and attributes; None when the op cannot infer."""
        return None

    def verify(self, op: Operation) -> None:
        """Extra checks beyond the declaration; raise with :func:`fail`."""

    def reference(self, op: Operation, args: list, interp) -> list:
        """Numpy semantics: ``args`` holds one array per operand; returns one array per result."""
        raise VerifyError(f"{op.where}: has no reference semantics")

    def run(self, op: Operation, inputs: dict, func: str) -> dict:
        """Run the function ``func`` that ``op`` holds on ``inputs`` (name -> array); returns
        its outputs by name. Container ops that bind names (``builtin.module``) override it:
        :func:`ptxc.ir.interpreter.interpret` calls it, so the IR core knows no calling
        convention."""
        raise BindingError(f"{op.where}: holds no function to run")

    # ---- helpers shared by all ops -------------------------------------------------------
    @classmethod
    def has_trait(cls, trait: str) -> bool:
        return trait in cls.traits

    @classmethod
    def needs_segments(cls) -> bool:
        return cls.arity[0]

    @classmethod
    def groups(cls, op: Operation, values: list | None = None) -> dict[str, Any]:
        """Operands (or ``values``, one per operand, e.g. interpreter arrays) by declared name:
        a value for single operands, the value or None for optional ones, a list for variadic."""
        values = op.operands if values is None else values
        defs = cls.operand_defs
        if cls.needs_segments():
            sizes = list(op.attributes.get("operand_segments", ()))
        else:
            n_fixed = sum(1 for d in defs if d.single)
            rest = len(values) - n_fixed
            sizes = [1 if d.single else rest for d in defs]
        out, pos = {}, 0
        for d, n in zip(defs, sizes):
            chunk = list(values[pos:pos + n])
            pos += n
            if d.variadic:
                out[d.name] = chunk
            elif d.optional:
                out[d.name] = chunk[0] if chunk else None
            else:
                out[d.name] = chunk[0]
        return out


def _normalize(cls: type[OpSpec]) -> None:
    """Check a declaration and fill its normalized forms (operand and result defs, arity)."""
    if "." not in cls.name:
        raise ValueError(f"{cls.__name__}: name must be 'dialect.op', got {cls.name!r}")
    cls.operand_defs = tuple(d if isinstance(d, Operand) else Operand(d) for d in cls.operands)
    cls.result_defs = tuple(d if isinstance(d, Result) else Result(d) for d in cls.results)
    if sum(d.variadic for d in cls.result_defs) > 1:
        raise ValueError(f"{cls.name}: at most one variadic result group")
    unknown = set(cls.traits) - TRAITS
    if unknown:
        raise ValueError(f"{cls.name}: unknown traits {sorted(unknown)}")
    cls.traits = frozenset(cls.traits)
    defs, rdefs = cls.operand_defs, cls.result_defs
    cls.arity = (sum(1 for d in defs if not d.single) > 1, sum(1 for d in defs if d.single),
                 sum(1 for d in defs if d.optional), any(d.variadic for d in defs),
                 sum(1 for d in rdefs if not d.variadic), any(d.variadic for d in rdefs))
    for k, a in cls.attributes.items():
        if a.kind not in ("int", "float", "bool", "str", "ints", "floats", "strs", "type",
                          "dense", "any"):
            raise ValueError(f"{cls.name}: attribute {k} has unknown kind {a.kind!r}")


# ---- the registry ---------------------------------------------------------------------------

#: op name -> its spec (one instance per declaration), filled from the table on first lookup
_SPECS: dict[str, OpSpec] = {}
#: the installed table: a function returning every op declaration (ptxc.dialects.all_ops)
_table: Callable[[], Iterable[type[OpSpec]]] | None = None
_state = "empty"  # -> "loading" -> "loaded"


def install_op_table(table: Callable[[], Iterable[type[OpSpec]]]) -> None:
    """Give the registry its table; it is called on the first :func:`lookup`."""
    global _table
    if _table is not None and _table is not table:
        raise ValueError(f"an op table is installed already ({_table.__module__}."
                         f"{_table.__qualname__})")
    _table = table


def _load() -> None:
    global _state
    if _state == "loading":
        raise CompileError("op lookup while the op table loads: a dialect module looks an op "
                           "up when it is imported; take the declaration class instead")
    if _table is None:
        raise CompileError("no op table is installed: ptxc/__init__.py installs "
                           "ptxc.dialects.all_ops with ptxc.ir.spec.install_op_table")
    _state = "loading"
    try:
        for cls in _table():
            _add(cls)
    except BaseException:
        _SPECS.clear()
        _state = "empty"
        raise
    _state = "loaded"


def _add(cls: type[OpSpec]) -> None:
    if not (isinstance(cls, type) and issubclass(cls, OpSpec)) or not cls.name:
        raise ValueError(f"{cls!r}: not an op declaration (an OpSpec subclass with a name)")
    if cls.name in _SPECS:
        raise ValueError(f"op {cls.name} registered twice ({type(_SPECS[cls.name]).__module__}"
                         f" and {cls.__module__})")
    _SPECS[cls.name] = cls()


def register(cls: type[OpSpec]) -> type[OpSpec]:
    """Add one op declaration to the registry at run time (tests); the dialects' ops come from
    the installed table."""
    if _state != "loaded":
        _load()
    _add(cls)
    return cls


def lookup(name: str) -> OpSpec | None:
    """The spec of the op called ``name``, or None when no op has that name."""
    spec = _SPECS.get(name)
    if spec is None and _state != "loaded":
        _load()
        spec = _SPECS.get(name)
    return spec


def registered_ops(dialect: str | None = None) -> list[str]:
    lookup("")
    return sorted(n for n in _SPECS if dialect is None or n.split(".")[0] == dialect)


def fail(op: Operation, message: str) -> None:
    raise VerifyError(f"{op.where}: {message}")


def make_op(name: str, operands=(), attributes=None, result_types=None, regions=(),
            loc: str | None = None, result_names=None) -> Operation:
    """Create an op of a registered kind.

    ``operands`` may contain None for absent optional operands (the segment attribute is computed)
    or a list for a variadic group when the op needs segments. Attribute values are normalized
    (lists to tuples, numpy scalars to Python). When ``result_types`` is None they are inferred.
    """
    spec = lookup(name)
    if spec is None:
        raise VerifyError(f'"{name}": unknown op')
    attributes = {k: normalize(v) for k, v in (attributes or {}).items() if v is not None}
    flat: list[Value] = []
    if spec.needs_segments():
        if len(operands) != len(spec.operand_defs):
            raise VerifyError(f'"{name}": expected one entry per operand group '
                              f"{[d.name for d in spec.operand_defs]}, got {len(operands)}")
        sizes = []
        for d, v in zip(spec.operand_defs, operands):
            vs = [] if v is None else (list(v) if isinstance(v, (list, tuple)) else [v])
            sizes.append(len(vs))
            flat += vs
        attributes["operand_segments"] = tuple(sizes)
    else:
        for v in operands:
            if isinstance(v, (list, tuple)):
                flat += list(v)
            elif v is not None:
                flat.append(v)
    op = Operation(name, flat, (), attributes, regions, loc=loc)
    if result_types is None:
        result_types = spec.infer_types(op)
        if result_types is None:
            raise VerifyError(f"{op.where}: cannot infer result types; pass result_types")
    names = list(result_names or [])
    from .core import OpResult
    op.results = [OpResult(t, op, i, names[i] if i < len(names) else None)
                  for i, t in enumerate(result_types)]
    return op
