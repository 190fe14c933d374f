"""The instance: GPUs, domains, the WAN and the workload (SPEC section 2).

The classes mirror the instance file one to one (TOML or JSON, SPEC
section 9) and validate everything a user can get wrong: types, ranges,
unknown keys, links naming unknown domains, duplicate names, a WAN that is
not connected, micro-batch sizes that never divide the global batch.  They
are frozen pydantic models, so an ``Instance`` is plain data: no file I/O
happens here (``planner.problem.io`` loads files and resolves model names).

Units follow the files: Gbit/s, milliseconds one way, TFLOP/s, GB; the
``*_bytes_per_s``/``*_s`` helpers convert to SI.

Example
-------
>>> from planner.problem.model import ModelSpec
>>> inst = Instance.from_dict({
...     "name": "toy",
...     "gpu": {"name": "A100", "peak_tflops": 312, "memory_gb": 80, "mfu": 0.5},
...     "domains": [{"name": "a", "gpus": 8, "intra_bandwidth_gbps": 200},
...                 {"name": "b", "gpus": 8, "intra_bandwidth_gbps": 200}],
...     "links": [{"a": "a", "b": "b", "bandwidth_gbps": 100, "latency_ms": 10}],
...     "workload": {"model": ModelSpec(name="m", num_layers=4, hidden_size=256,
...                  ffn_hidden_size=1024, num_heads=4, vocab_size=1000),
...                  "global_batch_size": 8, "seq_len": 128,
...                  "micro_batch_sizes": [1, 2], "tensor_parallel": [1, 2]}})
>>> inst.domain_names
('a', 'b')
"""

from __future__ import annotations

from functools import cached_property
from typing import Annotated, Any, Callable, Literal

import networkx as nx
from pydantic import (BaseModel, ConfigDict, Field, ValidationError, ValidationInfo,
                      field_validator)

from . import limits as L
from .errors import InputError, input_error_from_pydantic
from .dpsync import MAX_H, Compression, Mode, QualityRow
from .exact import exact_types
from .model import ModelSpec, Unit
from .names import Name
from .views import view


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)  # floats are finite
    _exact = field_validator("*", mode="before")(exact_types)  # no true for 1, no "16" for 16 (issue 28)


class GPU(_Strict):
    """A GPU type: ``[gpu]`` (the type of every domain that names none) or an entry
    of ``[[gpus]]`` (SPEC v3, named by a domain's ``gpu``)."""

    name: Name = "GPU"
    peak_tflops: float = Field(gt=0, le=L.MAX_PEAK_TFLOPS, description="dense bf16 peak, TFLOP/s")
    memory_gb: float = Field(gt=0, le=L.MAX_MEMORY_GB, description="memory per GPU, GB")
    mfu: float = Field(gt=0, le=1, description="model-FLOPs utilisation in (0, 1]")
    nvlink_bandwidth_gbps: float | None = Field(
        default=None, gt=0, le=L.MAX_BANDWIDTH_GBPS, allow_inf_nan=False, strict=True,
        description="per-GPU NVLink bandwidth inside a node, one direction, Gbit/s "
                    "(half the datasheet's bidirectional total); absent: TP communication is free")
    unit_overhead_ms: float = Field(
        default=0.0, ge=0, le=L.MAX_UNIT_OVERHEAD_MS, allow_inf_nan=False, strict=True,
        description="SPEC v3: fixed forward time per unit with FLOPs and micro-batch, ms (backward: "
                    "beta times it); does not shrink with tensor parallelism")

    @property
    def flops_per_s(self) -> float:
        """Achieved FLOP/s per GPU: peak * mfu."""
        return self.peak_tflops * 1e12 * self.mfu

    def tp_allreduce_s(self, nbytes, t: int):
        """Seconds to all-reduce ``nbytes`` bytes as a ring over the ``t`` GPUs of one
        node (SPEC 5, v2): ``2 (t - 1) / t * nbytes / B`` with B the NVLink bandwidth in
        bytes/s; 0 when t = 1 or the GPU has no ``nvlink_bandwidth_gbps``.  ``nbytes``
        may be a NumPy array."""
        if t <= 1 or self.nvlink_bandwidth_gbps is None:
            return 0.0 * nbytes
        return 2.0 * (t - 1) / t * nbytes / (self.nvlink_bandwidth_gbps * 1e9 / 8)


