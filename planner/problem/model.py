"""Model profiles: a model as an ordered list of units of work (SPEC section 3).

A transformer model is described by its architecture (``ModelSpec`` with
``num_layers``, ``hidden_size`` ...) or by an explicit list of units.  Either
way :meth:`ModelSpec.units` returns the per-unit figures in SI units that the
rest of the planner works with:

* ``params``                 parameters (count)
* ``fwd_flops_per_token``    forward FLOPs per token
* ``out_bytes_per_token``    bytes per token that cross a stage boundary
* ``stored_bytes_per_token`` activation bytes per token kept for backward
* ``tp_bytes_per_token``     bytes per token all-reduced across the tensor-parallel
                             GPUs in one pass (forward or backward): ``4h`` for a
                             block (two all-reduces of ``2h``), 0 for embed and head
                             (SPEC 5, v2); an explicit unit gives it, default 0

Example
-------
>>> spec = ModelSpec(name="m", num_layers=2, hidden_size=64, ffn_hidden_size=256,
...                  num_heads=4, vocab_size=100)
>>> [u.name for u in spec.units(seq_len=128)]
['embed', 'block0', 'block1', 'head']
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from . import limits as L
from .exact import exact_types

BYTES_PER_PARAM_STATE = 16  # weights, gradients and Adam state (SPEC 3)
BYTES_PER_PARAM_GRAD = 2  # gradient bytes synchronised across replicas


@dataclass(frozen=True)
class Unit:
    """One unit of work; figures per token, see the module docstring."""

    name: str
    params: float
    fwd_flops_per_token: float
    out_bytes_per_token: float
    stored_bytes_per_token: float
    tp_bytes_per_token: float = 0.0


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=False, allow_inf_nan=False)
    _exact = field_validator("*", mode="before")(exact_types)  # no true for 1, no "16" for 16 (issue 28)


class UnitSpec(_Strict):
    """An explicit unit in a model file (overrides the formulas)."""

    name: str
    params: float = Field(ge=0, le=L.MAX_UNIT_FIGURE)
    fwd_flops_per_token: float = Field(ge=0, le=L.MAX_UNIT_FIGURE)
    out_bytes_per_token: float = Field(ge=0, le=L.MAX_UNIT_FIGURE)
    stored_bytes_per_token: float = Field(ge=0, le=L.MAX_UNIT_FIGURE)
    tp_bytes_per_token: float = Field(default=0.0, ge=0, le=L.MAX_UNIT_FIGURE, allow_inf_nan=False, strict=True)


class ModelSpec(_Strict):
    """A model profile as written in ``models/NAME.toml``.

    ``tied_embeddings`` is descriptive: the performance model keeps the
    embedding and the head as separate units with their own copy of the
    V x h matrix (as Megatron-LM does when they sit on different stages);
    :meth:`published_params` subtracts the shared copy so the total can be
    compared with a paper's figure.
    """

    name: str = Field(min_length=1)
    description: str = ""
    source: str = ""
    num_layers: int | None = Field(default=None, ge=1, le=L.MAX_LAYERS)
    hidden_size: int | None = Field(default=None, ge=1, le=L.MAX_HIDDEN)
    ffn_hidden_size: int | None = Field(default=None, ge=1, le=L.MAX_HIDDEN)
    num_heads: int | None = Field(default=None, ge=1, le=L.MAX_HIDDEN)
    num_kv_heads: int | None = Field(default=None, ge=1, le=L.MAX_HIDDEN)
    vocab_size: int | None = Field(default=None, ge=1, le=L.MAX_VOCAB)
    gated_mlp: bool = False
    tied_embeddings: bool = False
    units_: list[UnitSpec] | None = Field(default=None, alias="units", min_length=1,
                                               max_length=L.MAX_LAYERS)

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, allow_inf_nan=False,
                              json_schema_extra={"anyOf": [  # what _complete checks, for docs/schemas/
                                  {"required": ["units"]},
                                  {"required": ["num_layers", "hidden_size", "ffn_hidden_size", "num_heads",
                                                "vocab_size"]}]})

    @model_validator(mode="after")
    def _complete(self):
        arch = ("num_layers", "hidden_size", "ffn_hidden_size", "num_heads", "vocab_size")
        if self.units_ is None:
            missing = [f for f in arch if getattr(self, f) is None]
            if missing:
                raise ValueError(
                    f"needs either a [[units]] list or all of {', '.join(arch)}; missing {', '.join(missing)}"
                )
            kv = self.num_kv_heads or self.num_heads
            if self.num_heads % kv:
                raise ValueError(f"num_kv_heads={kv} must divide num_heads={self.num_heads}")
        return self

    # -- figures -------------------------------------------------------------
    @property
    def block_params(self) -> float:
        """Parameters of one transformer block: attention + MLP (SPEC 3)."""
        h, f = self.hidden_size, self.ffn_hidden_size
        kv = self.num_kv_heads or self.num_heads
        attn = 2 * h * h + 2 * h * h * kv / self.num_heads
        mlp = 3 * h * f if self.gated_mlp else 2 * h * f
        return attn + mlp

    def units(self, seq_len: int, recompute: bool = False) -> list[Unit]:
        """Units of work in order, for sequences of ``seq_len`` tokens."""
        if self.units_ is not None:
            return [Unit(u.name, u.params, u.fwd_flops_per_token, u.out_bytes_per_token,
                         u.stored_bytes_per_token, u.tp_bytes_per_token) for u in self.units_]
        h, V, s = self.hidden_size, self.vocab_size, seq_len
        P = self.block_params
        out = 2.0 * h
        stored_block = (2.0 if recompute else 34.0) * h
        units = [Unit("embed", V * h, 0.0, out, 0.0)]
        tp_block = 4.0 * h  # two all-reduces of the 2h-byte activation per pass
        units += [Unit(f"block{i}", P, 2 * P + 4.0 * s * h, out, stored_block, tp_block)
                  for i in range(self.num_layers)]
        units.append(Unit("head", V * h, 2.0 * V * h, out, 4.0 * V))
        return units

    def total_params(self) -> float:
        """Parameters summed over all units (embedding and head counted apart)."""
        return sum(u.params for u in self.units(seq_len=1))

    def published_params(self) -> float:
        """Parameter count as papers report it (a tied embedding counted once)."""
        tied = self.tied_embeddings and self.units_ is None
        return self.total_params() - (self.vocab_size * self.hidden_size if tied else 0)
