"""The shared strategy draws, on purpose, the cases that random normal data and independent
layers never produce (see tests/property/strategies.py): every order-sensitive pair and every
extreme reduction kind, and inputs of one sign. One search over the strategy must meet them all,
so a change to the strategy that stops drawing one fails here (the same search every run)."""

import numpy as np
import pytest
from hypothesis import HealthCheck, find, settings

from property.strategies import graphs

WANTED = {"pair:pads", "pair:conv_pads", "pair:slices", "pair:transposes", "extreme:max",
          "extreme:min", "extreme:max_pool", "extreme:global_max_pool", "inputs<0", "inputs>0"}


@pytest.mark.slow
def test_the_strategy_draws_every_special_case():
    seen: set = set()

    def note(case):
        seen.update(case.recipe)
        x = case.inputs["x"]
        seen.update({"inputs<0"} if (x < 0).all() else {"inputs>0"} if (x > 0).all() else set())
        return WANTED <= seen

    # derandomized: whether the strategy draws every case is a property of the strategy, so
    # the search is a fixed one (a random 1000-example search missed one case in 1 of 24 runs
    # on the H200 machine: a coin toss in a suite that must never be flaky)
    find(graphs(), note, settings=settings(max_examples=1000, deadline=None, database=None,
                                           derandomize=True,
                                           suppress_health_check=list(HealthCheck)))
    assert WANTED <= seen, sorted(WANTED - seen)
