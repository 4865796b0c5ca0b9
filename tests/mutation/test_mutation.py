"""The mutation suite as tests: the catalogue applies to today's sources (default tier, fast),
and every mutation in it is killed (marker ``mutation``: ``pytest -m mutation tests/mutation``,
which ``.ci/run`` runs as its own step; several minutes on two cores)."""

import pytest

from . import runner
from .catalogue import CATALOGUE


def test_the_catalogue_applies_to_the_sources():
    """Every old text occurs exactly once in its file (else: the source moved on, update the
    entry), names are unique, every listed test file exists, there are at least 56, and each
    area issue 41 names as least covered by mutation has its own."""
    runner.check()
    assert len(CATALOGUE) >= 56
    for area, prefix in {"graph passes": "rewrite/passes/", "lowerings": "lower/",
                         "gpu schedules": "lower/gpu_map/", "memory planner": "codegen/memory_plan",
                         "runtime": "driver/cpu", "plan trust": "plan/trust",
                         "plan checks": "plan/checks", "fold-qdq": "rewrite/passes/fold_qdq",
                         "precision policy": "rewrite/passes/precision",
                         "channels-last": "rewrite/passes/channels_last",
                         "calibration": "calib/"}.items():
        assert any(m.file.startswith(prefix) for m in CATALOGUE), f"no mutation in the {area}"


def test_apply_refuses_text_that_is_missing_or_repeated():
    m = CATALOGUE[0]
    with pytest.raises(runner.CatalogueError, match="0 times"):
        runner.apply_text("nothing here", m)
    with pytest.raises(runner.CatalogueError, match="2 times"):
        runner.apply_text(m.old + "\n" + m.old, m)
    assert runner.apply_text("a\n" + m.old + "\nb", m) == "a\n" + m.new + "\nb"
    broken = runner.Mutation("typo", "x.py", "y = f(1)", "y = f(1", ("t",))
    assert runner.apply_text("y = f(1)\n", broken) == "y = f(1\n"
    with pytest.raises(runner.CatalogueError, match="not valid Python"):
        runner.mutate_source("y = f(1)\n", broken)


@pytest.mark.mutation
def test_every_mutation_is_killed():
    outcomes = runner.run_all(CATALOGUE, jobs=2,
                              progress=lambda o: print(o.line(), flush=True))
    bad = [o for o in outcomes if o.status != "killed"]
    assert not bad, runner.summary(outcomes)
