"""K-answer bandit: one prompt, K possible answers, a fixed reward per answer.

The smallest "language model" task: the policy sees one observation (the prompt, obs 0),
picks one of K answers, gets that answer's reward and the episode ends. It is the setting
of the policy-gradient derivation (four answers, one of them right) and of GRPO's group
sampling: a group of G answers to the same prompt.

:class:`PromptBank` scales this to P prompts with one correct answer each and a known,
heavy-tailed initial success probability per prompt (many easy prompts, a long tail of
hard ones): the testbed for curricula and for how GRPO-style methods treat hard prompts.
"""

from __future__ import annotations

from dataclasses import dataclass

import chex
import jax
import jax.numpy as jnp
import numpy as np
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

    Observation: int32 scalar ``[]``, always 0; action: int32 scalar ``[]`` in
    ``[0, K)``; ``reward`` float32 ``[]``; ``info`` is empty.

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
        """Number of distinct observations: 1 (the one prompt)."""
        return 1

    def reset_env(self, key: PRNGKey, params: BanditParams):
        """Returns ``(obs, state)`` with the only observation, int32 ``0`` of shape ``[]``."""
        del key, params
        return jnp.int32(0), BanditState(time=jnp.int32(0))

    def step_env(self, key: PRNGKey, state: BanditState, action: Array, params: BanditParams):
        """Pays ``answer_rewards[action]`` (float32 ``[]``) for ``action`` (int32 ``[]``) and
        terminates; returns ``(obs [], state, reward [], terminated [], truncated [], {})``."""
        del key
        reward = params.answer_rewards[action]
        return (jnp.int32(0), BanditState(time=state.time + 1), reward, jnp.bool_(True),
                jnp.bool_(False), {})


# --------------------------------------------------------------------------------------
# Prompt bank: many answer bandits with known, heavy-tailed difficulty.
# --------------------------------------------------------------------------------------


@struct.dataclass
class PromptBankParams:
    """One sampled bank of ``P`` prompts with ``K`` answers each.

    Attributes:
      correct: int32 ``[P]`` index of each prompt's one correct answer.
      prior_logits: float32 ``[P, K]`` initial policy logits: ``log p0_i`` on the correct
        answer, ``log((1 - p0_i) / (K - 1))`` on each other one, so that
        ``softmax(prior_logits)[i, correct_i] == p0_i`` up to float rounding.
      p0: float32 ``[P]`` initial success probability of each prompt.
      difficulty: float32 ``[P]``, ``1 - p0``.
    """

    correct: Array
    prior_logits: Array
    p0: Array
    difficulty: Array


@struct.dataclass
class PromptBankState:
    """``time``: 0 before the answer (int32 scalar); ``prompt``: the prompt id (int32)."""

    time: Array
    prompt: Array


def _is_int(value) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


