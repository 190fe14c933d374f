"""The RL planner's network: one small MLP scores every action slot from that
slot's features and the global ones (weights shared across slots, so the
policy does not depend on the number or order of domains), a second one
scores the shapes at the first step, each plus a learnt prior (a weight
times the slot's relative partial ``T_est``, or the shape's rank); the
value head reads the mean and max of the slot embeddings.  Plugged into sb3-contrib's MaskablePPO as a
features extractor and a policy class (PPO itself is sb3's).

Example
-------
>>> from sb3_contrib import MaskablePPO                                  # doctest: +SKIP
>>> model = MaskablePPO(SlotPolicy, env, policy_kwargs=slot_policy_kwargs())
"""

from __future__ import annotations

import torch as th
from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from torch import nn

from .rl_env import GLOBAL, N_SLOTS, SLOT, SLOT_TYPED

PRIOR = 2.0  # initial weight of the prior (see SlotExtractor.forward)


def slot_width(observation_space) -> int:
    """Features per slot of an observation space (GLOBAL + N_SLOTS * width): SLOT for
    policy format 2 (one GPU type), SLOT_TYPED for format 3 (several)."""
    n = int(observation_space.shape[0]) - GLOBAL
    if n % N_SLOTS or n // N_SLOTS not in (SLOT, SLOT_TYPED):
        raise ValueError(f"an observation of {n + GLOBAL} features is not a slot layout of this planner")
    return n // N_SLOTS


class SlotExtractor(BaseFeaturesExtractor):
    """Observation (GLOBAL + N_SLOTS * width, the width SLOT or SLOT_TYPED: :func:`slot_width`)
    -> [N_SLOTS logits, mean and max slot embeddings, global features]."""

    def __init__(self, observation_space, hidden: int = 64):
        super().__init__(observation_space, features_dim=N_SLOTS + 2 * hidden + GLOBAL)
        self.hidden = hidden
        self.slot = width = slot_width(observation_space)

        def body():
            return nn.Sequential(nn.Linear(width + GLOBAL, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh())

        self.place, self.shape = body(), body()
        self.place_out, self.shape_out = nn.Linear(hidden, 1), nn.Linear(hidden, 1)
        self.place_prior = nn.Parameter(th.tensor(-PRIOR))
        self.shape_prior = nn.Parameter(th.tensor(-PRIOR))

    def forward(self, obs: th.Tensor) -> th.Tensor:
        B = obs.shape[0]
        g = obs[:, :GLOBAL]
        s = obs[:, GLOBAL:].reshape(B, N_SLOTS, self.slot)
        x = th.cat([s, g[:, None, :].expand(B, N_SLOTS, GLOBAL)], dim=-1)
        phase = g[:, 0:1]  # 1 while choosing the shape
        hp, hs = self.place(x), self.shape(x)
        h = phase[:, :, None] * hs + (1 - phase[:, :, None]) * hp
        # a learnt prior: candidates whose partial T_est is worse, shapes further down greedy's
        # ranking start less likely (slot feature 5: 10 log(T_est / best); shape feature 1: rank)
        prior = phase * self.shape_prior * s[:, :, 1] + (1 - phase) * self.place_prior * s[:, :, 5]
        logits = phase * self.shape_out(hs).squeeze(-1) + (1 - phase) * self.place_out(hp).squeeze(-1) + prior
        valid = s[:, :, 0:1]
        mean = (h * valid).sum(1) / valid.sum(1).clamp(min=1.0)
        mx = (h - 2.0 * (1 - valid)).max(1).values  # embeddings lie in [-1, 1]
        return th.cat([logits, mean, mx, g], dim=-1)


class _Logits(nn.Module):
    """The action head: the extractor's first N_SLOTS outputs are the logits."""

    def forward(self, latent: th.Tensor) -> th.Tensor:
        return latent[:, :N_SLOTS]


class SlotPolicy(MaskableActorCriticPolicy):
    """MaskablePPO's actor-critic with :class:`SlotExtractor`'s per-slot logits as the
    action distribution (no layer on top) and an MLP value head."""

    def _build(self, lr_schedule) -> None:
        super()._build(lr_schedule)
        self.action_net = _Logits()
        fe = self.features_extractor
        for head in (fe.place_out, fe.shape_out):  # near-uniform first policy
            nn.init.orthogonal_(head.weight, gain=0.01)
            nn.init.zeros_(head.bias)
        self.optimizer = self.optimizer_class(self.parameters(), lr=lr_schedule(1), **self.optimizer_kwargs)


def slot_policy_kwargs(hidden: int = 64) -> dict:
    return {"features_extractor_class": SlotExtractor, "features_extractor_kwargs": {"hidden": hidden},
            "net_arch": {"pi": [], "vf": [hidden, hidden]}}
