"""The rank map: which GPU of which host runs each global rank of a launched job.

Megatron-LM, torchtitan and DeepSpeed number the ranks of a job that mixes
pipeline, data and tensor parallelism the same way -- tensor-parallel rank
fastest, then the data-parallel rank (the plan's replica), then the stage:

    rank = stage * (replicas * tp) + replica * tp + tp_rank

(Megatron-LM's default ``order="tp-cp-ep-dp-pp"``, megatron/core/parallel_state.py;
torchtitan's DeviceMesh ``["pp", "dp_replicate", "dp_shard", "cp", "tp"]``,
torchtitan/distributed/parallel_dims.py; DeepSpeed's
``PipeModelDataParallelTopology`` axes ``["pipe", "data", "model"]``,
deepspeed/runtime/pipe/topology.py.  docs/export.md cites each.)

None of the frameworks knows about domains: a plan's placement is realised
only by *where* each rank is started.  :func:`build_rank_map` gives every
(stage, replica) block of ``tp`` consecutive ranks GPUs on one host of its
domain (hosts are named ``DOMAIN-nodeK``, K from 0; a domain of ``gpus``
GPUs has ``ceil(gpus / gpus_per_node)`` hosts, the last possibly partial),
filling hosts first-fit in rank order.  torchrun hands each agent (one
``torchrun`` process, ``--node-rank`` K) the consecutive global ranks after
those of agents 0..K-1 (torch/distributed/elastic/agent/server/api.py,
``_assign_worker_ranks``), so every maximal run of consecutive ranks on one
host becomes one agent, started with ``CUDA_VISIBLE_DEVICES`` listing its
GPUs; several agents may share a host.

The rank map is also a file (``rank_map.csv``, one row per rank, columns
:data:`COLUMNS`) that reads back into the plan it came from
(:func:`plan_from_rank_map`); an explicit micro-batch order travels as
torch.distributed.pipelining's schedule CSV (:func:`schedule_csv`).

Example
-------
>>> from planner.problem.plan import Plan, Stage
>>> p = Plan(replicas=2, tp=2, micro_batch_size=1, num_micro_batches=4,
...          stages=[Stage(start=0, end=3), Stage(start=3, end=6)],
...          placement=[["a", "b"], ["a", "a"]])
>>> rank_of(stage=1, replica=0, tp_rank=1, replicas=2, tp=2)
5
>>> rows, warnings = rows_of(p, {"a": [4, 4], "b": [4]})
>>> [(r.rank, r.host, r.gpu, r.node_rank) for r in rows[4:]]
[(4, 'b-node0', 0, 1), (5, 'b-node0', 1, 1), (6, 'a-node1', 0, 2), (7, 'a-node1', 1, 2)]
>>> plan_from_rank_map(parse_rank_map(rank_map_csv(rows))) == p
True
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass, fields

from pydantic import ValidationError

from .errors import InputError, input_error_from_pydantic
from .oplists import format_op, parse_op
from .plan import ExplicitSchedule, Plan, Stage

COLUMNS = ("rank", "domain", "host", "node_rank", "local_rank", "gpu", "replica", "stage", "tp_rank",
           "unit_start", "unit_end", "micro_batch_size", "micro_batches", "schedule")
"""Columns of ``rank_map.csv``: ``gpu`` is the CUDA device on ``host``; ``node_rank`` and
``local_rank`` are torchrun's; ``unit_start``/``unit_end`` the stage's units ``[start, end)``;
``schedule`` the micro-batch order the framework runs (``1f1b``, ``gpipe`` or ``explicit``,
whose op lists are in ``schedule.csv`` beside it)."""


def rank_of(stage: int, replica: int, tp_rank: int, replicas: int, tp: int) -> int:
    """Global rank of a GPU in the frameworks' common order (tp fastest, then replica, then stage)."""
    return (stage * replicas + replica) * tp + tp_rank