class NamedGPU(GPU):
    """An entry of ``[[gpus]]`` (SPEC v3): a GPU type a domain names by ``gpu``; ``name`` required."""

    name: Name


class Domain(_Strict):
    """A datacenter: its GPUs, its internal network and its price."""

    name: Name
    gpus: int = Field(ge=0, le=L.MAX_TOTAL_GPUS,
                      description="GPUs available (>= 1; 0 only in a job's slice, SPEC 10: a domain that relays "
                                  "traffic and hosts no stage)")
    gpus_per_node: int = Field(default=8, ge=1, le=L.MAX_GPUS_PER_NODE)
    intra_bandwidth_gbps: float = Field(gt=0, le=L.MAX_BANDWIDTH_GBPS, description="per-GPU bandwidth inside the domain, Gbit/s")
    price_per_gpu_hour: float = Field(default=0.0, ge=0, le=L.MAX_PRICE)
    region: str = ""
    lat: float | None = Field(default=None, ge=-90, le=90)
    lon: float | None = Field(default=None, ge=-180, le=180)
    utc_offset_hours: float | None = Field(default=None, ge=-12, le=14)
    gpu: str | None = Field(
        default=None, strict=True,
        description="SPEC v3: the name of this domain's GPU type ([gpu] or an entry of [[gpus]]); "
                    "absent: the [gpu] type")
    uplink_gbps: float | None = Field(
        default=None, ge=0, le=L.MAX_BANDWIDTH_GBPS, allow_inf_nan=False, strict=True,
        description="SPEC v3: the most the domain sends to the WAN in total, and separately the most it "
                    "receives from it, Gbit/s (a NIC, a datacenter's WAN port); absent: no cap. > 0; 0 only "
                    "in a job's slice (SPEC 10: a share 0 of the uplink)")


class Link(_Strict):
    """An undirected WAN link, full duplex: ``bandwidth_gbps`` each way."""

    a: str
    b: str
    bandwidth_gbps: float = Field(gt=0, le=L.MAX_BANDWIDTH_GBPS, description="Gbit/s each direction")
    latency_ms: float = Field(ge=0, le=L.MAX_LATENCY_MS, description="one-way latency, ms")


class Workload(_Strict):
    """What is trained: a model, the global batch and the candidate knobs."""

    model: ModelSpec
    global_batch_size: int = Field(ge=1, le=L.MAX_GLOBAL_BATCH, description="sequences per iteration")
    seq_len: int = Field(ge=1, le=L.MAX_SEQ_LEN, description="tokens per sequence")
    micro_batch_sizes: list[int] = Field(min_length=1, max_length=L.MAX_LIST)
    tensor_parallel: list[int] = Field(default=[1], min_length=1, max_length=L.MAX_LIST)
    recompute: bool = False
    gradient_sync: Literal["ring", "reduce_broadcast"] = Field(
        default="ring", description="SPEC v3: gradient synchronisation between replicas, a ring "
                                    "(2(n-1)/n G per member) or a central reduce then broadcast (2 G)")

    @field_validator("model", mode="before", json_schema_input_type=Annotated[str, Field(
        description="a model name (models/NAME.toml, looked up as docs/guide.md says) or a path ending in "
                    ".toml")] | ModelSpec)
    @classmethod
    def _resolve_model(cls, value: Any, info: ValidationInfo):
        if isinstance(value, str):
            resolve: Callable[[str], ModelSpec] | None = (info.context or {}).get("resolve_model")
            if resolve is None:
                raise ValueError(f"model name {value!r} cannot be resolved here; "
                                 "load the instance with planner.load_instance or pass a ModelSpec")
            return resolve(value)
        return value

    @field_validator("micro_batch_sizes", "tensor_parallel")
    @classmethod
    def _positive_unique(cls, values: list[int]):
        for i, v in enumerate(values):
            if v < 1:
                raise ValueError(f"entry {i} is {v}; every entry must be >= 1")
        if len(set(values)) != len(values):
            raise ValueError(f"duplicate entries in {values}")
        return sorted(values)


