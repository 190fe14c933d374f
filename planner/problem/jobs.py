"""Several jobs sharing the datacenters (SPEC v3 section 10): the ``[[jobs]]`` instance.

An instance file with ``[[jobs]]`` (and no ``[workload]``) lists training jobs
that share the domains' GPUs and the WAN.  :class:`MultiInstance` mirrors that
file: the cluster of :class:`~planner.problem.instance.Instance` (``[gpu]``,
``[[gpus]]``, ``[[domains]]``, ``[[links]]``, ``[options]``, ``[compression]``,
``[[quality]]``) and ``jobs``, each a :class:`JobSpec` (the keys of
``[workload]`` plus ``name``, ``iterations``, ``weight``, ``deadline_hours``,
``allowed_domains``, ``max_gpus``).  ``[options] multi_objective`` (one of
:data:`OBJECTIVES`, default ``"maxmin"``) lives in :class:`MultiOptions`.

A job is planned and scored as a one-job :class:`Instance`:

- :meth:`MultiInstance.job_instance` -- job j alone on the whole cluster
  (every GPU of its allowed domains, every link at full bandwidth);
- :meth:`MultiInstance.slice_instance` -- job j on its *slice*: g GPUs per
  domain, each link at share * bandwidth (share 0: the link is removed and the
  routes are computed on what remains), each uplink at share * uplink_gbps.

**Domains without GPUs.** A slice keeps every domain of the cluster, also
those where the job holds no GPU: traffic between two of its domains may pass
through them.  Such a domain has ``gpus = 0`` (a *relay*): no stage can be
placed there (a plan using it breaks ``gpu_capacity``; every planner sees
0 slots).  A one-job instance refuses ``gpus = 0``, an uplink at 0 and a WAN
in pieces; an instance with ``slice_of`` set (what this module builds) accepts
them.  The same holds for ``job_instance`` when a job's ``allowed_domains``
leave some domain out.  docs/model.md, section "Several jobs", says why.

Example
-------
>>> minst = load_multi_instance("two-jobs")                   # doctest: +SKIP
>>> [j.name for j in minst.jobs]                               # doctest: +SKIP
['small', 'wide']
>>> minst.job_instance("small").total_gpus                     # doctest: +SKIP
36
>>> g, beta, u = equal_slice(minst, 0)                         # doctest: +SKIP
>>> g                                                          # doctest: +SKIP
{'alpha': 8, 'beta': 4, 'gamma': 6}
>>> minst.slice_instance(0, g, beta, u).links[0].bandwidth_gbps    # doctest: +SKIP
5.0
"""

from __future__ import annotations

from typing import Callable, Literal

from pydantic import Field, ValidationError

from . import limits as L
from .dpsync import Compression, QualityRow
from .errors import InputError, input_error_from_pydantic
from .instance import GPU, Domain, Instance, Link, NamedGPU, Options, Workload, _Strict
from .model import ModelSpec
from .names import Name

OBJECTIVES = ("maxmin", "weighted", "deadline", "cost", "makespan")
"""The five multi-job objectives of SPEC 10 (``[options] multi_objective``)."""

MAX_WEIGHT = 1e6
MAX_DEADLINE_HOURS = 1e7  # about 1,100 years

WORKLOAD_KEYS = tuple(Workload.model_fields)


class MultiOptions(Options):
    """``[options]`` of a ``[[jobs]]`` instance: :class:`Options` and ``multi_objective``."""

    multi_objective: Literal["maxmin", "weighted", "deadline", "cost", "makespan"] = Field(
        default="maxmin", description="SPEC 10: maxmin (default), weighted, deadline, cost or makespan")


class JobSpec(Workload):
    """One ``[[jobs]]`` entry: the keys of ``[workload]`` and the job's own (SPEC 10)."""

    name: Name
    iterations: int = Field(ge=1, le=L.MAX_ITERATIONS, description="the job's length in iterations")
    weight: float = Field(default=1.0, gt=0, le=MAX_WEIGHT, description="w_j > 0")
    deadline_hours: float | None = Field(default=None, gt=0, le=MAX_DEADLINE_HOURS,
                                         description="hours from the common start (0); absent: none")
    allowed_domains: list[str] | None = Field(default=None, min_length=1, max_length=L.MAX_DOMAINS,
                                              description="domains that may hold its GPUs; absent: all "
                                                          "(its traffic may pass through others)")
    max_gpus: int | None = Field(default=None, ge=1, le=L.MAX_TOTAL_GPUS,
                                 description="most GPUs it may be allocated; absent: no limit")

    def workload_dict(self) -> dict:
        """The ``[workload]`` table of this job (the model as a :class:`ModelSpec`)."""
        return {k: getattr(self, k) for k in WORKLOAD_KEYS}


def link_key(link) -> str:
    """A link's key in a multi-plan, ``"a|b"`` with a and b as the instance gives them.

    >>> link_key(Link(a="north", b="south", bandwidth_gbps=1.0, latency_ms=1.0))
    'north|south'
    """
    return f"{link.a}|{link.b}"


