"""What the packaged instances' uplinks change (issue 24): each instance with
``uplink_gbps`` planned by greedy without its uplinks and with them, every plan
simulated under SPEC v3 (the evaluator, ``spec=3``).

Columns: the greedy plan of the instance without uplinks and its simulated
time T there ("before"); the same plan's T once the uplinks cap it ("old plan,
uplinks"); the greedy plan of the instance as packaged, with uplinks, and its T
("after"); after / before; and, over RANDOM_PLANS random feasible plans
(``planner.bench.random_plan``, seeds 0..), T with uplinks / T without: median and
largest.  Also tiny-3dc with and without the alpha-gamma link
it had until SPEC v3 (the relay it forces).

    python benchmarks/uplinks.py            # writes benchmarks/results/uplinks.md
    python instances/_generate.py           # then copies that table into instances/README.md

Greedy plans under the package's default SPEC version (3 once DEFAULT_SPEC is 3);
the times are the evaluator's under SPEC v3 whatever the default.
"""

from __future__ import annotations

import sys
import time

from _results import commit, save  # noqa: E402  (benchmarks/ is on sys.path when run as a script)
from planner import load_instance, plan
from planner.bench import random_plan
from planner.problem.files import available
from planner.problem.instance import Instance
from planner.scoring.evaluator import Evaluator

SPEC = 3
RANDOM_PLANS = 40


def without_uplinks(inst: Instance) -> Instance:
    """``inst`` with no domain's ``uplink_gbps`` (no cap).

    >>> without_uplinks(load_instance("two-dc", spec=3)).domains[0].uplink_gbps is None  # doctest: +SKIP
    True
    """
    data = inst.to_dict()
    for d in data["domains"]:
        d.pop("uplink_gbps", None)
    return Instance.from_dict(data)


def simulated_s(inst: Instance, p) -> float:
    """The plan's iteration time (s) by the SPEC v3 evaluator on ``inst``'s base network."""
    return Evaluator(inst, p, spec=SPEC).evaluate().iteration_time_s


def shape(p) -> str:
    doms = sorted({d for row in p.placement for d in row})
    return (f"{p.replicas}x{p.num_stages}x{p.tp} b={p.micro_batch_size} {p.schedule_kind}, "
            f"{len(doms)} domain{'s' if len(doms) > 1 else ''}")


def random_ratios(before: Instance, after: Instance, n: int) -> list[float]:
    """T on ``after`` / T on ``before`` of the random plans of seeds 0..n-1 (sorted)."""
    out = []
    for seed in range(n):
        p = random_plan(before, seed=seed)
        if p is not None:
            out.append(simulated_s(after, p) / simulated_s(before, p))
    return sorted(out)


def row(name: str, before: Instance, after: Instance, what: str) -> tuple[str, float]:
    t0 = time.perf_counter()
    p_before, p_after = plan(before, "greedy"), plan(after, "greedy")
    t_before, t_old, t_after = simulated_s(before, p_before), simulated_s(after, p_before), simulated_s(after, p_after)
    r = random_ratios(before, after, RANDOM_PLANS)
    rand = f"{r[len(r) // 2]:.3f} / {r[-1]:.3f} ({len(r)})" if r else "none"
    line = (f"| {name} | {what} | {shape(p_before)} | {t_before:.4g} | {t_old:.4g} ({t_old / t_before:.3f}x) | "
            f"{shape(p_after)} | {t_after:.4g} | {t_after / t_before:.3f} | {rand} |")
    return line, time.perf_counter() - t0


def uplink_range(inst: Instance) -> str:
    ups = sorted({d.uplink_gbps for d in inst.domains if d.uplink_gbps is not None})
    return f"{ups[0]:,.0f}" if len(ups) == 1 else f"{ups[0]:,.0f}-{ups[-1]:,.0f}"


def main() -> int:
    t_all = time.perf_counter()
    lines = [
        f"Code: {commit()}; greedy (seed 0) on each instance without and with its `uplink_gbps`; every T is the "
        f"SPEC v{SPEC} evaluator's simulated iteration time in seconds, on the base network.",
        "",
        "| instance | uplink Gbit/s | greedy plan without uplinks (R x S x t) | T before | that plan with uplinks "
        "| greedy plan with uplinks | T after | after / before | random plans: median / largest ratio (n) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name in available("instances"):
        after = load_instance(name, spec=SPEC)
        if not any(d.uplink_gbps is not None for d in after.domains):
            continue
        line, dt = row(name, without_uplinks(after), after, uplink_range(after))
        lines.append(line)
        print(line, f"({dt:.1f} s)", flush=True)
    tiny = load_instance("tiny-3dc", spec=SPEC)
    linked = tiny.with_link("alpha", "gamma", bandwidth_gbps=1.0, latency_ms=8.0)
    line, _ = row("tiny-3dc", linked, tiny, "none")
    lines += [
        "",
        "tiny-3dc before: with the alpha-gamma link it had until SPEC v3 (1 Gbit/s, 8 ms, which v3 routes "
        "over); after: as packaged, without it (alpha-gamma relays via beta).",
        "",
        "| instance | uplink Gbit/s | greedy plan with the alpha-gamma link | T before | that plan without it "
        "| greedy plan without it | T after | after / before | random plans: median / largest ratio (n) |",
        "|---|---|---|---|---|---|---|---|---|",
        line,
        "",
        f"{time.perf_counter() - t_all:.0f} s in all.",
    ]
    print(line)
    print(save("uplinks", lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
