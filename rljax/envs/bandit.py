"""K-answer bandit: one prompt, K possible answers, a fixed reward per answer.

The smallest "language model" task: the policy sees one observation (the prompt, obs 0),
picks one of K answers, gets that answer's reward and the episode ends. It is the setting
of the policy-gradient derivation (four answers, one of them right) and of GRPO's group
sampling: a group of G answers to the same prompt.
"""

from __future__ import annotations

import jax.numpy as jnp
from flax import struct

from rljax.envs.base import Environment
from rljax.types import Array, PRNGKey


@struct.dataclass
class BanditState:
    """``time``: 0 before the answer (int32 scalar)."""

    time: Array


@struct.dataclass
class BanditParams:
    """``answer_rewards``: ``[K]`` float32 reward of each answer (a pytree leaf, so a sweep
    can vary it)."""

    answer_rewards: Array


class KAnswerBandit(Environment):
    """One prompt, K answers; ``step`` pays ``answer_rewards[action]`` and terminates.

    Args:
      answer_rewards: ``[K]`` reward per answer (K >= 1).
    """

    def __init__(self, answer_rewards):
        rewards = jnp.asarray(answer_rewards, jnp.float32)
        if rewards.ndim != 1 or rewards.shape[0] < 1:
            raise ValueError(
                f"answer_rewards: must be a 1-D array of >= 1 rewards, got shape {rewards.shape}"
            )
        self._rewards = rewards

    @property
    def default_params(self) -> BanditParams:
        return BanditParams(answer_rewards=self._rewards)

    @property
    def num_actions(self) -> int:
        return int(self._rewards.shape[0])

    @property
    def num_states(self) -> int:
        return 1

    def reset_env(self, key: PRNGKey, params: BanditParams):
        del key, params
        return jnp.int32(0), BanditState(time=jnp.int32(0))

    def step_env(self, key: PRNGKey, state: BanditState, action: Array, params: BanditParams):
        del key
        reward = params.answer_rewards[action]
        return (jnp.int32(0), BanditState(time=state.time + 1), reward, jnp.bool_(True),
                jnp.bool_(False), {})
