"""ChainMDP: N steps, two actions, action 1 correct at every step.

The smallest setting in which outcome and process supervision differ:

* **Outcome reward (ORM)**: ``1`` on the last step if every step was correct, else ``0``;
  ``0`` on all earlier steps.
* **Process reward (PRM)**: each step's own correctness ``1[a_t = 1]``; the episode's
  score is the fraction of correct steps.

Both signals are always computed; ``reward_mode`` picks which one ``step`` returns as
``reward``, and ``info`` carries all of them so either can drive learning:

* ``info["outcome_reward"]``: the ORM reward of this step (scalar float32),
* ``info["process_reward"]``: this step's correctness (scalar float32),
* ``info["correct_fraction"]``: correct steps so far / N (the PRM episode score on the
  last step).

The observation is the step index ``t`` (int32 scalar in ``[0, N)``): a tabular policy
keeps one logit row per step. Episodes always last exactly N steps (``terminated`` on the
last); nothing is truncated.
"""

from __future__ import annotations

import jax.numpy as jnp
from flax import struct

from rljax.envs.base import Environment
from rljax.types import Array, PRNGKey

REWARD_MODES = ("orm", "prm")
"""The values of ``ChainMDP(reward_mode=...)``: outcome (ORM) or process (PRM) reward."""


@struct.dataclass
class ChainState:
    """``time``: step index (int32 scalar); ``num_correct``: correct steps so far (int32)."""

    time: Array
    num_correct: Array


@struct.dataclass
class ChainParams:
    """``length``: number of steps N (static, >= 1)."""

    length: int = struct.field(pytree_node=False, default=5)


class ChainMDP(Environment):
    """N-step chain with outcome (ORM) and process (PRM) rewards; see the module docstring.

    Observation: the step index, int32 scalar ``[]`` in ``[0, N)``; action: int32 scalar
    ``[]`` in ``{0, 1}``; ``reward`` and every ``info`` entry are float32 scalars ``[]``.

    Args:
      length: chain length N (>= 1).
      reward_mode: ``"orm"`` or ``"prm"`` -- which signal ``step`` returns as ``reward``.
    """

    def __init__(self, length: int = 5, reward_mode: str = "orm"):
        if not isinstance(length, int) or isinstance(length, bool) or length < 1:
            raise ValueError(f"chain length: must be an integer >= 1, got {length!r}")
        if reward_mode not in REWARD_MODES:
            raise ValueError(f"reward_mode: must be one of {REWARD_MODES}, got {reward_mode!r}")
        self.length = length
        self.reward_mode = reward_mode

    @property
    def default_params(self) -> ChainParams:
        return ChainParams(length=self.length)

    @property
    def num_actions(self) -> int:
        return 2

    @property
    def num_states(self) -> int:
        """Number of distinct observations (step indices)."""
        return self.length

    def reset_env(self, key: PRNGKey, params: ChainParams) -> tuple[Array, ChainState]:
        """Start at step 0: ``obs = 0`` (int32 ``[]``), no correct steps yet."""
        del key, params
        state = ChainState(time=jnp.int32(0), num_correct=jnp.int32(0))
        return state.time, state

    def step_env(self, key: PRNGKey, state: ChainState, action: Array, params: ChainParams):
        """Score ``action`` (int32 ``[]``; 1 is correct) and move to the next step.

        Returns ``(obs [], state, reward [], terminated [], truncated [], info)``, every
        ``info`` value a float32 scalar (see the module docstring); ``terminated`` on step N.
        """
        del key
        correct = action == 1
        num_correct = state.num_correct + correct.astype(jnp.int32)
        time = state.time + 1
        terminated = time >= params.length
        process_reward = correct.astype(jnp.float32)
        all_correct = jnp.logical_and(terminated, num_correct == params.length)
        outcome_reward = all_correct.astype(jnp.float32)
        reward = outcome_reward if self.reward_mode == "orm" else process_reward
        info = {
            "outcome_reward": outcome_reward,
            "process_reward": process_reward,
            "correct_fraction": num_correct.astype(jnp.float32) / params.length,
        }
        state = ChainState(time=time, num_correct=num_correct)
        return time, state, reward, terminated, jnp.bool_(False), info
