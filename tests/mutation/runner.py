"""Apply each mutation of the catalogue to a temporary copy of ptxc and run its tests.

Why a copy: the worktree's sources are never edited, so an interrupted run leaves nothing
mutated behind, and two mutations run side by side (a pool of ``jobs`` processes) without
seeing each other. Each run gets a fresh directory holding ``ptxc/`` (one file mutated),
``tests/`` and ``pyproject.toml``; pytest runs there as a subprocess with that directory as its
working directory and first on ``PYTHONPATH``, so ``import ptxc`` finds the mutant (the
baseline checks this and fails loudly if another ptxc would be imported).

Outcomes, from pytest's exit status:

* ``killed``: a test failed (exit 1), or collection failed because of the mutant (exit 2), or
  the process crashed (a signal: jitted code writing out of bounds), or the run passed its time
  limit (a mutant that hangs is caught too);
* ``survived``: every listed test passed (exit 0) -- the suite fails;
* ``error``: pytest could not run the listed tests (usage error, no tests collected: exit 3,
  4, 5), a test id that no longer exists, for example -- the suite fails: a catalogue that
  cannot run is not a catalogue that passes.

Before any mutant runs, the *baseline* runs every test the catalogue lists on the unmutated
copy (spread over ``jobs`` pytest-xdist workers); they must all pass, otherwise a kill would mean
nothing.

The hypothesis tests run with the ``ci`` profile (``CI=1``: derandomized), so a mutant is
killed or not the same way every time.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import attrs

from .catalogue import CATALOGUE, Mutation

ROOT = Path(__file__).resolve().parents[2]
_IGNORE = shutil.ignore_patterns(".hypothesis", ".pytest_cache")


class CatalogueError(Exception):
    """A mutation whose old text is not found exactly once (the source moved on: update the
    catalogue entry), or a malformed entry."""


@attrs.frozen
class Outcome:
    mutation: Mutation
    status: str          # "killed", "survived" or "error"
    seconds: float
    detail: str          # the first failing test, the timeout, or pytest's complaint

    def line(self) -> str:
        return f"{self.status:<8} {self.seconds:6.1f}s  {self.mutation.name}: {self.detail}"


def apply_text(text: str, m: Mutation) -> str:
    """``text`` with the mutation applied; CatalogueError unless ``m.old`` occurs exactly once."""
    n = text.count(m.old)
    if n != 1:
        raise CatalogueError(
            f"mutation {m.name!r}: its old text occurs {n} times in ptxc/{m.file} (must be "
            f"exactly once; the source changed: update tests/mutation/catalogue.py):\n{m.old}")
    if m.old == m.new:
        raise CatalogueError(f"mutation {m.name!r}: old and new text are the same")
    return text.replace(m.old, m.new)


def mutate_source(text: str, m: Mutation) -> str:
    """The source of ``ptxc/{m.file}`` with ``m`` applied, which must still be valid Python:
    a mutant is a program that runs and computes something wrong, not a typo."""
    out = apply_text(text, m)
    try:
        compile(out, f"ptxc/{m.file}", "exec")
    except SyntaxError as e:
        raise CatalogueError(f"mutation {m.name!r}: the mutated ptxc/{m.file} is not valid "
                             f"Python ({e.msg}, line {e.lineno})") from None
    return out


def check(mutations=CATALOGUE, root: Path = ROOT) -> None:
    """Every mutation applies exactly once to the sources under ``root``, names are unique, and
    every test it lists names an existing file. Raises CatalogueError listing every problem."""
    problems, seen = [], set()
    for m in mutations:
        if m.name in seen:
            problems.append(f"two mutations named {m.name!r}")
        seen.add(m.name)
        path = root / "ptxc" / m.file
        if not path.is_file():
            problems.append(f"mutation {m.name!r}: no file ptxc/{m.file}")
            continue
        try:
            mutate_source(path.read_text(), m)
        except CatalogueError as e:
            problems.append(str(e))
        if not m.tests:
            problems.append(f"mutation {m.name!r} lists no tests")
        for t in m.tests:
            if not (root / t.split("::")[0]).is_file():
                problems.append(f"mutation {m.name!r}: no test file {t.split('::')[0]}")
    if problems:
        raise CatalogueError("\n".join(problems))


def _copy_tree(dest: Path, root: Path) -> None:
    shutil.copytree(root / "ptxc", dest / "ptxc", ignore=_IGNORE)
    shutil.copytree(root / "tests", dest / "tests", ignore=_IGNORE)
    shutil.copy2(root / "pyproject.toml", dest / "pyproject.toml")


def _env(dest: Path) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(dest)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["CI"] = "1"              # the derandomized hypothesis profile (tests/conftest.py)
    env.pop("PYTEST_ADDOPTS", None)
    env.pop("PYTEST_XDIST_WORKER", None)
    return env


def _pytest(dest: Path, tests, timeout: float, workers: int = 0) -> tuple[int | None, str]:
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
           "--no-header", "-o", "addopts=-rf", *tests]
    if workers > 1:
        cmd[3:3] = ["-n", str(workers)]
    try:
        p = subprocess.run(cmd, cwd=dest, env=_env(dest), capture_output=True, text=True,
                           timeout=timeout)
    except subprocess.TimeoutExpired as e:
        out = e.stdout or ""
        return None, out if isinstance(out, str) else out.decode(errors="replace")
    return p.returncode, p.stdout + p.stderr


def _first_failure(out: str) -> str:
    for pat in (r"^FAILED (.*)$", r"^ERROR (.*)$", r"^E\s+(.*)$"):
        m = re.search(pat, out, re.M)
        if m:
            return m.group(1).strip()[:300]
    return out.strip().splitlines()[-1][:300] if out.strip() else "(no output)"


def run_mutation(m: Mutation, timeout: float = 600.0, root: Path = ROOT) -> Outcome:
    """Apply ``m`` to a fresh copy of ptxc, run its tests, and say whether they caught it."""
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix=f"ptxc-mut-{m.name}-") as tmp:
        dest = Path(tmp)
        _copy_tree(dest, root)
        target = dest / "ptxc" / m.file
        target.write_text(mutate_source(target.read_text(), m))
        rc, out = _pytest(dest, m.tests, timeout)
    dt = time.perf_counter() - t0
    if rc is None:
        return Outcome(m, "killed", dt, f"timed out after {timeout:.0f} s")
    if rc < 0:  # the mutant crashed the process (e.g. jitted code writing out of bounds)
        return Outcome(m, "killed", dt, f"crashed with signal {-rc}")
    if rc in (1, 2):
        return Outcome(m, "killed", dt, _first_failure(out))
    if rc == 0:
        return Outcome(m, "survived", dt, f"{len(m.tests)} test selection(s) all passed")
    return Outcome(m, "error", dt, f"pytest exit {rc}: {_first_failure(out)}")


def run_baseline(mutations, timeout: float = 1800.0, root: Path = ROOT,
                 workers: int = 2) -> Outcome | None:
    """Run the union of the catalogue's tests on an unmutated copy; None when all pass, else an
    ``error`` outcome saying what failed (a kill against a failing baseline would mean
    nothing). Also checks the copy is what ``import ptxc`` finds."""
    tests = sorted({t for m in mutations for t in m.tests})
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ptxc-mut-baseline-") as tmp:
        dest = Path(tmp)
        _copy_tree(dest, root)
        probe = subprocess.run([sys.executable, "-c", "import ptxc; print(ptxc.__file__)"],
                               cwd=dest, env=_env(dest), capture_output=True, text=True)
        where = probe.stdout.strip()
        if probe.returncode != 0 or not where.startswith(str(dest)):
            raise CatalogueError(f"the mutation runner's copy of ptxc is not the one imported "
                                 f"(got {where or probe.stderr.strip()!r}, wanted under {dest})")
        rc, out = _pytest(dest, tests, timeout, workers)
    dt = time.perf_counter() - t0
    if rc == 0:
        return None
    base = Mutation("baseline", "", "", "-", tuple(tests), "no mutation")
    why = f"timed out after {timeout:.0f} s" if rc is None else _first_failure(out)
    return Outcome(base, "error", dt, f"the unmutated tests fail: {why}")


def run_all(mutations=CATALOGUE, jobs: int = 2, timeout: float = 600.0, baseline: bool = True,
            progress=None, root: Path = ROOT) -> list[Outcome]:
    """Check the catalogue, run the baseline, then every mutation (``jobs`` at a time); returns
    the outcomes in catalogue order (just the baseline's when it fails). ``progress(outcome)``
    is called as each finishes."""
    mutations = list(mutations)
    check(mutations, root)
    if baseline:
        bad = run_baseline(mutations, root=root, workers=jobs)
        if bad is not None:
            if progress:
                progress(bad)
            return [bad]

    def one(m):
        o = run_mutation(m, timeout, root)
        if progress:
            progress(o)
        return o

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return list(pool.map(one, mutations))


def summary(outcomes: list[Outcome]) -> str:
    killed = sum(o.status == "killed" for o in outcomes)
    bad = [o for o in outcomes if o.status != "killed"]
    lines = [f"mutation suite: {killed} of {len(outcomes)} killed"]
    lines += [f"  {o.status.upper()}: {o.mutation.name} ({o.mutation.file}): {o.detail}"
              for o in bad]
    return "\n".join(lines)
