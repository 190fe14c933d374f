"""How the data-parallel replicas synchronise (SPEC v3 section 11): a plan's
``dp_sync`` choice, the instance's ``[compression]`` figures and ``[[quality]]``
rows, and the quality factor e of an option.

A plan without ``dp_sync`` (or ``{"mode": "every_step"}``) all-reduces its
gradients every step at 16 bits, as SPEC sections 5-7 say.  The other options:

- ``every_step`` with ``bits`` q < 16: the same sync, compressed to q bits per
  parameter (1-bit Adam, PowerSGD, CocktailSGD-like);
- ``diloco`` every ``H`` steps (arXiv 2311.08105): replicas sync inside their
  *group* (the replicas whose stage 0 sits in the same domain) every step, and
  across groups every H steps, blocking;
- ``streaming`` (arXiv 2501.18512): the outer sync in ``fragments`` pieces,
  each overlapped with ``overlap`` inner steps.

An option trades time for quality: e = D'/D, the tokens synchronous training
needs to reach the loss the option reaches with D tokens.  The objective is the
time (or cost) per *effective* token, T_eff / (global_batch_size * seq_len * e).

Example
-------
>>> s = DpSync(mode="diloco", H=30, bits=4)
>>> s.outer, s.period, s.plain
(True, 30, False)
>>> quality_row(DEFAULT_QUALITY, s, groups=4).e
0.92
>>> DpSync().plain
True
"""

from __future__ import annotations

from itertools import product
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_serializer, model_validator

from .errors import InputError
from .exact import exact_types

MODES = ("every_step", "diloco", "streaming")
Mode = Literal["every_step", "diloco", "streaming"]
MAX_H = 10**6
FULL_BITS = 16  # bf16 gradients: SPEC 5's G_j = 2 P_j bytes


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    _exact = field_validator("*", mode="before")(exact_types)


class DpSync(_Strict):
    """A plan's data-parallel sync (SPEC 11): ``mode``; ``H`` inner steps per outer
    sync (diloco, streaming; required there, refused for every_step); ``bits`` per
    parameter of the sync's payload; ``fragments`` F and ``overlap`` nu (streaming
    only); ``outer_state`` where the outer copy and momentum live (diloco, streaming)."""

    mode: Mode = "every_step"
    H: int | None = Field(default=None, ge=1, le=MAX_H, description="inner steps per outer sync")
    bits: int = Field(default=FULL_BITS, ge=1, le=32, description="bits per parameter sent")
    fragments: int = Field(default=1, ge=1, le=MAX_H, description="streaming: outer-sync fragments F")
    overlap: int = Field(default=1, ge=0, le=MAX_H, description="streaming: inner steps nu each fragment overlaps")
    outer_state: Literal["gpu", "cpu"] = Field(default="gpu", description="where the outer state lives")

    @model_validator(mode="before")
    @classmethod
    def _keys_of_mode(cls, data):
        """SPEC 9: a key the mode does not take is an error (not silently ignored)."""
        if not isinstance(data, dict):
            return data
        mode = data.get("mode", "every_step")
        takes = {"every_step": {"mode", "bits"},
                 "diloco": {"mode", "H", "bits", "outer_state"},
                 "streaming": {"mode", "H", "bits", "fragments", "overlap", "outer_state"}}.get(mode)
        if takes is None:
            return data  # the Literal reports the unknown mode
        extra = sorted(set(data) - takes)
        if extra:
            raise ValueError(f"mode {mode!r} does not take {', '.join(extra)} (it takes "
                             f"{', '.join(sorted(takes))})")
        if mode != "every_step" and data.get("H") is None:
            raise ValueError(f"mode {mode!r} needs H, the inner steps per outer sync")
        return data

    @model_validator(mode="after")
    def _ranges(self):
        if self.mode == "streaming" and self.fragments > self.H:
            raise ValueError(f"fragments={self.fragments} exceeds H={self.H}")
        if self.mode == "streaming" and self.overlap > self.H:
            raise ValueError(f"overlap={self.overlap} exceeds H={self.H}")
        return self

    @property
    def plain(self) -> bool:
        """Every step at 16 bits: SPEC sections 5-7 exactly."""
        return self.mode == "every_step" and self.bits == FULL_BITS

    @property
    def outer(self) -> bool:
        """Whether there is an outer sync (diloco or streaming)."""
        return self.mode != "every_step"

    @property
    def period(self) -> int:
        """Steps per outer sync: H, or 1 for every_step."""
        return self.H if self.outer else 1

    @property
    def outer_state_share(self) -> float:
        """phi_o (SPEC 11): the share of the outer state (beta_o bytes per parameter) held on
        the GPU: 1 with ``outer_state = "gpu"``; on the CPU, 0 under diloco and the fragment in
        flight, 1 / F, under streaming; 0 for every_step."""
        if not self.outer:
            return 0.0
        if self.outer_state == "gpu":
            return 1.0
        return 0.0 if self.mode == "diloco" else 1.0 / self.fragments

    @property
    def compressed(self) -> bool:
        """Whether the synced payload is below 16 bits per parameter."""
        return self.bits < FULL_BITS

    def label(self) -> str:
        """A short name: ``every step``, ``every step 4-bit``, ``diloco H=30 4-bit``,
        ``streaming H=100 F=4 nu=1 4-bit``."""
        if self.mode == "every_step":
            return "every step" + (f" {self.bits}-bit" if self.compressed else "")
        s = f"{self.mode} H={self.H}"
        if self.mode == "streaming":
            s += f" F={self.fragments} nu={self.overlap}"
        s += f" {self.bits}-bit"
        if self.outer_state == "cpu":
            s += " outer-state-on-cpu"
        return s

    @model_serializer(mode="plain")
    def to_dict(self) -> dict:
        """The plan file's object: only the keys the mode takes (defaults included)."""
        if self.mode == "every_step":
            return {"mode": self.mode, "bits": self.bits}
        d = {"mode": self.mode, "H": self.H, "bits": self.bits}
        if self.mode == "streaming":
            d.update(fragments=self.fragments, overlap=self.overlap)
        d["outer_state"] = self.outer_state
        return d


