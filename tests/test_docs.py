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


def _sh_blocks(text: str) -> list[str]:
    return [ln for block in re.findall(r"```sh\n(.*?)```", text, re.S) for ln in block.splitlines()
            if ln.strip()]


def test_readme_is_a_users_document():
    readme = _read("README.md")
    assert not re.search(r"session [0-9]|issue [0-9]", readme, re.I)
    hashes = [w for w in re.findall(r"\b[0-9a-f]{7,40}\b", readme)
              if re.search(r"[0-9]", w) and re.search(r"[a-f]", w)]
    assert not hashes, f"commit hashes in the README: {hashes}"
    lines = _sh_blocks(readme)
    # the two set-up commands first, the test one exactly as .ci/run runs it
    assert lines[0].startswith("python3 -m venv .venv && .venv/bin/pip install")
    assert lines[0].endswith(".venv/bin/ptxc run light:resnet50 --random-weights")
    test_cmd = '.venv/bin/python -m pytest -n 2 -q -m "not slow"'
    assert lines[1].endswith(test_cmd) and test_cmd in _read(".ci/run")
    for ln in lines:   # setup never activates the venv: no bare ptxc
        for m in re.finditer(r"(\S*)ptxc (?=[a-z])", ln):
            assert m.group(1).endswith(".venv/bin/") or m.group(1) in ("import ", "-m "), ln
    assert "docs/design.md" in readme and "docs/testing.md" in readme
    assert "onnx/backend/test/data/light" in readme   # what the light: models are


def test_readme_documents_real_flags():
    """The flags the README shows exist on ``ptxc run`` (the int8 and shape flags included)."""
    from ptxc.cli import build_parser
    sub = next(a for a in build_parser()._actions if a.dest == "command").choices
    run_flags = {f for a in sub["run"]._actions for f in a.option_strings}
    shown = set(re.findall(r"(--[a-z][a-z0-9-]+)", " ".join(
        ln for ln in _sh_blocks(_read("README.md")) if "ptxc run" in ln)))
    assert {"--int8", "--calib", "--input-shape", "--random-weights"} <= shown
    assert shown <= run_flags, shown - run_flags


def test_readme_numbers_are_the_current_results():
    """Every time, rate and ratio in the README's measured table is in bench/RESULTS.md."""
    readme, results = _read("README.md"), _read("bench/RESULTS.md")
    table = readme[readme.index("| benchmark | GPU |"):]
    table = table[:table.index("\n\n")]
    rows = table.splitlines()[2:]
    assert len(rows) >= 8
    for row in rows:
        for number in re.findall(r"(\d[\d.]*) (?:ms|µs|img/s)|ratio (\d[\d.]*)x", row):
            value = number[0] or number[1]
            assert value in results, (value, row)


# Timings leave docstrings: a docstring or comment says what a choice does and why and links
# where the measurement is recorded (bench/RESULTS.md, bench/history/<date>.md); it names no
# session and quotes no timing of a dated run or a named GPU. Shrink-only exceptions (none now):
# an entry whose file no longer breaks the rule must go (the test says so).
_TIMINGS_ALLOWED: dict = {}

_SESSION = re.compile(r"\bsessions? [0-9]+", re.I)
_DATE = re.compile(r"\b20[0-9]{2}-[0-9]{2}-[0-9]{2}\b")
_DURATION = re.compile(r"[0-9] ?(?:ms|us|µs)\b")
_GPU = re.compile(r"\b[HA]100\b|\bH200\b")
_HISTORY_LINK = re.compile(r"bench/history/20[0-9]{2}-[0-9]{2}(?:-[0-9]{2})?\.md")


def _docs_and_comments(path: str) -> list[tuple[int, str]]:
    """(line, text) of every docstring and comment of a Python file."""
    import ast
    import io
    import tokenize
    with open(path, encoding="utf-8") as f:
        src = f.read()
    found = []
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                found.append((body[0].lineno, body[0].value.value))
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type == tokenize.COMMENT:
            found.append((tok.start[0], tok.string))
    return found


def _timing_lines(text: str) -> list[str]:
    """What in ``text`` names a session or quotes a timing of a dated run or a named GPU (a
    duration near a date or a GPU's name)."""
    bad = [m.group(0) for m in _SESSION.finditer(text)]
    for m in _DURATION.finditer(text):
        near = text[max(0, m.start() - 150):m.end() + 150]
        if _GPU.search(near):
            bad.append(near.strip())
    text = _HISTORY_LINK.sub("bench/history/DATE.md", text)   # a link to the record is wanted
    for m in _DATE.finditer(text):
        near = text[max(0, m.start() - 200):m.end() + 200]
        if _DURATION.search(near):
            bad.append(near.strip())
    return bad


def _timing_violations() -> dict[str, list[str]]:
    found = {}
    for p in _files("ptxc", ".py"):
        rel = os.path.relpath(p, ROOT).replace(os.sep, "/")
        for line, text in _docs_and_comments(p):
            for bad in _timing_lines(text):
                found.setdefault(rel, []).append(f"line {line}: {bad!r}")
    return found


def test_timing_rule_catches_what_it_should():
    assert _timing_lines("timed slower in session 13")
    assert _timing_lines("(sessions 18-19)")
    assert _timing_lines("on the H200, 2026-12-02, ResNet-50 took 1.89 ms against 2.29")
    assert _timing_lines("went 32.4 -> 29.0 us (2026-12-03)")
    assert _timing_lines("each fill took about 13 us on the H200")
    assert not _timing_lines("an H200's 132 SMs hold 270k threads")
    assert not _timing_lines("faster on ResNet-50 fp16 (bench/history/2026-12-02.md); 16 ms")
    assert not _timing_lines("a module parsed in about 20 ms")   # no run, no GPU: a cost


def test_docstrings_name_no_session_and_no_dated_timing():
    found = _timing_violations()
    rest = {f: v for f, v in found.items() if f not in _TIMINGS_ALLOWED}
    assert not rest, ("docstrings or comments that name a session or a dated timing (say what "
                      f"the choice does and why, and link bench/history/<date>.md): {rest}")
    clean = sorted(f for f in _TIMINGS_ALLOWED if f not in found)
    assert not clean, f"no longer break the rule: remove them from _TIMINGS_ALLOWED: {clean}"


def test_testing_doc_states_what_a_test_must_show():
    """docs/testing.md keeps the three rules (issue 41), each pointing at a test that holds it."""
    text = _read("docs/testing.md")
    section = text[text.index("## What a test must show"):]
    section = section[:section.index("\n## ")]
    for rule in ("A rule stated in the docs has a test that fails when the rule breaks",
                 "A pass that must not fire in a case has a test of that case",
                 "A security check has a test of each way it can be fooled"):
        assert rule in section, rule
    for path in re.findall(r"`(tests/[\w/]+\.py)`", section):
        assert os.path.exists(os.path.join(ROOT, path)), path