@dataclass(frozen=True)
class PromptBank(Environment):
    """``P`` prompts, each a ``K``-answer bandit with exactly one correct answer.

    A tabular softmax policy over answers (logits ``[P, K]``) that starts from
    :attr:`PromptBankParams.prior_logits` succeeds on prompt ``i`` with probability
    ``p0_i`` on its first try. The initial success probabilities form a two-component
    Beta mixture, *many easy prompts and a long tail of hard ones*:

        p0_i ~ Beta(easy_a, easy_b)  for round(easy_fraction * P) prompts (the easy ones),
        p0_i ~ Beta(hard_a, hard_b)  for the rest (the hard tail),
        p0_i <- clip(p0_i, min_p0, 1 - min_p0).

    The number of easy prompts is fixed (stratified, not a Bernoulli draw per prompt) and
    which prompt ids are easy is a uniform random permutation, so a bank's composition does
    not vary between seeds but prompt ids carry no difficulty order. The answer that is
    correct is uniform over the ``K`` answers, independently per prompt.

    Defaults (``easy_fraction=0.6``, Beta(6, 2) and Beta(0.6, 6), ``min_p0=1e-3``),
    measured on one bank of ``P = 100_000`` prompts (``jax.random.key(0)``; closed form of
    the clipped mixture in brackets):

    ===============================  ==================
    mean p0                          0.4863  [0.4864]
    median p0                        0.6054  [0.6067]
    fraction with p0 < 0.01          0.0796  [0.0796]
    fraction with p0 < 0.1           0.2686  [0.2694]
    fraction with p0 < 0.2           0.3442  [0.3454]
    fraction with p0 > 0.8           0.2532  [0.2540]
    fraction with p0 > 0.9           0.0895  [0.0898]
    fraction clipped to min_p0       0.0199  [0.0203]
    ===============================  ==================

    (Keys 1 and 2 agree to within 0.0025 on every row.) The hard tail's Beta(0.6, 6) has
    mean ``0.6 / 6.6 = 0.091`` and a density that diverges at 0: about 27 % of all prompts
    start below 10 % success and 8 % below 1 %, where a policy gradient barely moves
    because correct samples are rare; a quarter start above 80 %.

    :meth:`sample_params` draws one bank per key (a seed may draw its own bank, or a study
    may fix one bank for all seeds); it is pure and jit/vmap-able. The environment methods
    are gymnax-style one-step episodes: :meth:`reset` draws a prompt uniformly (obs = the
    prompt id), :meth:`step` pays 1 for the correct answer and terminates.

    Attributes:
      num_prompts: P >= 1.
      num_answers: K >= 2.
      easy_fraction: share of easy prompts, in [0, 1].
      easy_a, easy_b: Beta parameters (> 0) of the easy prompts' p0.
      hard_a, hard_b: Beta parameters (> 0) of the hard tail's p0.
      min_p0: p0 is clipped to ``[min_p0, 1 - min_p0]``; in (0, 0.5).
    """

    num_prompts: int = 256
    num_answers: int = 8
    easy_fraction: float = 0.6
    easy_a: float = 6.0
    easy_b: float = 2.0
    hard_a: float = 0.6
    hard_b: float = 6.0
    min_p0: float = 1e-3

    def __post_init__(self):
        if not _is_int(self.num_prompts) or self.num_prompts < 1:
            raise ValueError(f"num_prompts: must be an integer >= 1, got {self.num_prompts!r}")
        if not _is_int(self.num_answers) or self.num_answers < 2:
            raise ValueError(f"num_answers: must be an integer >= 2, got {self.num_answers!r}")
        if not 0.0 <= self.easy_fraction <= 1.0:
            raise ValueError(f"easy_fraction: must be in [0, 1], got {self.easy_fraction!r}")
        for name in ("easy_a", "easy_b", "hard_a", "hard_b"):
            value = getattr(self, name)
            if not value > 0.0 or not np.isfinite(value):
                raise ValueError(f"{name}: Beta parameter must be finite and > 0, got {value!r}")
        if not 0.0 < self.min_p0 < 0.5:
            raise ValueError(f"min_p0: must be in (0, 0.5), got {self.min_p0!r}")

    @property
    def num_easy(self) -> int:
        """Number of easy prompts in every bank: ``round(easy_fraction * P)``."""
        return int(round(self.easy_fraction * self.num_prompts))

    def sample_params(self, key: PRNGKey) -> PromptBankParams:
        """Draw one bank: correct answers, p0 from the Beta mixture, prior logits.

        Args:
          key: a typed PRNG key; the same key gives the same bank.

        Returns:
          :class:`PromptBankParams` with ``correct [P]``, ``prior_logits [P, K]``,
          ``p0 [P]`` and ``difficulty [P]``.
        """
        num_prompts, num_answers = self.num_prompts, self.num_answers
        key_correct, key_order, key_gamma = jax.random.split(key, 3)
        correct = jax.random.randint(key_correct, (num_prompts,), 0, num_answers, jnp.int32)
        is_easy = jax.random.permutation(key_order, jnp.arange(num_prompts) < self.num_easy)
        # Beta(a, b) = X / (X + Y), X ~ Gamma(a), Y ~ Gamma(b): one log-gamma draw of
        # [2, P] (as jax.random.beta does, in log space so tiny a stays exact), each
        # prompt with its own component's parameters.
        a = jnp.where(is_easy, self.easy_a, self.hard_a)
        b = jnp.where(is_easy, self.easy_b, self.hard_b)
        log_gamma = jax.random.loggamma(key_gamma, jnp.stack([a, b]), dtype=jnp.float32)
        p0 = jax.nn.sigmoid(log_gamma[0] - log_gamma[1])
        p0 = jnp.clip(p0, self.min_p0, 1.0 - self.min_p0)
        log_correct = jnp.log(p0)
        log_wrong = jnp.log1p(-p0) - jnp.log(jnp.float32(num_answers - 1))
        is_correct = jax.nn.one_hot(correct, num_answers, dtype=jnp.bool_)
        prior_logits = jnp.where(is_correct, log_correct[:, None], log_wrong[:, None])
        return PromptBankParams(correct=correct, prior_logits=prior_logits, p0=p0,
                                difficulty=1.0 - p0)

    def reward(self, params: PromptBankParams, prompt_ids: Array, answers: Array) -> Array:
        """``1[answers == correct[prompt_ids]]`` as float32.

        Args:
          params: the bank.
          prompt_ids: int ``[...]`` prompt ids in ``0..P-1``.
          answers: int ``[...]`` answer ids in ``0..K-1``, the same rank as ``prompt_ids``
            and broadcastable with it (for a group ``[P, G]`` pass ``prompt_ids[:, None]``).

        Returns:
          float32, the broadcast shape of ``prompt_ids`` and ``answers``.
        """
        chex.assert_equal_rank([prompt_ids, answers])
        chex.assert_type([prompt_ids, answers], int)
        return (answers == params.correct[prompt_ids]).astype(jnp.float32)

    def success_probability(self, params: PromptBankParams, logits: Array) -> Array:
        """Per-prompt success probability of a tabular softmax policy.

        ``p_i = softmax(logits_i)[correct_i]``.

        Args:
          params: the bank.
          logits: float ``[P, K]`` policy logits.

        Returns:
          float ``[P]``.
        """
        chex.assert_shape(logits, (self.num_prompts, self.num_answers))
        probs = jax.nn.softmax(logits, axis=-1)
        return jnp.take_along_axis(probs, params.correct[:, None], axis=-1)[:, 0]

    def pass_at_k(self, params: PromptBankParams, logits: Array, k: int) -> Array:
        """Exact pass@k of the policy: ``1 - (1 - p_i)^k``, ``k`` independent samples.

        Computed as ``-expm1(k * log(1 - p_i))``, with ``log(1 - p_i)`` taken as
        ``log1p(-p_i)`` when ``p_i < 1/2`` and as the log of the wrong answers' summed
        probability otherwise, so it keeps its relative accuracy when ``p_i`` is near 0
        and when ``1 - p_i`` is.
        (The unbiased pass@k *estimator* from n samples of Chen et al., 2021,
        arXiv:2107.03374, estimates this quantity.)

        Args:
          params: the bank.
          logits: float ``[P, K]`` policy logits.
          k: number of samples, an integer >= 1.

        Returns:
          float ``[P]``.
        """
        if not _is_int(k) or k < 1:
            raise ValueError(f"k: must be an integer >= 1, got {k!r}")
        chex.assert_shape(logits, (self.num_prompts, self.num_answers))
        probs = jax.nn.softmax(logits, axis=-1)
        is_correct = jax.nn.one_hot(params.correct, self.num_answers, dtype=jnp.bool_)
        p_correct = jnp.sum(jnp.where(is_correct, probs, 0.0), axis=-1)
        p_wrong = jnp.sum(jnp.where(is_correct, 0.0, probs), axis=-1)
        log_fail = jnp.where(p_correct < 0.5, jnp.log1p(-p_correct), jnp.log(p_wrong))
        return -jnp.expm1(k * log_fail)

    # ---- Environment protocol: one-step episodes ------------------------------------

    @property
    def default_params(self) -> PromptBankParams:
        """The bank of ``jax.random.key(0)``."""
        return self.sample_params(jax.random.key(0))

    @property
    def num_actions(self) -> int:
        return self.num_answers

    @property
    def num_states(self) -> int:
        """Number of distinct observations: the ``P`` prompt ids."""
        return self.num_prompts

    def reset_env(self, key: PRNGKey, params: PromptBankParams):
        """Draws a prompt uniformly; returns ``(obs, state)`` with ``obs`` the prompt id,
        int32 ``[]`` in ``[0, P)``."""
        del params
        prompt = jax.random.randint(key, (), 0, self.num_prompts, jnp.int32)
        return prompt, PromptBankState(time=jnp.int32(0), prompt=prompt)

    def step_env(self, key: PRNGKey, state: PromptBankState, action: Array,
                 params: PromptBankParams):
        """Pays ``1[action == correct[prompt]]`` and terminates; ``info["prompt"]`` is the
        prompt answered (the returned obs is already the next episode's prompt).

        ``action`` is int32 ``[]``; returns ``(obs [], state, reward [], terminated [],
        truncated [], {"prompt": int32 []})``.
        """
        del key
        reward = (action == params.correct[state.prompt]).astype(jnp.float32)
        new_state = PromptBankState(time=state.time + 1, prompt=state.prompt)
        return (state.prompt, new_state, reward, jnp.bool_(True), jnp.bool_(False),
                {"prompt": state.prompt})