EVERY_STEP = DpSync()


class QualityRow(_Strict):
    """One ``[[quality]]`` row (SPEC 11): the quality factor ``e`` of the options whose
    mode is in ``modes``, with at most ``max_groups`` groups, ``H`` at most ``max_H``
    and at least ``min_bits`` bits (an absent bound matches all)."""

    modes: list[Mode] = Field(min_length=1, max_length=3)
    max_groups: int | None = Field(default=None, ge=1, le=10**6)
    max_H: int | None = Field(default=None, ge=1, le=MAX_H)
    min_bits: int | None = Field(default=None, ge=1, le=32)
    e: float = Field(gt=0, le=10, description="tokens of synchronous training per token of this option")
    source: str = Field(default="", max_length=2000)

    @field_validator("modes")
    @classmethod
    def _distinct(cls, v):
        if len(set(v)) != len(v):
            raise ValueError(f"duplicate modes in {v}")
        return v

    def covers(self, sync: DpSync, groups: int) -> bool:
        """Whether the row matches ``sync`` with ``groups`` groups (every_step: M = H = 1)."""
        M, H = (1, 1) if sync.mode == "every_step" else (groups, sync.H)
        return (sync.mode in self.modes
                and (self.max_groups is None or M <= self.max_groups)
                and (self.max_H is None or H <= self.max_H)
                and (self.min_bits is None or sync.bits >= self.min_bits))


DEFAULT_QUALITY: tuple[QualityRow, ...] = (
    QualityRow(modes=["every_step"], min_bits=4, e=1.00,
               source="default row 1: CocktailSGD (ICML 2023, PMLR v202): 4-bit with sparsification "
                      "'without hurting convergence'; fine-tuning evidence"),
    QualityRow(modes=["diloco", "streaming"], max_groups=2, max_H=100, min_bits=4, e=1.00,
               source="default row 2: arXiv 2503.09799 Table 5 (M=2, 10B: -0.19%, capped at 1); "
                      "arXiv 2501.18512 Table 1 (M=2, H=100, 4-bit: tie at 250B tokens)"),
    QualityRow(modes=["diloco", "streaming"], max_groups=4, max_H=30, min_bits=4, e=0.92,
               source="default row 3: arXiv 2503.09799 Table 5 (M=4, 10B: +0.29%)"),
    QualityRow(modes=["diloco", "streaming"], max_groups=4, max_H=100, min_bits=4, e=0.76,
               source="default row 4: +1% assumed, pessimistic (1B: +1.6%, arXiv 2501.18512 Table 6)"),
    QualityRow(modes=["diloco", "streaming"], max_groups=8, max_H=30, min_bits=4, e=0.74,
               source="default row 5: arXiv 2503.09799 Table 4 (M=8, 2.4B: +1.1%)"),
)
"""SPEC 11's default rows: published loss gaps at equal tokens mapped to tokens by the
Chinchilla data term at 13B parameters and 20 tokens per parameter."""


