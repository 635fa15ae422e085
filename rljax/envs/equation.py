""""Solve for x": linear equations with integer coefficients as a step MDP.

The state is an equation ``a x + b = c x + d`` (int32 coefficients) whose solution
``x* = (d - b) / (a - c)`` is an integer. A step is an algebraic move from a fixed
discrete action set with operands:

=================  ===========================  =============================================
actions            move                          effect on (a, b, c, d)
=================  ===========================  =============================================
0 .. 2K-1          subtract the constant k       (a, b - k, c, d - k),  k in {-K..K} \\ {0}
2K .. 4K-1         subtract the term m x         (a - m, b, c - m, d),  m in {-K..K} \\ {0}
4K .. 6K-2         divide both sides by q        (a/q, b/q, c/q, d/q),  q in {-K..K} \\ {0, 1},
                                                  only if q divides all four (else masked)
6K - 1             state the answer              the answer is ``d`` (right only if it equals
                                                  ``x*``: a guess before ``x = d`` is read off
                                                  is rarely right); ends the episode
=================  ===========================  =============================================

With ``K = 10`` that is 60 actions, most of them useless in any given state: a
realistic branching factor for search. Every unmasked move keeps the solution set (the
step verifier checks it anyway).

* **Step verifier** (process reward, ``info["process_reward"]``): 1 if the move keeps the
  solution set and strictly lowers the *distance to solved form*
  ``phi = 1[b != 0] + 1[c != 0] + 1[a - c != 1]`` (or states the right answer), else 0.
* **Outcome verifier** (``reward``): 1 when the stated answer equals ``x*``, else 0.
* ``info["answered"]``/``info["answer"]`` carry the stated answer (for voting).
* Episodes end on an answer (``terminated``) or after ``max_steps`` moves
  (``truncated``). Invalid moves are masked by :meth:`EquationEnv.action_mask`; an
  invalid move stepped anyway leaves the equation unchanged and earns nothing.

Difficulty levels (``EquationParams.level``, a pytree leaf so it can vary per seed):

0. ``x + b = d``;  1. ``a x + b = d``;  2. ``a x + b = c x + d``;
3. like 2 with larger coefficients and negative solutions.

A solved-form greedy solver needs 1, 2-3, 3-4 and 3-4 moves plus the answer.

**Held-out split.** :func:`is_held_out` splits the problem space by a hash of the four
coefficients (a problem is held out iff the hash is 0 mod ``HOLDOUT_MODULUS = 5``, about
a fifth of each level); :func:`sample_split_equation` draws from one side of it. Training
draws only the training side and evaluation only the held-out side, so the two never
share a problem. :func:`enumerate_equations` lists a level's whole problem space (180,
900, 10,800 and 129,600 equations at levels 0-3), so the split can be checked exactly.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from rljax.envs.base import Environment
from rljax.types import Array, PRNGKey

OPERAND_RANGE = 10
NUM_LEVELS = 4
HOLDOUT_MODULUS = 5


@struct.dataclass
class EquationState:
    """``coeffs``: int32 ``[4]`` = (a, b, c, d) of ``a x + b = c x + d``; ``solution``:
    int32 ``x*``; ``time``: moves made; ``answered``/``answer``: the stated answer."""

    coeffs: Array
    solution: Array
    time: Array
    answered: Array
    answer: Array


@struct.dataclass
class EquationParams:
    """``level``: difficulty 0-3 (int32 scalar leaf ``[]``); ``max_steps``: episode limit
    (static)."""

    level: Array = struct.field(default_factory=lambda: jnp.int32(1))
    max_steps: int = struct.field(pytree_node=False, default=8)


def num_actions(operand_range: int = OPERAND_RANGE) -> int:
    """Size of the action set for operands in ``{-K..K}``: ``6K``."""
    return 6 * operand_range


def _operands(k: int) -> Array:
    values = np.arange(-k, k + 1, dtype=np.int32)
    return jnp.asarray(values[values != 0])  # 2K values


def sample_equation(key: PRNGKey, level: Array) -> tuple[Array, Array]:
    """Sample ``(coeffs [4], solution)`` at difficulty ``level`` (traceable).

    The solution ``x`` and the slope ``s = a - c`` are drawn first (``2 <= |s| <= 9``, so
    one division solves it and every needed operand lies in the action set), then ``c``
    and ``b``, and ``d = s x + b``:

    * level 0: ``a = 1, c = 0``, ``x`` in 0..9;  level 1: ``a = s`` in 2..6, ``c = 0``;
    * level 2: ``s`` in 2..6, ``c`` in ±1..6;  level 3: ``s`` in ±2..9, ``c`` in ±1..9,
      ``x`` in -12..12.
    """
    k_x, k_s, k_b, k_c, k_sign, k_csign, k_bsign = jax.random.split(key, 7)
    big = level >= 3
    x_max = jnp.where(big, 12, 9)
    x = jax.random.randint(k_x, (), 0, 1 << 20) % (2 * x_max + 1) - x_max
    x = jnp.where(big, x, jnp.abs(x))
    s_max = jnp.where(big, 9, 6)
    slope = 2 + jax.random.randint(k_s, (), 0, 1 << 20) % (s_max - 1)  # 2..s_max
    slope = jnp.where(jax.random.bernoulli(k_sign) & big, -slope, slope)
    slope = jnp.where(level == 0, 1, slope)
    c = 1 + jax.random.randint(k_c, (), 0, 1 << 20) % s_max  # 1..s_max
    c = jnp.where(jax.random.bernoulli(k_csign), -c, c)
    c = jnp.where(level >= 2, c, 0)
    a = slope + c
    b = jax.random.randint(k_b, (), 1, 10)
    b = jnp.where(jax.random.bernoulli(k_bsign), -b, b)
    d = slope * x + b
    return jnp.stack([a, b, c, d]).astype(jnp.int32), x.astype(jnp.int32)


def enumerate_equations(level: int) -> np.ndarray:
    """Every equation :func:`sample_equation` can draw at ``level``, as int32 ``[N, 5]``
    rows ``(a, b, c, d, x*)`` (numpy; ``N`` = 180, 900, 10,800, 129,600 for levels 0-3).

    The support follows :func:`sample_equation`: ``b`` in ±1..9; level 0: ``s = 1``,
    ``x`` in 0..9; levels 1-2: ``s`` in 2..6, ``x`` in 0..9; level 3: ``s`` in ±2..9,
    ``x`` in -12..12; ``c = 0`` below level 2, ``c`` in ±1..6 at level 2 and ±1..9 at 3;
    ``a = s + c``, ``d = s x + b``. Distinct draws give distinct rows.
    """
    if level not in range(NUM_LEVELS):
        raise ValueError(f"level: must be an integer in 0..{NUM_LEVELS - 1}, got {level!r}")
    signed = lambda m: [v for v in range(-m, m + 1) if v != 0]  # noqa: E731
    xs = range(-12, 13) if level == 3 else range(10)
    slopes = [1] if level == 0 else (signed(9) if level == 3 else list(range(2, 7)))
    slopes = [s for s in slopes if abs(s) >= 2 or level == 0]
    cs = [0] if level < 2 else signed(9 if level == 3 else 6)
    rows = [(s + c, b, c, s * x + b, x)
            for x in xs for s in slopes for c in cs for b in signed(9)]
    return np.asarray(rows, np.int32)


def is_held_out(coeffs: Array, modulus: int = HOLDOUT_MODULUS) -> Array:
    """Whether each problem ``coeffs`` (int ``[..., 4]`` = (a, b, c, d)) is in the held-out
    split: bool ``[...]``.

    ``h_0 = 0``, ``h_{i+1} = f((h_i xor coeff_i) * 0x9E3779B1)`` with ``f(h) = h xor (h >> 15)``
    in uint32 arithmetic (a multiplicative hash, Knuth's golden-ratio constant), held out
    iff ``h_4 mod modulus == 0``; False everywhere when ``modulus <= 1`` (no split). The
    split depends on the coefficients alone, so it is the same at every level.
    """
    if modulus <= 1:
        return jnp.zeros(jnp.shape(coeffs)[:-1], bool)
    h = jnp.zeros(jnp.shape(coeffs)[:-1], jnp.uint32)
    for i in range(4):
        h = (h ^ jnp.asarray(coeffs)[..., i].astype(jnp.uint32)) * jnp.uint32(0x9E3779B1)
        h = h ^ (h >> 15)
    return h % jnp.uint32(modulus) == 0


def sample_split_equation(key: PRNGKey, level: Array, modulus: int = HOLDOUT_MODULUS,
                          held_out: bool = True) -> tuple[Array, Array]:
    """``(coeffs [4], solution [])`` at ``level`` from one side of the split.

    Rejection sampling: :func:`sample_equation` is redrawn (``lax.while_loop``) until
    ``is_held_out(coeffs, modulus) == held_out``, so the draw is :func:`sample_equation`'s
    distribution conditioned on the side. Traceable and vmappable. ``modulus <= 1``
    disables the split (one plain draw).

    Args:
      key: PRNG key.
      level: int32 ``[]`` difficulty 0-3.
      modulus: the split's modulus (static Python int).
      held_out: True for the held-out (evaluation) side, False for the training side.
    """
    key, sub = jax.random.split(key)
    coeffs, solution = sample_equation(sub, level)
    if modulus <= 1:
        return coeffs, solution

    def wrong_side(carry):
        return is_held_out(carry[0], modulus) != held_out

    def redraw(carry):
        _, _, k = carry
        k, sub = jax.random.split(k)
        return (*sample_equation(sub, level), k)

    coeffs, solution, _ = jax.lax.while_loop(wrong_side, redraw, (coeffs, solution, key))
    return coeffs, solution


def distance_to_solved(coeffs: Array) -> Array:
    """``phi = 1[b != 0] + 1[c != 0] + 1[a - c != 1]`` (int32): 0 iff the equation reads
    ``x = d``. Each of the three useful moves (subtract ``c x``, subtract ``b``, divide by
    ``a - c``) removes one term, since subtractions leave ``a - c`` unchanged."""
    a, b, c = coeffs[0], coeffs[1], coeffs[2]
    return ((b != 0).astype(jnp.int32) + (c != 0).astype(jnp.int32)
            + (a - c != 1).astype(jnp.int32))


def keeps_solution(coeffs: Array, solution: Array) -> Array:
    """Whether ``x*`` still solves ``a x + b = c x + d`` and the equation still has a unique
    solution (``a != c``)."""
    a, b, c, d = coeffs[0], coeffs[1], coeffs[2], coeffs[3]
    return (a * solution + b == c * solution + d) & (a != c)


class EquationEnv(Environment):
    """The "solve for x" step MDP (module docstring).

    Observation: float32 ``[8]``: ``(a, b, c, d) / 10``, the one-hot level ``[4]`` is not
    included -- the policy sees only the equation -- but ``time / max_steps`` and
    ``phi / 3`` and two indicator features (x on the right, constant on the left) are.
    """

    def __init__(self, operand_range: int = OPERAND_RANGE):
        if operand_range < 2:
            raise ValueError(f"operand_range: must be >= 2, got {operand_range}")
        self.k = operand_range
        self.operands = _operands(operand_range)

    @property
    def default_params(self) -> EquationParams:
        return EquationParams()

    @property
    def num_actions(self) -> int:
        return num_actions(self.k)

    @property
    def answer_action(self) -> int:
        """The action that states the answer ``d``: the last one, ``6K - 1``."""
        return self.num_actions - 1

    def observation(self, state: EquationState, params: EquationParams) -> Array:
        """float32 ``[8]`` features of the current equation (see the class docstring)."""
        coeffs = state.coeffs.astype(jnp.float32)
        return jnp.concatenate([
            coeffs / 10.0,
            jnp.stack([
                state.time.astype(jnp.float32) / params.max_steps,
                distance_to_solved(state.coeffs).astype(jnp.float32) / 3.0,
                (state.coeffs[2] != 0).astype(jnp.float32),
                (state.coeffs[1] != 0).astype(jnp.float32),
            ]),
        ])

    def action_mask(self, state: EquationState, params: EquationParams | None = None) -> Array:
        """bool ``[A]``: True where the move is valid (subtractions always; division only
        by a common divisor; the answer always)."""
        del params
        k2 = 2 * self.k
        q = _divisors(self.k)
        divisible = jnp.all(state.coeffs[None, :] % q[:, None] == 0, axis=1)
        return jnp.concatenate([
            jnp.ones(k2, bool), jnp.ones(k2, bool), divisible, jnp.ones(1, bool)
        ])

    def apply_move(self, coeffs: Array, action: Array) -> Array:
        """The coefficients after ``action`` (no validity check; see :meth:`action_mask`).

        ``coeffs`` int32 ``[4]`` = (a, b, c, d), ``action`` int32 ``[]`` -> int32 ``[4]``.
        """
        k2 = 2 * self.k
        ops = self.operands
        divisors = _divisors(self.k)
        a, b, c, d = coeffs[0], coeffs[1], coeffs[2], coeffs[3]
        const = ops[jnp.clip(action, 0, k2 - 1)]
        term = ops[jnp.clip(action - k2, 0, k2 - 1)]
        q = divisors[jnp.clip(action - 2 * k2, 0, divisors.shape[0] - 1)]
        sub_const = jnp.stack([a, b - const, c, d - const])
        sub_term = jnp.stack([a - term, b, c - term, d])
        safe_q = jnp.where(q == 0, 1, q)
        divided = coeffs // safe_q
        new = jnp.where(action < k2, sub_const,
                        jnp.where(action < 2 * k2, sub_term,
                                  jnp.where(action < self.answer_action, divided, coeffs)))
        return new.astype(jnp.int32)

    def reset_env(self, key: PRNGKey, params: EquationParams):
        """A fresh equation at ``params.level``; returns ``(obs, state)``, ``obs`` float32
        ``[8]``."""
        coeffs, solution = sample_equation(key, params.level)
        state = EquationState(coeffs=coeffs, solution=solution, time=jnp.int32(0),
                              answered=jnp.bool_(False), answer=jnp.int32(0))
        return self.observation(state, params), state

    def step_env(self, key: PRNGKey, state: EquationState, action: Array,
                 params: EquationParams):
        """Apply move ``action`` (int32 ``[]``; invalid moves change nothing).

        Returns ``(obs [8], state, reward [], terminated [], truncated [], info)``: reward
        is the outcome verifier; ``info`` holds float32 ``[]`` ``process_reward`` and
        ``outcome_reward``, bool ``[]`` ``valid`` and ``answered``, int32 ``[]`` ``answer``.
        """
        del key
        valid = self.action_mask(state)[action]
        is_answer = action == self.answer_action
        new_coeffs = jnp.where(valid & ~is_answer, self.apply_move(state.coeffs, action),
                               state.coeffs)
        answer = state.coeffs[3]
        correct = is_answer & (answer == state.solution)
        kept = keeps_solution(new_coeffs, state.solution)
        progress = distance_to_solved(new_coeffs) < distance_to_solved(state.coeffs)
        process_reward = jnp.where(is_answer, correct, valid & kept & progress)
        time = state.time + 1
        new_state = EquationState(coeffs=new_coeffs, solution=state.solution, time=time,
                                  answered=is_answer, answer=jnp.where(is_answer, answer, 0))
        terminated = is_answer
        truncated = (time >= params.max_steps) & ~terminated
        info = {
            "process_reward": process_reward.astype(jnp.float32),
            "outcome_reward": correct.astype(jnp.float32),
            "valid": valid,
            "answered": is_answer,
            "answer": answer,
        }
        return (self.observation(new_state, params), new_state,
                correct.astype(jnp.float32), terminated, truncated, info)


def _divisors(k: int) -> Array:
    values = np.arange(-k, k + 1, dtype=np.int32)
    return jnp.asarray(values[(values != 0) & (values != 1)])  # 2K - 1 values