class MultiInstance(_Strict):
    """An instance with ``[[jobs]]`` (SPEC 10); see the module docstring."""

    name: Name
    description: str = ""
    gpu_table: GPU | None = Field(default=None, alias="gpu",
                                  description="the GPU type of every domain that names none")
    gpus: list[NamedGPU] | None = Field(default=None, min_length=1, max_length=L.MAX_GPU_TYPES,
                                        description="SPEC v3: further GPU types, named by a domain's gpu")
    domains: list[Domain] = Field(min_length=1, max_length=L.MAX_DOMAINS)
    links: list[Link] = Field(default=[], max_length=L.MAX_LINKS)
    jobs: list[JobSpec] = Field(min_length=1, max_length=L.MAX_DOMAINS, description="SPEC 10: the jobs")
    options: MultiOptions = MultiOptions()
    compression: Compression = Field(default=Compression(), description="SPEC v3 section 11")
    quality: list[QualityRow] = Field(default=[], max_length=L.MAX_LIST,
                                      description="SPEC v3 section 11: quality factors, tried before the defaults")

    # -- construction --------------------------------------------------------
    @classmethod
    def from_dict(cls, data: dict, resolve_model: Callable[[str], ModelSpec] | None = None) -> "MultiInstance":
        """Validate a dict shaped like a ``[[jobs]]`` instance file; raise ``InputError``
        naming the field (``jobs[1].iterations``)."""
        if not isinstance(data, dict):
            raise InputError("an instance file holds one table")
        if "jobs" not in data:
            raise InputError("no [[jobs]]: a one-job instance ([workload]) is planned by planner plan and scored "
                             "by planner evaluate", "jobs")
        if "workload" in data:
            raise InputError("both [workload] (one job) and [[jobs]] (several jobs, SPEC 10); an instance has "
                             "one or the other", "workload")
        try:
            minst = cls.model_validate(data, context={"resolve_model": resolve_model})
        except ValidationError as err:
            raise input_error_from_pydantic(err) from None
        minst.check()
        return minst

    def check(self) -> None:
        """Cross-field rules (SPEC 9): unique job names, known allowed domains holding
        GPUs, and each job valid alone on the cluster (the rules of a one-job
        instance, its ``workload.X`` fields named ``jobs[i].X``)."""
        seen: dict[str, int] = {}
        domains = {d.name: d for d in self.domains}
        for i, job in enumerate(self.jobs):
            if job.name in seen:
                raise InputError(f"duplicate job name {job.name!r} (also jobs[{seen[job.name]}])",
                                 f"jobs[{i}].name")
            seen[job.name] = i
            if job.allowed_domains is not None:
                named: set[str] = set()
                for k, d in enumerate(job.allowed_domains):
                    if d not in domains:
                        raise InputError(f"unknown domain {d!r}; known: {', '.join(domains)}",
                                         f"jobs[{i}].allowed_domains[{k}]")
                    if d in named:
                        raise InputError(f"domain {d!r} named twice", f"jobs[{i}].allowed_domains[{k}]")
                    named.add(d)
                if not any(domains[d].gpus for d in job.allowed_domains):
                    raise InputError("the allowed domains hold no GPU", f"jobs[{i}].allowed_domains")
        for i in range(len(self.jobs)):
            self.job_instance(i)  # the cluster's rules and the job's workload rules

    # -- jobs ------------------------------------------------------------------
    @property
    def job_names(self) -> tuple[str, ...]:
        return tuple(j.name for j in self.jobs)

    def job_index(self, j: int | str) -> int:
        """The position of job ``j`` (an index or a name); ``InputError`` when unknown."""
        if isinstance(j, str):
            for i, job in enumerate(self.jobs):
                if job.name == j:
                    return i
            raise InputError(f"unknown job {j!r}; jobs: {', '.join(self.job_names)}", "jobs")
        if not 0 <= int(j) < len(self.jobs):
            raise InputError(f"no job {j} (there are {len(self.jobs)})", "jobs")
        return int(j)

    def job(self, j: int | str) -> JobSpec:
        return self.jobs[self.job_index(j)]

    @property
    def domain_names(self) -> tuple[str, ...]:
        return tuple(d.name for d in self.domains)

    @property
    def total_gpus(self) -> int:
        return sum(d.gpus for d in self.domains)

    def allowed(self, j: int | str) -> tuple[str, ...]:
        """Domains job ``j`` may hold GPUs in, instance order."""
        job = self.job(j)
        if job.allowed_domains is None:
            return self.domain_names
        return tuple(d for d in self.domain_names if d in job.allowed_domains)

    def _cache(self) -> dict:
        return self.__dict__.setdefault("_planner_cache", {})

    def _cluster(self, i: int) -> dict:
        """The one-job instance dict of job i on the whole cluster (the model a ModelSpec)."""
        job = self.jobs[i]
        data = self.model_dump(by_alias=True, exclude_none=True, exclude={"jobs", "options"})
        data["options"] = self.options.model_dump(exclude_none=True, exclude={"multi_objective"})
        data["name"] = job.name
        data["slice_of"] = self.name
        data["workload"] = job.workload_dict()
        return data

    def _build(self, i: int, data: dict) -> Instance:
        try:
            return Instance.from_dict(data)
        except InputError as err:
            if err.field and err.field.startswith("workload."):
                err.field = f"jobs[{i}]." + err.field.removeprefix("workload.")
            elif err.field == "workload":
                err.field = f"jobs[{i}]"
            raise

    def job_instance(self, j: int | str) -> Instance:
        """Job ``j`` (index or name) alone on the whole cluster: its workload, every GPU of
        its allowed domains (others kept as relays, 0 GPUs), every link and uplink in full.
        Named after the job, ``slice_of`` this instance's name.  Cached."""
        i = self.job_index(j)
        cache = self._cache()
        key = ("job_instance", i)
        if key not in cache:
            data = self._cluster(i)
            allowed = set(self.allowed(i))
            for d in data["domains"]:
                if d["name"] not in allowed:
                    d["gpus"] = 0
            cache[key] = self._build(i, data)
        return cache[key]

    def slice_instance(self, j: int | str, gpus: dict[str, int], link_share: dict[str, float],
                       uplink_share: dict[str, float] | None = None) -> Instance:
        """Job ``j`` on its slice (SPEC 10): ``gpus[d]`` GPUs in domain d (absent: 0; a domain
        without GPUs is kept as a relay), each link at ``link_share["a|b"]`` times its
        bandwidth (absent or 0: removed, the routes computed on what remains), each uplink
        at ``uplink_share[d]`` times ``uplink_gbps`` (``uplink_share`` None, or d absent
        from it: ``gpus[d] / gpus_d``).  Latencies unchanged.  ``InputError`` for an unknown
        domain or link key.  With every GPU of the allowed domains and share 1 everywhere
        its figures are :meth:`job_instance`'s.

        >>> minst.slice_instance("a", {"alpha": 8}, {"alpha|beta": 0.5})   # doctest: +SKIP
        """
        i = self.job_index(j)
        names = self.domain_names
        for d in gpus:
            if d not in names:
                raise InputError(f"unknown domain {d!r}; known: {', '.join(names)}", f"gpus.{d}")
        for d in uplink_share or {}:
            if d not in names:
                raise InputError(f"unknown domain {d!r}; known: {', '.join(names)}", f"uplink_share.{d}")
        keys = [link_key(l) for l in self.links]
        for k in link_share:
            if k not in keys:
                raise InputError(f"unknown link {k!r}; links: {', '.join(keys)}", f"link_share.{k}")
        data = self._cluster(i)
        for dom, d in zip(self.domains, data["domains"]):
            g = int(gpus.get(dom.name, 0))
            d["gpus"] = g
            if dom.uplink_gbps is not None:
                u = (uplink_share or {}).get(dom.name)
                if u is None:
                    u = g / dom.gpus if dom.gpus else 0.0
                d["uplink_gbps"] = float(u) * dom.uplink_gbps
        links = []
        for link, k in zip(data["links"], keys):
            share = float(link_share.get(k, 0.0))
            if share > 0:
                links.append({**link, "bandwidth_gbps": share * link["bandwidth_gbps"]})
        data["links"] = links
        return self._build(i, data)

    def to_dict(self) -> dict:
        """The instance as a dict shaped like the file (models inlined)."""
        return self.model_dump(by_alias=True, exclude_none=True)


