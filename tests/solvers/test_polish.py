"""The window period of T_est, and `explain`."""

import pytest
from hypothesis import given, settings, strategies as st

from planner import Plan, load_instance, plan as make_plan



def _azure_pipeline():
    """A one-replica 20-stage 1f1b pipeline over azure-multiregion, 512 micro-batches."""
    inst = load_instance("azure-multiregion")
    bounds = [0, 5, 10, 15, 20, 25, 30, 35, 40, 44, 45, 46, 47, 51, 56, 61, 63, 67, 72, 77, 82]
    row = [d for d in ("australiaeast", "japaneast", "westus", "eastus", "westeurope") for _ in range(4)]
    return inst, Plan.build(list(zip(bounds[:-1], bounds[1:])), [row], tp=4, micro_batch_size=2, instance=inst)


@settings(max_examples=200, deadline=None)
@given(data=st.data(), S=st.integers(1, 7), m=st.integers(1, 9))
def test_window_period_is_the_largest_window(data, S, m):
    """planner.scoring.estimate.window_period against a plain double loop over every window."""
    from planner.scoring.estimate import window_period

    c = data.draw(st.lists(st.floats(0, 5), min_size=S, max_size=S))
    x = data.draw(st.lists(st.floats(0, 2), min_size=S - 1, max_size=S - 1))
    l = data.draw(st.lists(st.floats(0, 2), min_size=S - 1, max_size=S - 1))
    w = [min(m, S - j) for j in range(S)]
    want = max((sum(c[j:k + 1]) + 2 * sum(x[b] + l[b] for b in range(j, k))) / (w[j] - w[k] + 1)
               for j in range(S) for k in range(j, S))
    v, j, k = window_period(c, x, l, w)
    assert v == pytest.approx(want, rel=1e-9, abs=1e-12)
    assert v == pytest.approx((sum(c[j:k + 1]) + 2 * sum(x[b] + l[b] for b in range(j, k))) / (w[j] - w[k] + 1),
                              rel=1e-9, abs=1e-12)


def test_explain_names_the_window_the_simulation_obeys():
    """`planner explain` of the azure pipeline names the window across the first WAN
    crossing (stages 3 and 4); a plan whose simulation T_est matches gets no such line."""
    from planner.presentation.explain import explain

    inst, p = _azure_pipeline()
    text = str(explain(inst, p))
    assert "between stages 3 and 4" in text and "2 micro-batches" in text
    inst = load_instance("tiny-line")
    assert "Pipeline period (simulation)" not in str(explain(inst, make_plan(inst)))
