"""The map at national scale: above MAP_DOMAIN_LABELS domains it labels regions
(the plan's first), draws no per-link labels, and no two labels overlap."""

from planner import load_instance, plan as make_plan
from planner.problem.files import toml_text
from planner.problem.synthetic import generate_instance, header


def test_large_map_labels_regions(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from planner.presentation.plot import MAP_DOMAIN_LABELS, MAP_REGION_LABELS, draw

    data = generate_instance(90, 90 * 256, 4, clusters=18)
    path = tmp_path / "g.toml"
    path.write_text(toml_text(data, header(data, "test")))
    inst = load_instance(path)
    assert len(inst.domains) > MAP_DOMAIN_LABELS
    p = make_plan(inst, solver="greedy")
    fig = draw(inst, p)
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    ax = fig.axes[0]
    regions = [t for t in ax.texts if t.get_gid() == "region-label"]
    assert len(regions) == MAP_REGION_LABELS < 18
    used_regions = {inst.domain(d).region for d in p.gpus_per_domain()}
    assert all(any(reg in t.get_text() for t in regions) for reg in used_regions)
    texts = [t for t in ax.texts if t.get_gid() in ("region-label", "domain-label", "flow-label")]
    boxes = [t.get_window_extent(r) for t in texts] + [ax.title.get_window_extent(r)]
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            assert not (min(a.x1, b.x1) - max(a.x0, b.x0) > 0 and min(a.y1, b.y1) - max(a.y0, b.y0) > 0)
    assert not [t for t in ax.texts if t.get_gid() == "link-label"]
    plt.close(fig)