@dataclass(frozen=True)
class RankRow:
    """One global rank of the job: where it runs and what it computes (see :data:`COLUMNS`)."""

    rank: int
    domain: str
    host: str
    node_rank: int
    local_rank: int
    gpu: int
    replica: int
    stage: int
    tp_rank: int
    unit_start: int
    unit_end: int
    micro_batch_size: int
    micro_batches: int
    schedule: str


@dataclass(frozen=True)
class Agent:
    """One ``torchrun`` process: it starts ranks ``first_rank .. first_rank + len(gpus) - 1``
    on ``host``, LOCAL_RANK i on CUDA device ``gpus[i]``."""

    node_rank: int
    host: str
    domain: str
    gpus: tuple[int, ...]
    first_rank: int

    @property
    def nproc(self) -> int:
        return len(self.gpus)


@dataclass(frozen=True)
class RankMap:
    """Every rank (``rows``, by rank), the torchrun agents that start them, and what could
    not be laid out as the plan wants (``warnings``: a tensor-parallel group spanning hosts)."""

    rows: tuple[RankRow, ...]
    agents: tuple[Agent, ...]
    warnings: tuple[str, ...]

    @property
    def world_size(self) -> int:
        return len(self.rows)

    def agents_in(self, domain: str) -> list[Agent]:
        return [a for a in self.agents if a.domain == domain]

    def to_csv(self) -> str:
        return rank_map_csv(self.rows)


def host_name(domain: str, k: int) -> str:
    """The placeholder name of host ``k`` of ``domain``: ``alpha-node0``."""
    return f"{domain}-node{k}"


def node_sizes(gpus: int, gpus_per_node: int) -> list[int]:
    """GPUs on each host of a domain: full nodes, then the remainder.

    >>> node_sizes(12, 8)
    [8, 4]
    """
    full, rest = divmod(gpus, gpus_per_node)
    return [gpus_per_node] * full + ([rest] if rest else [])


def rows_of(plan: Plan, nodes: dict[str, list[int]] | dict[str, int], schedule: str | None = None
            ) -> tuple[list[RankRow], list[str]]:
    """Rank rows of ``plan`` with hosts laid out on ``nodes`` (domain -> GPUs of each host,
    or domain -> GPUs of one host) and torchrun agents numbered; ``schedule`` is the order the
    framework runs (default: the plan's).  Returns the rows and the layout's warnings."""
    R, S, t = plan.replicas, plan.num_stages, plan.tp
    free = {d: list(v) if isinstance(v, list) else [v] for d, v in nodes.items()}
    used = {d: [0] * len(v) for d, v in free.items()}
    sched = schedule or plan.schedule_kind
    slots: dict[int, tuple[str, str, int]] = {}  # rank -> (domain, host, gpu)
    warnings = []
    for j in range(S):
        for r in range(R):
            d = plan.placement[r][j]
            if d not in free:
                raise InputError(f"unknown domain {d!r}", f"placement[{r}][{j}]")
            k = next((k for k, f in enumerate(free[d]) if f >= t), None)
            hosts = [k] * t if k is not None else None
            if hosts is None:  # no host has t free GPUs: the group spans hosts
                hosts = [k for k, f in enumerate(free[d]) for _ in range(f)][:t]
                if len(hosts) < t:
                    raise InputError(f"domain {d!r} has {sum(free[d])} free GPUs left for the {t} of stage {j} "
                                     f"of replica {r} (the plan uses more GPUs there than it has)",
                                     f"placement[{r}][{j}]")
                names = sorted({host_name(d, k) for k in hosts})
                warnings.append(f"stage {j} of replica {r}: its {t} tensor-parallel GPUs span hosts "
                                f"{', '.join(names)} (no host of {d} has {t} GPUs free), so its "
                                "tensor-parallel traffic leaves the node")
            for i, k in enumerate(hosts):
                slots[rank_of(j, r, i, R, t)] = (d, host_name(d, k), used[d][k])
                used[d][k] += 1
                free[d][k] -= 1
    rows, node_rank, local, prev_host = [], -1, 0, None
    for rank in range(R * S * t):
        d, host, gpu = slots[rank]
        if host != prev_host:
            node_rank, local, prev_host = node_rank + 1, 0, host
        j, rest = divmod(rank, R * t)
        r, i = divmod(rest, t)
        st = plan.stages[j]
        rows.append(RankRow(rank, d, host, node_rank, local, gpu, r, j, i, st.start, st.end,
                            plan.micro_batch_size, plan.num_micro_batches, sched))
        local += 1
    return rows, warnings


