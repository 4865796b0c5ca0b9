"""The documents stay true to the code: every ``PTXC_*`` environment variable ptxc (or a bench
script) names is documented in docs/environment.md; the design document is in the repository
(docs/design.md) and nothing points outside it; the README is a user's document (no session or
issue numbers, commands that work from a fresh clone, the exact test command CI runs, the
current numbers of bench/RESULTS.md)."""

import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _read(rel: str) -> str:
    with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
        return f.read()


def _files(top: str, ext: str):
    for dirpath, dirnames, files in os.walk(os.path.join(ROOT, top)):
        dirnames[:] = [d for d in dirnames if d not in ("__pycache__", "history")]
        for f in files:
            if f.endswith(ext):
                yield os.path.join(dirpath, f)


def _names_in(paths) -> dict[str, str]:
    found = {}
    for p in paths:
        with open(p, encoding="utf-8") as f:
            for name in re.findall(r"\bPTXC_[A-Z0-9_]+", f.read()):
                found.setdefault(name, os.path.relpath(p, ROOT))
    return found


def test_every_environment_variable_is_documented():
    doc = _read("docs/environment.md")
    rows = set(re.findall(r"^\| `(PTXC_[A-Z0-9_]+)` \|", doc, re.M))
    used = _names_in([*_files("ptxc", ".py"), *_files("bench", ".py"), *_files("bench", ".sh")])
    assert {"PTXC_CACHE", "PTXC_CUDA_ARCH", "PTXC_PLAN_KEY"} <= set(used)
    missing = {n: where for n, where in used.items() if n not in rows}
    assert not missing, f"PTXC_ variables not in docs/environment.md's table: {missing}"
    stale = rows - set(used)
    assert not stale, f"docs/environment.md lists variables nothing reads: {stale}"


def test_the_design_document_is_in_the_repository():
    assert os.path.exists(os.path.join(ROOT, "docs", "design.md"))
    design = _read("docs/design.md")
    assert "## Layout" in design and "ptxc/target.py" in design
    paths = [*_files("ptxc", ".py"), *_files("tests", ".py"), *_files("docs", ".md"),
             *_files("bench", ".py"), os.path.join(ROOT, "README.md")]
    outside = "../" + "shared"     # spelled so that this file does not contain it
    for p in paths:
        with open(p, encoding="utf-8") as f:
            assert outside not in f.read(), os.path.relpath(p, ROOT)
    assert "docs/design.md" in _read("ptxc/__init__.py")
