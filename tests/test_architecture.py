"""Architecture rules, checked on the source.

* No import cycle crosses a package boundary. The import graph is read with ``ast`` from every
  module under ptxc/ and counts every import, inside functions too, relative or absolute. A
  module's unit is its package (a package's ``__init__.py`` is in that package); a module right
  under ptxc/ (ptxc/compiler.py) is a unit of its own. A package's ``__init__.py`` importing its
  own subpackages is containment, not an arrow between units (ptxc/__init__.py, the public
  API, imports everything). ``from a.b import c`` is an arrow to the module ``a.b.c`` when
  there is one, else to ``a.b``.
* The IR core (ptxc/ir) imports nothing of ptxc but itself and ptxc.errors: it is the lowest
  layer, and the registries above it hand it their tables.
* No module is over 600 lines.
* The registries are tables: every op declared under ptxc/ is in the op registry, every tagged
  ONNX converter in the converter table, every ``@register_pass`` class in the pass registry.
* tests/ holds only test_*.py, conftest.py and __init__.py at its top level (folders and data
  files aside): a helper that tests import goes to tests/support/.

Cycles and long modules that exist today and are being worked on are listed below with a
reason. The lists can only shrink: a listed entry that no longer holds fails the test, which
asks for its removal, and so does anything new.
"""

from __future__ import annotations

import ast
import importlib
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]

#: import cycles between units that exist today (each a strongly connected set of units)
KNOWN_CYCLES: dict[frozenset, str] = {}

#: modules over the size limit today (paths under the repository root): none, so the rule
#: holds for every module; the table only shrinks
KNOWN_LONG_MODULES: dict[str, str] = {}

MAX_LINES = 600


# ---- the import graph -------------------------------------------------------------------------

def _modules() -> dict[str, tuple[pathlib.Path, bool]]:
    """Dotted module name -> (its file, whether it is a package's __init__)."""
    out = {}
    for path in sorted((ROOT / "ptxc").rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        if is_pkg:
            parts.pop()
        out[".".join(parts)] = (path, is_pkg)
    return out


MODULES = _modules()


def unit(module: str) -> str:
    """The unit of ``module``: its package, or itself right under ptxc/ (or for ptxc)."""
    if MODULES[module][1]:
        return module
    parent = module.rpartition(".")[0]
    return module if parent in ("", "ptxc") else parent


def imports(module: str):
    """(imported module, line) for each ptxc module that ``module`` imports, anywhere in it."""
    path, is_pkg = MODULES[module]
    package = module if is_pkg else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1])
                source = f"{base}.{node.module}" if node.module else base
            else:
                source = node.module or ""
            targets = [f"{source}.{a.name}" for a in node.names]
        else:
            continue
        for t in targets:
            while t not in MODULES and "." in t:
                t = t.rpartition(".")[0]
            if t in MODULES:
                yield t, node.lineno


def unit_graph() -> dict[str, dict[str, tuple[str, str, int]]]:
    """unit -> {imported unit: one witness (module, imported module, line)}."""
    edges: dict[str, dict[str, tuple[str, str, int]]] = {}
    for m, (_, is_pkg) in MODULES.items():
        for t, line in imports(m):
            a, b = unit(m), unit(t)
            if a == b or (is_pkg and t.startswith(m + ".")):
                continue  # inside one unit, or a package holding its own subpackage
            edges.setdefault(a, {}).setdefault(b, (m, t, line))
    return edges


