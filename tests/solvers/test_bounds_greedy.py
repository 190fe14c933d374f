"""Lower bounds and the greedy planner against brute force on tiny instances."""

from hypothesis import given, settings, strategies as st

from helpers import brute_force, make_instance
from planner import InfeasibleError, check_plan, greedy, lower_bound
from planner.scoring.evaluator import Evaluator
from planner.problem.model import ModelSpec
from planner.scoring.bounds import cost_lower_bound


@st.composite
def tiny_instances(draw):
    n_units = draw(st.integers(2, 4))
    units = [{"name": f"u{i}", "params": draw(st.floats(1e6, 5e8)),
              "fwd_flops_per_token": draw(st.floats(1e8, 5e10)),
              "out_bytes_per_token": draw(st.floats(1e2, 1e5)),
              "stored_bytes_per_token": draw(st.floats(0, 1e5))} for i in range(n_units)]
    model = ModelSpec(name="rand", units=units)
    domains = [("d0", draw(st.integers(1, 2)), draw(st.floats(0.5, 3))),
               ("d1", draw(st.integers(1, 2)), draw(st.floats(0.5, 3)))]
    links = [("d0", "d1", draw(st.floats(0.5, 100)), draw(st.floats(0, 30)))]
    gpu = {"name": "G", "peak_tflops": 100.0, "memory_gb": draw(st.floats(4, 40)), "mfu": 0.5}
    objective = draw(st.sampled_from(["time", "cost"]))
    return make_instance(domains, links, model=model, gpu=gpu, global_batch_size=4, seq_len=256,
                         micro_batch_sizes=[1, 2], tensor_parallel=[1, 2],
                         options={"objective": objective, "wan_price_per_gb": 0.01})


@settings(max_examples=40, deadline=None)
@given(inst=tiny_instances())
def test_bound_below_optimum_and_greedy_complete(inst):
    best = brute_force(inst, key="time")
    objective = inst.options.objective
    best_obj = brute_force(inst, key=objective) if objective == "cost" else best
    try:
        plan = greedy(inst)
    except InfeasibleError:
        assert best is None, "greedy says infeasible but brute force found a plan"
        return
    assert best is not None
    best_est, best_T, _ = best
    lb = lower_bound(inst).value
    assert lb <= best_T * (1 + 1e-9), (lb, best_T)
    assert lb <= best_est * (1 + 1e-9), (lb, best_est)
    assert not check_plan(inst, plan)
    ev = Evaluator(inst, plan)
    te = float(ev.estimate_times()[0])
    T = float(ev.iteration_times()[0])
    got = te if objective == "time" else float(ev.cost(te))
    exact = T if objective == "time" else float(ev.cost(T))
    assert got >= best_obj[0] * (1 - 1e-9)  # nothing beats the optimum of T_est ...
    assert exact >= best_obj[1] * (1 - 1e-9)  # ... nor of the exact simulation
    # greedy picks by the exact simulation among its best candidates by T_est, and stays
    # close to the best simulated plan on tiny instances; it tries balanced cuts and, where a
    # boundary's send binds, the cut moved off it (without that: 1.39x, a 27 KB/token output
    # over 0.5 Gbit/s; 1.3x and more also on three other draws, now optimal)
    assert exact <= best_obj[1] * 1.3
    if objective == "cost":
        assert cost_lower_bound(inst) <= best_obj[1] * (1 + 1e-9)


def test_greedy_optimal_on_a_two_domain_case():
    # two domains, the model fits in one: the best plan avoids the slow WAN
    inst = make_instance([("a", 4), ("b", 4)], [("a", "b", 1.0, 50.0)], global_batch_size=8)
    best_est, _, best_plan = brute_force(inst)
    plan = greedy(inst)
    assert float(Evaluator(inst, plan).estimate_times()[0]) <= best_est * 1.05
