"""``python -m tests.mutation``: run the mutation catalogue (see tests/mutation/runner.py).

    python -m tests.mutation                 # every mutation, 2 at a time; exit 1 if any survives
    python -m tests.mutation --list          # the catalogue: name, file, the tests it runs
    python -m tests.mutation --only NAME     # one mutation (repeatable), after the baseline
    python -m tests.mutation --check         # only check every old text applies exactly once
    python -m tests.mutation --show NAME     # the edit a mutation makes

Run it from the repository root, with the python that has ptxc's dependencies.
"""

from __future__ import annotations

import argparse
import sys
import time

from . import runner
from .catalogue import CATALOGUE


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.mutation", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--list", action="store_true", help="list the mutations and exit")
    ap.add_argument("--check", action="store_true",
                    help="check the catalogue applies to the sources, run nothing")
    ap.add_argument("--show", metavar="NAME", help="print one mutation's edit and exit")
    ap.add_argument("--only", metavar="NAME", action="append", default=[],
                    help="run this mutation (repeatable; a prefix matches several)")
    ap.add_argument("-j", "--jobs", type=int, default=2, help="mutations run at once (2)")
    ap.add_argument("--timeout", type=float, default=600.0,
                    help="seconds per mutation before it counts as killed by a hang (600)")
    ap.add_argument("--no-baseline", action="store_true",
                    help="skip running the unmutated tests first")
    a = ap.parse_args(argv)

    if a.list:
        for m in CATALOGUE:
            print(f"{m.name:<45} ptxc/{m.file}\n    {m.why}\n    tests: {' '.join(m.tests)}")
        print(f"{len(CATALOGUE)} mutations")
        return 0
    if a.show:
        m = next((m for m in CATALOGUE if m.name == a.show), None)
        if m is None:
            print(f"no mutation named {a.show!r}", file=sys.stderr)
            return 2
        print(f"ptxc/{m.file}: {m.why}\n--- old\n{m.old}\n+++ new\n{m.new}")
        return 0
    chosen = list(CATALOGUE)
    if a.only:
        chosen = [m for m in CATALOGUE if any(m.name.startswith(p) for p in a.only)]
        if not chosen:
            print(f"no mutation matches {a.only}", file=sys.stderr)
            return 2
    try:
        runner.check(chosen)
    except runner.CatalogueError as e:
        print(f"the catalogue does not apply:\n{e}", file=sys.stderr)
        return 2
    if a.check:
        print(f"all {len(chosen)} mutations apply exactly once")
        return 0
    t0 = time.perf_counter()
    print(f"running {len(chosen)} mutations, {a.jobs} at a time"
          + ("" if a.no_baseline else ", after the baseline"), flush=True)
    outcomes = runner.run_all(chosen, jobs=a.jobs, timeout=a.timeout,
                              baseline=not a.no_baseline,
                              progress=lambda o: print(o.line(), flush=True))
    print(runner.summary(outcomes))
    print(f"{time.perf_counter() - t0:.0f} s")
    return 0 if all(o.status == "killed" for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