class Compression(_Strict):
    """``[compression]`` (SPEC 11): the codec's speed and the outer state's size."""

    codec_gbps: float | None = Field(
        default=None, gt=0, le=1e9,
        description="Gbit/s at which a GPU encodes or decodes a compressed payload; absent: free")
    outer_state_bytes_per_param: float = Field(
        default=8.0, ge=0, le=1e3,
        description="bytes per parameter of outer state (8: fp32 outer copy and fp32 Nesterov momentum)")


def sync_groups(plan) -> int:
    """M (SPEC 11): the number of distinct domains holding stage 0 over the replicas."""
    return len({row[0] for row in plan.placement})


def quality_rows(instance) -> tuple[QualityRow, ...]:
    """The instance's ``[[quality]]`` rows, then the defaults: first match wins."""
    return tuple(getattr(instance, "quality", None) or ()) + DEFAULT_QUALITY


def quality_row(rows, sync: DpSync, groups: int) -> QualityRow | None:
    """The first of ``rows`` covering ``sync`` with ``groups`` groups, or None."""
    return next((row for row in rows if row.covers(sync, groups)), None)


def quality_of(instance, sync: DpSync | None, groups: int) -> tuple[float, str]:
    """``(e, source)`` of ``sync`` with ``groups`` groups on ``instance`` (SPEC 11):
    1 for every_step at 16 bits; else the first covering row's.  Raises
    ``InputError`` (field ``dp_sync``) when no row covers the option.

    >>> quality_of(inst, DpSync(mode="diloco", H=100, bits=4), groups=4)   # doctest: +SKIP
    (0.76, 'default row 4: +1% assumed, ...')
    """
    sync = sync or EVERY_STEP
    if sync.plain:
        return 1.0, "synchronous training"
    own = tuple(getattr(instance, "quality", None) or ())
    for i, row in enumerate(own):
        if row.covers(sync, groups):
            return row.e, row.source or f"quality[{i}]"
    row = quality_row(DEFAULT_QUALITY, sync, groups)
    if row is None:
        raise InputError(f"no quality row covers {sync.label()} with {groups} group(s): add a [[quality]] "
                         "row for it, or choose an option a row covers (SPEC 11)", "dp_sync")
    return row.e, row.source


def covered(instance, sync: DpSync, groups: int) -> bool:
    """Whether some quality row covers ``sync`` with ``groups`` groups."""
    return sync.plain or quality_row(quality_rows(instance), sync, groups) is not None


def sync_options(instance, modes=None) -> list[DpSync]:
    """The candidate options of ``instance`` (SPEC 11 "Solvers"): every mode of
    ``[options] dp_sync`` (or ``modes``) x ``dp_sync_H`` x ``dp_sync_bits`` (x
    ``dp_sync_fragments`` x ``dp_sync_overlap`` for streaming), keeping those a
    quality row covers for some number of groups.  The plain every-step sync comes
    first when allowed.  An instance without ``[options] dp_sync`` gives the plain
    sync alone: it means what it meant before section 11 (docs/model.md).

    >>> [s.label() for s in sync_options(inst)][:2]                 # doctest: +SKIP
    ['every step', 'every step 8-bit']
    """
    opt = instance.options
    if opt.dp_sync is None and modes is None:  # no [options] dp_sync: the plain sync only (docs/model.md)
        return [EVERY_STEP]
    rows = quality_rows(instance)
    modes = tuple(opt.sync_modes if modes is None else modes)
    out: list[DpSync] = []
    bits = sorted(set(opt.dp_sync_bits), reverse=True)
    if "every_step" in modes:
        for q in bits:
            s = DpSync(mode="every_step", bits=q)
            if s.plain or quality_row(rows, s, 1) is not None:
                out.append(s)
        if EVERY_STEP not in out:
            out.insert(0, EVERY_STEP)
    max_groups = max(len(instance.domains), 1)
    for mode in ("diloco", "streaming"):
        if mode not in modes:
            continue
        frags = sorted(set(opt.dp_sync_fragments)) if mode == "streaming" else [1]
        nus = sorted(set(opt.dp_sync_overlap)) if mode == "streaming" else [1]
        for H, q, F, nu in product(sorted(set(opt.dp_sync_H)), bits, frags, nus):
            if mode == "streaming" and (F > H or nu > H):
                continue
            kw = dict(mode=mode, H=H, bits=q)
            if mode == "streaming":
                kw.update(fragments=F, overlap=nu)
            s = DpSync(**kw)
            if any(quality_row(rows, s, M) is not None for M in range(2, max_groups + 1)) or \
                    quality_row(rows, s, 1) is not None:
                out.append(s)
    return out
