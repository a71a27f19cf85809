"""Routing decisions on the whole built-in suite: from each module's traced graph, never its level."""

from __future__ import annotations

import pytest

from kernelwright.analysis import build_graph, classify
from kernelwright.strategies.routed import RULES, route
from tests.analysis._helpers import TASKS, reference

# What routing must pick for each graph shape, and therefore for each level of our suite.
EXPECTED_BY_LEVEL = {1: {"guided", "agentic"}, 2: {"agentic"}, 3: {"guided"}}


@pytest.mark.parametrize("task_id", sorted(TASKS))
def test_route_follows_the_graph(task_id):
    model, inputs = reference(task_id)
    shape = classify(build_graph(model, inputs)).shape.value
    regime, reason = route(shape)
    assert (regime, reason) == RULES[shape]
    level = int(task_id.split("/")[1][1])
    assert regime in EXPECTED_BY_LEVEL[level], (task_id, shape, regime)
    if shape == "single_op":
        assert regime == "guided"


def test_an_unknown_shape_falls_back_to_guided_with_a_reason():
    regime, reason = route("something_new")
    assert regime == "guided" and "something_new" in reason
