"""The national-scale packaged instances (issue 15) load, validate and route fast,
and have the sizes and structure their headers state.  Planning on them is
measured by benchmarks/scale.py, not here."""

import time

import numpy as np
import pytest

from planner import load_instance
from planner.problem import limits

LARGE = {  # name: (domains, regions)
    "edwc-120dc": (120, 10),
    "edwc-300dc": (300, 10),
    "azure-zones": (162, 54),
}


@pytest.mark.parametrize("name", sorted(LARGE))
def test_large_instance_loads_validates_and_routes(name):
    t0 = time.perf_counter()
    inst = load_instance(name)
    routes = inst.routes
    elapsed = time.perf_counter() - t0
    n, regions = LARGE[name]
    assert len(inst.domains) == n
    assert len({d.region for d in inst.domains}) == regions and all(d.region for d in inst.domains)
    assert 20_000 <= inst.total_gpus <= 150_000
    assert inst.workload.model.total_params() > 65e9  # a 70B-class model
    assert len(inst.links) < limits.MAX_LINKS
    assert len(routes) == n * (n - 1)  # connected: a route between every ordered pair
    # routes are symmetric in latency and relay through few hops
    lat = routes.latency_matrix()
    assert np.allclose(lat, lat.T, rtol=1e-12)
    assert routes.hops.max() <= 8
    # the replicas can use a large share of the GPUs: the batch feeds >= 1,000 replicas
    assert inst.workload.global_batch_size >= 2048
    print(f"{name}: {elapsed:.2f} s")  # loading + validation + all routes (goal < 5 s)


def test_edwc_datacenters_inside_clusters_and_gateways():
    inst = load_instance("edwc-300dc")
    region = {d.name: d.region for d in inst.domains}
    metro = [l for l in inst.links if region[l.a] == region[l.b]]
    backbone = [l for l in inst.links if region[l.a] != region[l.b]]
    assert len(backbone) == 2 * 45  # two gateway pairs per cluster pair
    assert all(0.2 <= l.latency_ms <= 2.0 for l in metro)
    assert all(2.0 <= l.latency_ms <= 20.0 for l in backbone)
    # backbone links join gateways (dc00, dc01) only
    assert {l.a.rsplit("-", 1)[1] for l in backbone} | {l.b.rsplit("-", 1)[1] for l in backbone} == {"dc00", "dc01"}
    sizes = {}
    for d in inst.domains:
        sizes[d.region] = sizes.get(d.region, 0) + 1
        assert 64 <= d.gpus <= 2048 and d.gpus % 64 == 0
    assert min(sizes.values()) >= 4
