"""Plans for the packaged GPU-type instances (issue 25), shared by the tests of every family.

Until the planners plan with several GPU types (issue 25, other branches; the registry's
``GPU_TYPE_SOLVERS``), a mixed instance gets a plan built by hand: :func:`hand_plan`, two
stages split at the middle unit, the first on the first domain of the instance's first
type, the second on the first domain of its second type, at the largest tp.  It is
feasible on edwc-mixed, aws-a100-h100 and tiny-mixed (tests/problem/test_packaged_instances.py
checks it).  :func:`plan_any` plans with greedy when greedy can, else builds that plan."""

from __future__ import annotations

MIXED = ("edwc-mixed", "aws-a100-h100", "tiny-mixed")


def hand_plan(inst):
    """Two stages on two domains of different GPU types (see the module docstring)."""
    from planner import Plan

    first: dict[str, str] = {}
    for d in inst.domains:
        first.setdefault(inst.domain_gpu(d.name).name, d.name)
    a, b = list(first.values())[:2]
    n = inst.num_units
    return Plan.build([(0, n // 2), (n // 2, n)], [[a, b]], tp=max(inst.workload.tensor_parallel),
                      micro_batch_size=1, instance=inst)


def plan_any(inst, **kw):
    """greedy's plan (or ``planner.plan``'s with ``kw``), or :func:`hand_plan` for an
    instance with several GPU types while greedy refuses them."""
    from planner import plan
    from planner.solvers.registry import GPU_TYPE_SOLVERS

    if inst.heterogeneous and kw.get("solver", "greedy") not in GPU_TYPE_SOLVERS:
        return hand_plan(inst)
    return plan(inst, **kw)
