"""Small WAN-bound instances and whole-replica plans for the dp_sync tests (SPEC v3
section 11): a per-step sync over the WAN costs far more than the compute."""

from __future__ import annotations

from planner import Plan
from tests.helpers import make_instance, tiny_model

MODES = ["every_step", "diloco", "streaming"]


def wan_bound(bandwidth=1.0, latency=30.0, options=None, quality=None, price=1.0, **wl):
    """Three datacenters of 8 GPUs joined by slow links: a per-step sync over the WAN
    costs far more than the compute (a 12.6M-parameter model, 25 MB of gradients)."""
    opts = {"dp_sync": MODES, "dp_sync_H": [5, 20], "dp_sync_bits": [4, 16], "dp_sync_fragments": [1, 2]}
    opts.update(options or {})
    inst = make_instance([("a", 8, price), ("b", 8, price), ("c", 8, price)],
                         [("a", "b", bandwidth, latency), ("b", "c", bandwidth, latency),
                          ("a", "c", bandwidth, latency)],
                         model=tiny_model(layers=4, hidden=512, vocab=1000), options=opts,
                         **{"global_batch_size": 24, "micro_batch_sizes": [1, 2], "tensor_parallel": [1, 2], **wl})
    if quality is not None:
        data = inst.to_dict()
        data["quality"] = quality
        inst = type(inst).from_dict(data)
    return inst


def local(inst, per_domain=(1, 1, 1), stages=1, tp=1, b=1):
    """Whole replicas per datacenter: ``per_domain[i]`` replicas of ``stages`` equal
    stages in domain a, b, c."""
    rows = [[d] * stages for d, n in zip("abc", per_domain) for _ in range(n)]
    n = inst.num_units
    cuts = [(round(k * n / stages), round((k + 1) * n / stages)) for k in range(stages)]
    return Plan.build(cuts, rows, tp=tp, micro_batch_size=b, instance=inst)