class Options(_Strict):
    """Planning options (SPEC section 2)."""

    memory_reserve_fraction: float = Field(default=0.10, ge=0, lt=1)
    schedules: list[Literal["1f1b", "gpipe"]] = Field(default=["1f1b", "gpipe"], min_length=1)
    # false: solvers return only the named schedules above, never explicit op lists (tuned in-flight
    # limits, CP-SAT orders): for a framework that runs only named schedules (``planner plan --target``)
    explicit_schedules: bool = True
    max_stages: int | None = Field(default=None, ge=1, le=L.MAX_STAGES)
    objective: Literal["time", "cost"] = "time"
    wan_price_per_gb: float = Field(default=0.0, ge=0, le=L.MAX_PRICE)
    # SPEC v3 section 11: the data-parallel sync modes a plan may use, and the candidates solvers try
    dp_sync: list[Mode] | None = Field(
        default=None, min_length=1, max_length=3,
        description="SPEC v3: sync modes a plan may use (every_step, diloco, streaming); absent: every_step, "
                    "and solvers plan the plain 16-bit sync only (docs/model.md)")
    dp_sync_H: list[Annotated[int, Field(ge=1, le=MAX_H)]] = Field(
        default=[10, 30, 100], min_length=1, max_length=L.MAX_LIST, description="SPEC v3: candidate H")
    dp_sync_bits: list[Annotated[int, Field(ge=1, le=32)]] = Field(
        default=[4, 8, 16], min_length=1, max_length=L.MAX_LIST, description="SPEC v3: candidate bits")
    dp_sync_fragments: list[Annotated[int, Field(ge=1, le=MAX_H)]] = Field(
        default=[1, 2, 4], min_length=1, max_length=L.MAX_LIST, description="SPEC v3: candidate fragments")
    dp_sync_overlap: list[Annotated[int, Field(ge=0, le=MAX_H)]] = Field(
        default=[1], min_length=1, max_length=L.MAX_LIST, description="SPEC v3: candidate overlap")

    @field_validator("dp_sync", "dp_sync_H", "dp_sync_bits", "dp_sync_fragments", "dp_sync_overlap")
    @classmethod
    def _distinct(cls, values: list | None):
        if values is not None and len(set(values)) != len(values):
            raise ValueError(f"duplicate entries in {values}")
        return values

    @property
    def sync_modes(self) -> tuple[str, ...]:
        """The modes a plan may use: ``dp_sync``, or ``("every_step",)`` when absent."""
        return tuple(self.dp_sync) if self.dp_sync is not None else ("every_step",)