def agents_of(rows) -> tuple[Agent, ...]:
    """The torchrun agents of rank rows (rows in rank order)."""
    out: list[Agent] = []
    for row in rows:
        if out and out[-1].node_rank == row.node_rank:
            a = out[-1]
            out[-1] = Agent(a.node_rank, a.host, a.domain, a.gpus + (row.gpu,), a.first_rank)
        else:
            out.append(Agent(row.node_rank, row.host, row.domain, (row.gpu,), row.rank))
    return tuple(out)


def build_rank_map(instance, plan: Plan, schedule: str | None = None) -> RankMap:
    """The rank map of ``plan`` on ``instance``'s hosts (see the module docstring).

    >>> rm = build_rank_map(inst, plan)                # doctest: +SKIP
    >>> rm.rows[0].host, rm.agents[0].gpus             # doctest: +SKIP
    ('alpha-node0', (0, 1, 2, 3))
    """
    nodes = {d.name: node_sizes(d.gpus, d.gpus_per_node) for d in instance.domains}
    rows, warnings = rows_of(plan, nodes, schedule)
    return RankMap(tuple(rows), agents_of(rows), tuple(warnings))


# -- the file -----------------------------------------------------------------------------

def rank_map_csv(rows) -> str:
    """Rank rows as ``rank_map.csv`` text (header :data:`COLUMNS`, one row per rank)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(COLUMNS)
    for row in rows:
        w.writerow([getattr(row, c) for c in COLUMNS])
    return buf.getvalue()


_INT = {f.name for f in fields(RankRow) if f.type in ("int", int)}


def parse_rank_map(text: str) -> list[RankRow]:
    """Rank rows from ``rank_map.csv`` text; ``InputError`` naming the line and column."""
    reader = csv.DictReader(io.StringIO(text))
    missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
    if missing:
        raise InputError(f"missing column{'s' if len(missing) > 1 else ''} {', '.join(missing)} "
                         f"(a rank map has {', '.join(COLUMNS)})", "header")
    rows = []
    for line, rec in enumerate(reader, start=2):
        values = {}
        for c in COLUMNS:
            v = (rec.get(c) or "").strip()
            if c in _INT:
                if not re.fullmatch(r"\d+", v):
                    raise InputError(f"{c} must be a whole number >= 0 (got {v!r})", f"line {line}: {c}")
                values[c] = int(v)
            else:
                if not v:
                    raise InputError(f"{c} is empty", f"line {line}: {c}")
                values[c] = v
        rows.append(RankRow(**values))
    if not rows:
        raise InputError("no ranks (a rank map has one row per rank)")
    return rows


def plan_from_rank_map(rows, ops: list[list[str]] | None = None, instance: str = "") -> Plan:
    """The plan a rank map runs: replicas, stages, tensor-parallel degree and placement from
    the rows, micro-batching and schedule from their columns (``ops``: the op lists of an
    ``explicit`` schedule).  Checks that the ranks follow the frameworks' order and that each
    (stage, replica) block agrees on its domain and units; ``InputError`` otherwise."""
    rows = sorted(rows, key=lambda r: r.rank)
    n = len(rows)
    if [r.rank for r in rows] != list(range(n)):
        seen = {r.rank for r in rows}
        gap = next(i for i in range(n + 1) if i not in seen) if len(seen) == n else None
        what = f"rank {gap} is missing" if gap is not None else "a rank appears twice"
        raise InputError(f"ranks must be 0..{n - 1}, each once: {what}", "rank")
    t = max(r.tp_rank for r in rows) + 1
    R = max(r.replica for r in rows) + 1
    S = max(r.stage for r in rows) + 1
    if R * S * t != n:
        raise InputError(f"{n} ranks but {S} stages x {R} replicas x {t} tensor-parallel ranks = {R * S * t}",
                         "rank")
    first = rows[0]
    domains: dict[tuple[int, int], str] = {}
    units: dict[int, tuple[int, int]] = {}
    for row in rows:
        want = rank_of(row.stage, row.replica, row.tp_rank, R, t)
        if row.rank != want:
            raise InputError(f"rank {row.rank} is stage {row.stage}, replica {row.replica}, tensor-parallel "
                             f"rank {row.tp_rank}, which the frameworks number {want} "
                             "(stage x replicas x tp + replica x tp + tp_rank)", f"rank {row.rank}")
        for c in ("micro_batch_size", "micro_batches", "schedule"):
            if getattr(row, c) != getattr(first, c):
                raise InputError(f"{c} is {getattr(row, c)!r} but rank 0 has {getattr(first, c)!r}",
                                 f"rank {row.rank}: {c}")
        key = (row.replica, row.stage)
        if domains.setdefault(key, row.domain) != row.domain:
            raise InputError(f"stage {row.stage} of replica {row.replica} is in {domains[key]!r} on another "
                             f"rank but here in {row.domain!r} (a tensor-parallel group stays in one domain)",
                             f"rank {row.rank}: domain")
        if units.setdefault(row.stage, (row.unit_start, row.unit_end)) != (row.unit_start, row.unit_end):
            raise InputError(f"stage {row.stage} holds units {units[row.stage]} on another rank but "
                             f"[{row.unit_start}, {row.unit_end}) here", f"rank {row.rank}: unit_start")
    if first.schedule == "explicit":
        if ops is None:
            raise InputError("schedule 'explicit' needs its op lists (schedule.csv beside the rank map)",
                             "schedule")
        schedule = ExplicitSchedule(ops=ops)
    elif first.schedule in ("1f1b", "gpipe"):
        schedule = first.schedule
    else:
        raise InputError(f"schedule must be 1f1b, gpipe or explicit (got {first.schedule!r})", "rank 0: schedule")
    try:
        return Plan(instance=instance, replicas=R, tp=t, micro_batch_size=first.micro_batch_size,
                    num_micro_batches=first.micro_batches,
                    stages=[Stage(start=units[j][0], end=units[j][1]) for j in range(S)],
                    placement=[[domains[(r, j)] for j in range(S)] for r in range(R)], schedule=schedule)
    except ValidationError as err:
        raise input_error_from_pydantic(err) from None


# -- torch.distributed.pipelining's schedule CSV -----------------------------------------

def schedule_csv(ops: list[list[str]]) -> str:
    """Explicit op lists (one per stage, ``"F0"``, ``"B0"`` ...) as the compute-only schedule CSV
    that torch.distributed.pipelining's ``_PipelineScheduleRuntime._load_csv`` reads: one row per
    pipeline rank, each action ``<stage><F|B><micro-batch>``.

    >>> schedule_csv([["F0", "B0"], ["F0", "B0"]])
    '0F0,0B0\\n1F0,1B0\\n'
    """
    return "".join(",".join(f"{j}{format_op(parse_op(o))}" for o in row) + "\n" for j, row in enumerate(ops))


_ACTION = re.compile(r"^(\d+)([FB])(\d+)$")


def parse_schedule_csv(text: str) -> list[list[str]]:
    """Op lists from a compute-only schedule CSV (:func:`schedule_csv`); row j must hold stage j's
    actions only.  ``InputError`` naming the line."""
    out = []
    for j, row in enumerate(csv.reader(io.StringIO(text))):
        ops = []
        for cell in row:
            m = _ACTION.match(cell.strip())
            if not m or int(m.group(1)) != j:
                raise InputError(f"{cell.strip()!r} is not an action of stage {j} ({j}F<i> or {j}B<i>)",
                                 f"line {j + 1}")
            ops.append(f"{m.group(2)}{int(m.group(3))}")
        out.append(ops)
    return out

