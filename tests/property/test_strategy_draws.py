"""The shared strategy draws, on purpose, the cases that random normal data and independent
layers never produce (see tests/property/strategies.py): every order-sensitive pair and every
extreme reduction kind, and inputs of one sign. One search over the strategy must meet them all,
so a change to the strategy that stops drawing one fails here."""

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

    find(graphs(), note, settings=settings(max_examples=1000, deadline=None, database=None,
                                           suppress_health_check=list(HealthCheck)))
    assert WANTED <= seen, sorted(WANTED - seen)