def cycles(edges) -> set[frozenset]:
    """The strongly connected sets of more than one unit (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), set()

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = set()
            while True:
                w = stack.pop()
                on.discard(w)
                scc.add(w)
                if w == v:
                    break
            if len(scc) > 1:
                out.add(frozenset(scc))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def _describe(scc, edges) -> str:
    lines = [f"  {sorted(scc)}"]
    for a in sorted(scc):
        for b, (m, t, line) in sorted(edges.get(a, {}).items()):
            if b in scc:
                lines.append(f"    {a} -> {b}: {m} imports {t} (line {line})")
    return "\n".join(lines)


def cycle_problems(found: set[frozenset], known: dict, edges) -> list[str]:
    """What is wrong with the cycles ``found`` against the ``known`` ones: every cycle found that
    is not known (with ``known`` empty, every cycle), and every known one that is gone."""
    problems = []
    for scc in sorted(found - set(known), key=sorted):
        bigger = [k for k in known if scc < k]
        if bigger:
            problems.append("a known cycle shrank: replace its KNOWN_CYCLES entry by\n"
                            + _describe(scc, edges))
        else:
            problems.append("a new import cycle between packages: break it\n"
                            + _describe(scc, edges))
    for scc in sorted(set(known) - found, key=sorted):
        if not any(f < scc for f in found):
            problems.append(f"the known cycle {sorted(scc)} is gone: remove it from "
                            "KNOWN_CYCLES")
    return problems


def test_no_import_cycle_crosses_a_package_boundary():
    edges = unit_graph()
    problems = cycle_problems(cycles(edges), KNOWN_CYCLES, edges)
    assert not problems, "\n".join(problems)


def test_with_no_known_cycles_every_cycle_is_a_problem():
    edges = {"a": {"b": ("a", "b", 1)}, "b": {"a": ("b", "a", 2)}}
    assert cycle_problems(cycles(edges), {}, edges)
    assert not cycle_problems(cycles(edges), {frozenset("ab"): "known"}, edges)
    assert cycle_problems(set(), {frozenset("ab"): "known"}, {})      # gone: remove it


def test_the_ir_core_imports_only_itself_and_errors():
    bad = sorted({f"{m} imports {t} (line {line})"
                  for m in MODULES if m == "ptxc.ir" or m.startswith("ptxc.ir.")
                  for t, line in imports(m)
                  if not (t == "ptxc.ir" or t.startswith("ptxc.ir.") or t == "ptxc.errors")})
    assert not bad, ("ptxc.ir is the lowest layer; a registry above it hands it a table "
                     "instead:\n" + "\n".join(bad))


def test_the_import_graph_sees_imports_inside_functions():
    # ptxc.dialects imports its dialects only in the body of all_ops()
    assert "ptxc.dialects.graph" in {t for t, _ in imports("ptxc.dialects")}
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == {frozenset("abc")}


# ---- module size ------------------------------------------------------------------------------

def test_no_module_is_over_600_lines():
    long = {str(path.relative_to(ROOT)): len(path.read_text().splitlines())
            for path, _ in MODULES.values()}
    long = {p: n for p, n in long.items() if n > MAX_LINES}
    new = sorted(f"{p} ({long[p]} lines)" for p in set(long) - set(KNOWN_LONG_MODULES))
    gone = sorted(set(KNOWN_LONG_MODULES) - set(long))
    assert not new, f"modules over {MAX_LINES} lines: split them: {new}"
    assert not gone, f"no longer over {MAX_LINES} lines: remove from KNOWN_LONG_MODULES: {gone}"


# ---- registries are tables --------------------------------------------------------------------

def test_every_declared_op_is_in_the_op_table():
    import ptxc  # noqa: F401  (installs the op table)
    from ptxc.ir.spec import OpSpec, lookup

    def subclasses(cls):
        for c in cls.__subclasses__():
            yield c
            yield from subclasses(c)

    importlib.import_module("ptxc.dialects").all_ops()
    declared = {c for c in subclasses(OpSpec)
                if c.__module__.startswith("ptxc.") and "name" in vars(c) and c.name}
    assert declared
    missing = sorted(f"{c.__module__}.{c.__qualname__} ({c.name})" for c in declared
                     if type(lookup(c.name)) is not c)
    assert not missing, ("declared but not in the op table (add them to their module's OPS, "
                         f"the module to ptxc.dialects.all_ops): {missing}")


def test_every_tagged_converter_is_in_the_converter_table():
    from ptxc.frontend.convert.table import converters
    table = converters()
    missing = []
    for m in MODULES:
        if not m.startswith("ptxc.frontend.convert."):
            continue
        module = importlib.import_module(m)
        for name, fn in vars(module).items():
            if getattr(fn, "__module__", None) != m:
                continue
            for t in getattr(fn, "onnx_op_types", ()):
                if table.get(t) is not fn:
                    missing.append(f"{m}.{name} ({t})")
    assert not missing, ("tagged with @converter but not in the table (add the module to "
                         f"ptxc.frontend.convert.table.MODULES): {sorted(missing)}")


def test_every_declared_pass_is_in_the_pass_table():
    import ptxc  # noqa: F401  (installs the pass tables)
    from ptxc.lower import lowering_passes
    from ptxc.rewrite.pass_ import Pass, registered_passes
    from ptxc.rewrite.passes import all_passes

    def subclasses(cls):
        for c in cls.__subclasses__():
            yield c
            yield from subclasses(c)

    all_passes(), lowering_passes()
    declared = {c for c in subclasses(Pass)
                if c.__module__.startswith("ptxc.") and "_declared_pass" in vars(c)}
    assert declared
    table = registered_passes()
    missing = sorted(f"{c.__module__}.{c.__qualname__} ({c.name})" for c in declared
                     if table.get(c.name) is not c)
    assert not missing, ("declared with @register_pass but not in a pass table (add them to "
                         "ptxc.rewrite.passes.all_passes or ptxc.lower.lowering_passes): "
                         f"{missing}")


# ---- tests/ layout ----------------------------------------------------------------------------

def test_tests_top_level_holds_only_tests():
    tests = ROOT / "tests"
    allowed = ("conftest.py", "__init__.py")
    strays = sorted(p.name for p in tests.glob("*.py")
                    if not p.name.startswith("test_") and p.name not in allowed)
    assert not strays, (f"modules at the top of tests/ that are not tests: {strays} (a helper "
                        "that tests import goes to tests/support/: from support.NAME import ...)")
    assert (tests / "support" / "__init__.py").is_file()
