"""Sub-fleets of an instance: the same instance on a subset of its domains.

A plan of a sub-fleet is a plan of the whole instance (the same GPUs, links and
model; a domain left out is simply unused), so planning each GPU type's
domains alone gives starting points and a floor for a mixed fleet (SPEC v3 (g)):
the mixed fleet's best plan is never slower than any sub-fleet's.

>>> [(name, len(sub.domains)) for name, sub in type_subfleets(mixed)]   # doctest: +SKIP
[('H100-SXM-80GB', 3), ('A100-40GB', 3)]
"""

from __future__ import annotations

from .errors import InputError
from .instance import Instance


def subfleet(instance: Instance, keep, name: str | None = None) -> Instance:
    """``instance`` on the domains named in ``keep`` (file order), with the links between
    them; raises ``InputError`` when that is not an instance (no domain, or a WAN that is
    not connected without the others)."""
    keep = set(keep)
    data = instance.to_dict()
    data["workload"]["model"] = instance.workload.model
    if name is not None:
        data["name"] = name
    data["domains"] = [d for d in data["domains"] if d["name"] in keep]
    data["links"] = [e for e in data.get("links", []) if e["a"] in keep and e["b"] in keep]
    if not data["domains"]:
        raise InputError("no domain left", "domains")
    return Instance.from_dict(data)


def type_subfleets(instance: Instance) -> list[tuple[str, Instance]]:
    """For each GPU type the domains use, ``(type name, the instance on that type's domains
    alone)``, skipping a type whose domains are not an instance alone (their WAN relays
    through other types' domains); ``[]`` for an instance with one type."""
    if not instance.heterogeneous:
        return []
    out = []
    for u in instance.types_used:
        gpu = instance.gpu_types[u].name
        keep = [d.name for d, t in zip(instance.domains, instance.domain_type) if t == u]
        try:
            out.append((gpu, subfleet(instance, keep, name=f"{instance.name}.{gpu}")))
        except InputError:
            continue
    return out