def full_allocation(minst: MultiInstance, j: int | str) -> tuple[dict[str, int], dict[str, float], dict[str, float]]:
    """Every GPU of job ``j``'s allowed domains, share 1 of every link and uplink:
    the allocation whose slice scores as :meth:`MultiInstance.job_instance`."""
    allowed = set(minst.allowed(j))
    gpus = {d.name: (d.gpus if d.name in allowed else 0) for d in minst.domains}
    return gpus, {link_key(l): 1.0 for l in minst.links}, {d.name: 1.0 for d in minst.domains}


def equal_slice(minst: MultiInstance, j: int | str) -> tuple[dict[str, int], dict[str, float], dict[str, float]]:
    """The equal slice of SPEC 10 (``rho_share``'s reference): ``floor(gpus_d / J)`` GPUs of
    every domain (0 outside the job's allowed domains), ``1/J`` of every link and uplink.
    Returns ``(gpus, link_share, uplink_share)``.

    >>> equal_slice(minst, 0)[0]          # two jobs on tiny-3dc's cluster  # doctest: +SKIP
    {'alpha': 8, 'beta': 4, 'gamma': 6}
    """
    J = len(minst.jobs)
    allowed = set(minst.allowed(j))
    gpus = {d.name: (d.gpus // J if d.name in allowed else 0) for d in minst.domains}
    return gpus, {link_key(l): 1.0 / J for l in minst.links}, {d.name: 1.0 / J for d in minst.domains}


def with_jobs_field(err: InputError, prefix: str) -> InputError:
    """``err`` with its field put under ``prefix`` (``jobs[1]`` + ``plan.tp``)."""
    err.field = f"{prefix}.{err.field}" if err.field else prefix
    return err


__all__ = ["OBJECTIVES", "JobSpec", "MultiInstance", "MultiOptions", "equal_slice", "full_allocation", "link_key"]
