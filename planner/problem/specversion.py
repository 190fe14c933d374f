"""Which version of the performance model (SPEC) the package uses by default.

The evaluator, the bounds and the planners implement SPEC v3 changes (a)-(f)
and, chosen per call with ``spec=2``, SPEC v2 (docs/model.md, section 10).
The default is 3.  This is the one place the default is set;
``planner.scoring.DEFAULT_SPEC`` is the same constant (it lives here, below
the scoring family, because loading an instance consults it too).

An instance that uses a field only v3 gives meaning to is refused when SPEC v2
is asked for, so that nothing ignores such a field silently:

>>> v3_only_fields({"domains": [{"name": "a", "uplink_gbps": 400.0}]})
['domains[0].uplink_gbps']
"""

from __future__ import annotations

DEFAULT_SPEC = 3
SPECS = (2, 3)


def check_spec(spec: int | None) -> int:
    """``spec`` (``None``: :data:`DEFAULT_SPEC`) checked to be a known version."""
    spec = DEFAULT_SPEC if spec is None else spec
    if spec not in SPECS:
        raise ValueError(f"spec is one of {', '.join(map(str, SPECS))}, not {spec!r}")
    return spec


def v3_only_fields(data) -> list[str]:
    """Dotted paths of the fields of instance ``data`` (a dict shaped like the file,
    or an :class:`~planner.problem.instance.Instance`) that only SPEC v3 models:
    a domain's ``uplink_gbps``, ``workload.gradient_sync = "reduce_broadcast"``,
    ``gpu.unit_overhead_ms > 0``, ``[[gpus]]`` and a domain's ``gpu`` (change (g)),
    ``[options] dp_sync``, ``[[quality]]`` and a non-default ``[compression]``
    (section 11).  Defaults (absent, ``"ring"``, 0) are v2's."""
    def get(obj, key, default=None):
        return obj.get(key, default) if isinstance(obj, dict) else getattr(obj, key, default)

    out = []
    gpu = data.get("gpu") if isinstance(data, dict) else getattr(data, "gpu_table", None)
    if gpu is not None and get(gpu, "unit_overhead_ms") not in (0, None):
        out.append("gpu.unit_overhead_ms")
    if get(data, "gpus") is not None:
        out.append("gpus")
    for i, d in enumerate(get(data, "domains") or ()):
        if get(d, "uplink_gbps") is not None:
            out.append(f"domains[{i}].uplink_gbps")
        if get(d, "gpu") is not None:
            out.append(f"domains[{i}].gpu")
    wl = get(data, "workload")
    if wl is not None and get(wl, "gradient_sync", "ring") != "ring":
        out.append("workload.gradient_sync")
    opt = get(data, "options")
    if opt is not None and get(opt, "dp_sync") is not None:  # section 11
        out.append("options.dp_sync")
    if get(data, "quality"):
        out.append("quality")
    comp = get(data, "compression")
    if comp is not None and (get(comp, "codec_gbps") is not None
                             or get(comp, "outer_state_bytes_per_param", 8.0) != 8.0):
        out.append("compression")
    return out


def refuse_v3_fields(data, spec: int | None = None) -> None:
    """Raise ``InputError`` naming the first v3-only field of ``data`` when the
    version asked for (``spec``, default :data:`DEFAULT_SPEC`) is 2."""
    from .errors import InputError

    if check_spec(spec) >= 3:
        return
    used = v3_only_fields(data)
    if used:
        raise InputError("a SPEC v3 field; SPEC v2 does not model it (spec=2 was asked for; the default, "
                         "SPEC v3, does: docs/model.md, section 10)", used[0])


def without_v3_fields(instance):
    """``instance`` with every v3-only field at its v2 default (no ``uplink_gbps``,
    ``gradient_sync = "ring"``, ``unit_overhead_ms = 0``; with one GPU type used by
    every domain, that type as ``[gpu]``): what SPEC v2 can read.  ``instance`` itself
    when it has none.  Raises ``InputError`` when the domains have several GPU types.  For features that follow v2 on purpose
    (the RL policy's observation), never for scores."""
    if not v3_only_fields(instance):
        return instance
    data = instance.to_dict()
    data["workload"]["model"] = instance.workload.model
    for d in data["domains"]:
        d.pop("uplink_gbps", None)
    data["workload"]["gradient_sync"] = "ring"
    data["gpu"] = dict(instance.gpu.model_dump(exclude_none=True), unit_overhead_ms=0.0)  # one type
    data.pop("gpus", None)
    data["options"].pop("dp_sync", None)
    data.pop("quality", None)
    data.pop("compression", None)
    for d in data["domains"]:
        d.pop("gpu", None)
    return type(instance).from_dict(data)

