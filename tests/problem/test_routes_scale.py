"""The array route search (planner.problem.network.shortest_routes) against the
heap-based Dijkstra it replaced (copied below verbatim from main 7c8be23), on every
packaged instance, on generated clustered instances and on random tie-heavy graphs."""

import heapq

import numpy as np
from hypothesis import given, settings, strategies as st

from helpers import make_instance
from planner import load_instance
from planner.problem.instance import Instance
from planner.problem.io import available
from planner.problem.network import shortest_routes
from planner.problem.synthetic import generate_instance


def heap_routes(instance):
    """The previous implementation: {(src, dst): (nodes, links, latency_ms)}."""
    g = instance.graph
    routes = {}
    for src in instance.domain_names:
        best = {}
        heap = [(0.0, 0, (src,), ())]
        while heap:
            lat, hops, path, links = heapq.heappop(heap)
            node = path[-1]
            if node in best:
                continue
            best[node] = (lat, hops, path, links)
            for nbr, data in g[node].items():
                if nbr not in best:
                    new_lat = round(lat + data["latency_ms"], 9)
                    heapq.heappush(heap, (new_lat, hops + 1, path + (nbr,), links + (data["index"],)))
        for dst, (lat, _, path, links) in best.items():
            if dst != src:
                exact = sum(instance.links[i].latency_ms for i in links)
                routes[(src, dst)] = (path, links, exact)
    return routes


def same_routes(inst):
    old = heap_routes(inst)
    new = shortest_routes(inst)
    assert set(new) == set(old) and len(new) == len(old)
    for key, (nodes, links, lat) in old.items():
        r = new[key]
        assert (r.nodes, r.links) == (nodes, links), key
        assert r.latency_ms == lat, key  # bitwise: the same sum in the same order
        assert key in new
    names = inst.domain_names
    assert (names[0], names[0]) not in new and ("nowhere", names[0]) not in new


def test_packaged_instances_route_as_before():
    for name in available("instances"):
        inst = load_instance(name)
        if len(inst.domains) <= 40:  # the large ones: the generated cases below cover their shape
            same_routes(inst)


def test_generated_clustered_instances_route_as_before():
    for n, c, seed in [(40, 4, 0), (60, 3, 1), (25, 1, 2)]:
        data = generate_instance(n, 64 * n, seed=seed, clusters=c)
        data["workload"]["model"] = "tiny"
        same_routes(load_generated(data))


def load_generated(data):
    from planner.problem.files import find_model, load_model
    data = dict(data, workload=dict(data["workload"], model=load_model(find_model(data["workload"]["model"]))))
    return Instance.from_dict(data)


@st.composite
def graphs(draw):
    n = draw(st.integers(2, 9))
    names = draw(st.permutations([f"n{i}" for i in range(12)]))[:n]
    # a spanning path keeps the WAN connected; then random extra links
    order = draw(st.permutations(names))
    pairs = {frozenset(p) for p in zip(order, order[1:])}
    for a in names:
        for b in names:
            if a < b and draw(st.booleans()):
                pairs.add(frozenset((a, b)))
    lat = st.sampled_from([0.0, 0.1, 0.2, 0.3, 1.0, 1.5, 2.0, 3.0, 0.7, 12.34])
    links = [(*sorted(p), 10.0, draw(lat)) for p in sorted(pairs, key=sorted)]
    return make_instance([(x, 8) for x in names], links)


@settings(max_examples=300, deadline=None)
@given(graphs())
def test_random_tie_heavy_graphs_route_as_before(inst):
    same_routes(inst)


def test_bottleneck_matrix():
    inst = make_instance([("a", 8), ("b", 8), ("c", 8)], [("a", "b", 80, 5.0), ("b", "c", 40, 7.0)])
    r = inst.routes
    bw = r.bottleneck_gbps([l.bandwidth_gbps for l in inst.links])
    ia, ib, ic = (inst.domain_index[x] for x in "abc")
    assert bw[ia, ic] == 40 and bw[ia, ib] == 80 and bw[ic, ib] == 40 and np.isinf(bw[ia, ia])


def test_latency_matrix_is_the_routes_sum():
    inst = load_generated(generate_instance(30, 30 * 64, seed=3, clusters=3))
    r = inst.routes
    lat = r.latency_matrix()
    names = inst.domain_names
    for i, a in enumerate(names):
        assert lat[i, i] == 0.0
        for j, b in enumerate(names):
            if i != j:
                assert lat[i, j] == r[(a, b)].latency_ms  # bitwise


def test_what_if_copies_keep_routes_unless_latencies_change():
    inst = make_instance([("a", 8), ("b", 8), ("c", 8)], [("a", "b", 10, 1.0), ("b", "c", 10, 1.0),
                                                           ("a", "c", 10, 5.0)])
    r = inst.routes
    assert inst.with_domain("a", gpus=16).routes is r
    assert inst.with_link("a", "c", bandwidth_gbps=40).routes is r
    moved = inst.with_link("a", "c", latency_ms=1.5)
    assert moved.routes is not r and moved.routes[("a", "c")].nodes == ("a", "c")
    assert r[("a", "c")].nodes == ("a", "b", "c")