class Instance(_Strict):
    """A planning instance; see the module docstring."""

    name: Name
    description: str = ""
    slice_of: str | None = Field(
        default=None, max_length=200,
        description="SPEC 10: the multi-job instance this is one job's slice of (written by "
                    "planner.problem.jobs); a slice may hold domains with 0 GPUs (relays), uplinks at 0 "
                    "and a WAN in pieces")
    # ``[gpu]``: the file's key is ``gpu``; ``Instance.gpu`` is the one type every domain has
    gpu_table: GPU | None = Field(default=None, alias="gpu",
                                  description="the GPU type of every domain that names none")
    gpus: list[NamedGPU] | None = Field(
        default=None, min_length=1, max_length=L.MAX_GPU_TYPES,
        description="SPEC v3: further GPU types, named by a domain's gpu")
    domains: list[Domain] = Field(min_length=1, max_length=L.MAX_DOMAINS)
    links: list[Link] = Field(default=[], max_length=L.MAX_LINKS)
    workload: Workload
    options: Options = Options()
    compression: Compression = Field(default=Compression(), description="SPEC v3 section 11")
    quality: list[QualityRow] = Field(default=[], max_length=L.MAX_LIST,
                                      description="SPEC v3 section 11: quality factors, tried before the defaults")

    # -- construction --------------------------------------------------------
    @classmethod
    def from_dict(cls, data: dict, resolve_model: Callable[[str], ModelSpec] | None = None) -> "Instance":
        """Validate a dict shaped like the instance file; raise ``InputError``.

        ``resolve_model`` maps a model name to a :class:`ModelSpec` (the
        loader passes one that reads ``models/NAME.toml``).  A dict with ``jobs``
        (SPEC 10, several jobs) is refused: it is a
        :class:`planner.problem.jobs.MultiInstance`.
        """
        if isinstance(data, dict) and "jobs" in data and "workload" in data:
            raise InputError("both [workload] (one job) and [[jobs]] (several jobs, SPEC 10); an instance has "
                             "one or the other", "jobs")
        if isinstance(data, dict) and "workload" not in data and "jobs" not in data:
            raise InputError("neither [workload] (one job) nor [[jobs]] (several jobs, SPEC 10)", "workload")
        if isinstance(data, dict) and "jobs" in data:
            raise InputError("this instance lists several jobs ([[jobs]], SPEC 10): plan it with `planner "
                             "multiplan` and score a multi-plan with `planner multievaluate` (planner plan "
                             "and evaluate take one job)", "jobs")
        try:
            inst = cls.model_validate(data, context={"resolve_model": resolve_model})
        except ValidationError as err:
            raise input_error_from_pydantic(err) from None
        inst.check()
        return inst

    def check(self) -> None:
        """Cross-field rules pydantic cannot express; raise ``InputError``."""
        self._check_gpu_types()
        seen: dict[str, int] = {}
        for i, d in enumerate(self.domains):
            if d.name in seen:
                raise InputError(f"duplicate domain name {d.name!r} (also domains[{seen[d.name]}])",
                                 f"domains[{i}].name")
            seen[d.name] = i
            if self.slice_of is None and d.gpus < 1:
                raise InputError(f"{d.gpus} GPUs; a domain has at least 1 (0 only in a job's slice of a "
                                 "multi-job instance, SPEC 10)", f"domains[{i}].gpus")
            if self.slice_of is None and d.uplink_gbps is not None and d.uplink_gbps <= 0:
                raise InputError(f"uplink_gbps must be > 0 (got {d.uplink_gbps!r}; 0 only in a job's slice, "
                                 "SPEC 10)", f"domains[{i}].uplink_gbps")
        if self.total_gpus < 1:
            raise InputError("no GPUs in any domain", "domains")
        if self.total_gpus > L.MAX_TOTAL_GPUS:
            raise InputError(f"{self.total_gpus} GPUs in all domains together; at most {L.MAX_TOTAL_GPUS:.0e} "
                             f"({L.REASONS['gpus']})", "domains")
        pairs: dict[frozenset, int] = {}
        for i, link in enumerate(self.links):
            for end in ("a", "b"):
                if getattr(link, end) not in seen:
                    raise InputError(f"link names unknown domain {getattr(link, end)!r}; "
                                     f"known: {', '.join(seen)}", f"links[{i}].{end}")
            if link.a == link.b:
                raise InputError(f"link joins {link.a!r} to itself", f"links[{i}].b")
            key = frozenset((link.a, link.b))
            if key in pairs:
                raise InputError(f"duplicate link {link.a}-{link.b} (also links[{pairs[key]}])",
                                 f"links[{i}]")
            pairs[key] = i
        if len(self.domains) > 1 and self.slice_of is None:  # a slice's WAN may be in pieces (SPEC 10)
            g = self.graph
            if not nx.is_connected(g):
                parts = sorted(sorted(c) for c in nx.connected_components(g))
                raise InputError("the WAN is not connected: "
                                 + " | ".join(", ".join(c) for c in parts), "links")
        wl = self.workload
        for i, b in enumerate(wl.micro_batch_sizes):
            if wl.global_batch_size % b:
                raise InputError(f"micro-batch size {b} never divides global_batch_size="
                                 f"{wl.global_batch_size}", f"workload.micro_batch_sizes[{i}]")
        max_node = max(d.gpus_per_node for d in self.domains)
        for i, t in enumerate(wl.tensor_parallel):
            if t > max_node:
                raise InputError(f"tensor-parallel degree {t} exceeds every domain's gpus_per_node "
                                 f"(largest {max_node})", f"workload.tensor_parallel[{i}]")

    def _check_gpu_types(self) -> None:
        """SPEC 9: a GPU table; type names unique over ``[gpu]`` and ``[[gpus]]``; every
        domain's ``gpu`` naming a type, and given when there is no ``[gpu]``."""
        if self.gpu_table is None and self.gpus is None:
            raise InputError("no GPU type: give [gpu] (the type of every domain) or [[gpus]] "
                             "(types the domains name by gpu)", "gpu")
        names: dict[str, str] = {}
        if self.gpu_table is not None:
            names[self.gpu_table.name] = "gpu.name"
        for i, g in enumerate(self.gpus or ()):
            if g.name in names:
                raise InputError(f"duplicate GPU type name {g.name!r} (also {names[g.name]})",
                                 f"gpus[{i}].name")
            names[g.name] = f"gpus[{i}].name"
        for i, d in enumerate(self.domains):
            if d.gpu is None:
                if self.gpu_table is None:
                    raise InputError("no gpu given and the instance has no [gpu] table; name one of "
                                     + ", ".join(names), f"domains[{i}].gpu")
            elif d.gpu not in names:
                raise InputError(f"unknown GPU type {d.gpu!r}; known: {', '.join(names)}",
                                 f"domains[{i}].gpu")

    # -- GPU types (SPEC v3: [[gpus]] and a domain's gpu) ---------------------
    @cached_property
    def gpu_types(self) -> tuple[GPU, ...]:
        """Every GPU type: ``[gpu]`` first (when given), then ``[[gpus]]`` in file order."""
        return ((self.gpu_table,) if self.gpu_table is not None else ()) + tuple(self.gpus or ())

    @cached_property
    def domain_type(self) -> tuple[int, ...]:
        """Index into :attr:`gpu_types` of every domain's type, in domain order.

        >>> inst.domain_type          # doctest: +SKIP
        (0, 0, 1)
        """
        index = {g.name: i for i, g in enumerate(self.gpu_types)}
        return tuple(0 if d.gpu is None else index[d.gpu] for d in self.domains)

    def domain_gpu(self, name: str) -> GPU:
        """The GPU type of domain ``name``."""
        return self.gpu_types[self.domain_type[self.domain_index[name]]]

    @property
    def types_used(self) -> tuple[int, ...]:
        """Indices into :attr:`gpu_types` of the types some domain has, ascending."""
        return tuple(sorted(set(self.domain_type)))

    @property
    def heterogeneous(self) -> bool:
        """Whether the domains have more than one GPU type."""
        return len(self.types_used) > 1

    @property
    def gpu(self) -> GPU:
        """The GPU type of every domain (with only ``[gpu]``: that table).

        Raises ``InputError`` naming a domain's ``gpu`` when the domains have several
        types: code that models one type must not silently take one of them."""
        used = self.types_used
        if len(used) > 1:
            i = next(i for i, t in enumerate(self.domain_type) if t != self.domain_type[0])
            raise InputError("the domains have several GPU types ("
                             + ", ".join(self.gpu_types[t].name for t in used)
                             + "); this part of planner models one GPU type for every domain",
                             f"domains[{i}].gpu")
        return self.gpu_types[used[0]]

    @property
    def gpu_counts(self) -> str:
        """GPUs per type in words: ``"36 x A100"``, or ``"24 x A100 + 12 x H100"`` (types in
        :attr:`gpu_types` order)."""
        count = {u: 0 for u in self.types_used}
        for d, u in zip(self.domains, self.domain_type):
            count[u] += d.gpus
        return " + ".join(f"{n} x {self.gpu_types[u].name}" for u, n in count.items())

    def memory_limit_of(self, gpu: GPU) -> float:
        """Usable bytes per GPU of type ``gpu``: memory_gb * 1e9 * (1 - reserve)."""
        return gpu.memory_gb * 1e9 * (1 - self.options.memory_reserve_fraction)

    # -- derived data (cached; the object is frozen) -------------------------
    @property
    def domain_names(self) -> tuple[str, ...]:
        return tuple(d.name for d in self.domains)

    @cached_property
    def domain_index(self) -> dict[str, int]:
        return {d.name: i for i, d in enumerate(self.domains)}

    @cached_property
    def graph(self) -> nx.Graph:
        """The WAN as a networkx graph; edge attribute ``index`` = link position."""
        g = nx.Graph()
        g.add_nodes_from(self.domain_names)
        for i, link in enumerate(self.links):
            g.add_edge(link.a, link.b, index=i, latency_ms=link.latency_ms,
                       bandwidth_gbps=link.bandwidth_gbps)
        return g

    @cached_property
    def units(self) -> tuple[Unit, ...]:
        """The model's units for this workload's sequence length and recompute."""
        wl = self.workload
        return tuple(wl.model.units(wl.seq_len, wl.recompute))

    @cached_property
    def routes(self):
        """Route for every ordered pair of domains (``planner.problem.network.Route``)."""
        from .network import shortest_routes
        return shortest_routes(self)

    @cached_property
    def direct_routes(self):
        """SPEC v3 routes: a linked pair uses its link, every other pair as ``routes``."""
        return self.routes.with_direct_links()

    def routes_for(self, spec: int):
        """The routes of SPEC version ``spec``: ``routes`` (2) or ``direct_routes`` (3)."""
        return self.direct_routes if spec >= 3 else self.routes

    @property
    def num_units(self) -> int:
        return len(self.units)

    @property
    def max_stages(self) -> int:
        """Largest admissible number of stages (option, capped by the unit count)."""
        m = self.options.max_stages
        return min(m, self.num_units) if m else self.num_units

    @property
    def total_gpus(self) -> int:
        return sum(d.gpus for d in self.domains)

    @property
    def memory_limit_bytes(self) -> float:
        """Usable memory per GPU: memory_gb * 1e9 * (1 - reserve) of :attr:`gpu`, the one
        type of every domain (``InputError`` with several types: see :meth:`memory_limit_of`)."""
        return self.memory_limit_of(self.gpu)

    def domain(self, name: str) -> Domain:
        return self.domains[self.domain_index[name]]

    # -- display ---------------------------------------------------------------
    def __str__(self) -> str:
        return view("instance_text")(self)

    def _repr_html_(self) -> str:
        return view("instance_html")(self)

    def draw(self, plan=None, **kwargs):
        """The domains and WAN links, with a plan's flows (see :func:`planner.presentation.plot.draw`)."""
        return view("draw")(self, plan, **kwargs)

    # -- what-if: new, validated instances (this one is never changed) -------
    def _replace(self, data: dict) -> "Instance":
        new = Instance.from_dict(data)
        # routes depend on the domain names and the links' ends and latencies only: a what-if
        # that keeps them (a domain's GPUs or bandwidth, a link's bandwidth) keeps the routes
        if "routes" in self.__dict__ and new._route_key() == self._route_key():
            new.__dict__["routes"] = self.routes
        return new

    def _route_key(self) -> tuple:
        return self.domain_names, tuple((l.a, l.b, l.latency_ms) for l in self.links)

    def to_dict(self) -> dict:
        """The instance as a dict shaped like the file (model inlined)."""
        return self.model_dump(by_alias=True, exclude_none=True)

    def with_link(self, a: str, b: str, *, bandwidth_gbps: float | None = None,
                  latency_ms: float | None = None) -> "Instance":
        """A copy with link a-b changed (or added when it does not exist).

        >>> fast = inst.with_link("north", "south", bandwidth_gbps=400)   # doctest: +SKIP
        """
        data = self.to_dict()
        for link in data["links"]:
            if {link["a"], link["b"]} == {a, b}:
                if bandwidth_gbps is not None:
                    link["bandwidth_gbps"] = bandwidth_gbps
                if latency_ms is not None:
                    link["latency_ms"] = latency_ms
                return self._replace(data)
        if bandwidth_gbps is None or latency_ms is None:
            raise InputError(f"no link {a}-{b}; to add one give both bandwidth_gbps and latency_ms", "links")
        data["links"].append({"a": a, "b": b, "bandwidth_gbps": bandwidth_gbps, "latency_ms": latency_ms})
        return self._replace(data)

    def without_link(self, a: str, b: str) -> "Instance":
        """A copy without link a-b (the WAN must stay connected)."""
        data = self.to_dict()
        data["links"] = [l for l in data["links"] if {l["a"], l["b"]} != {a, b}]
        return self._replace(data)

    def with_domain(self, name: str, **changes) -> "Instance":
        """A copy with domain ``name``'s fields changed (gpus, price_per_gpu_hour ...)."""
        if name not in self.domain_index:
            raise InputError(f"unknown domain {name!r}", "domains")
        data = self.to_dict()
        data["domains"][self.domain_index[name]].update(changes)
        return self._replace(data)

    def with_model(self, model) -> "Instance":
        """A copy training another model: a ``ModelSpec`` or the name of a model file."""
        if isinstance(model, str):
            from .files import find_model, load_model

            path = find_model(model)
            if path is None:
                raise InputError(f"no model named {model!r}", "workload.model")
            model = load_model(path)
        data = self.to_dict()
        data["workload"]["model"] = model
        return self._replace(data)

    def with_workload(self, **changes) -> "Instance":
        """A copy with workload fields changed (global_batch_size, seq_len ...)."""
        data = self.to_dict()
        data["workload"].update(changes)
        return self._replace(data)

    def with_options(self, **changes) -> "Instance":
        """A copy with options changed (objective, max_stages ...)."""
        data = self.to_dict()
        data["options"].update(changes)
        return self._replace(data)
