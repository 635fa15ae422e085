"""Best-of-N, voting and beam search on the equation environment."""

from collections import Counter

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rljax.envs.equation import EquationEnv, EquationParams
from rljax.search.beam import beam_search
from rljax.search.best_of_n import (
    Candidates,
    best_of_n,
    majority_vote,
    sample_candidates,
    weighted_vote,
)

ENV = EquationEnv()
K = ENV.k


def uniform_policy(params, obs):
    return jnp.zeros(ENV.num_actions)


def oracle_policy(params, obs):
    """Greedy solver as logits: subtract c x, subtract b, divide by a - c, answer."""
    a, b, c, d = [jnp.round(obs[i] * 10).astype(jnp.int32) for i in range(4)]
    sub = lambda k: jnp.where(k < 0, k + K, k + K - 1)  # noqa: E731
    divisors = jnp.asarray([v for v in range(-K, K + 1) if v not in (0, 1)])
    div = 4 * K + jnp.argmax(divisors == (a - c))
    action = jnp.where(c != 0, 2 * K + sub(c), jnp.where(
        b != 0, sub(b), jnp.where(a - c != 1, div, ENV.answer_action)))
    return 10.0 * jax.nn.one_hot(action, ENV.num_actions)


def problem(seed, level=2):
    return ENV.reset(jax.random.key(seed), EquationParams(level=jnp.int32(level)))


def test_oracle_candidates_all_correct_uniform_mostly_wrong():
    obs, state = problem(0)
    good = jax.jit(lambda k: sample_candidates(k, ENV, EquationParams(), oracle_policy, None,
                                               obs, state, 8, 6, temperature=0.0))(
        jax.random.key(1))
    assert np.all(np.asarray(good.outcome) == 1.0) and np.all(np.asarray(good.answered))
    assert np.all(np.asarray(good.process_min) == 1.0)
    assert np.all(np.asarray(good.evaluations) == 4)
    bad = sample_candidates(jax.random.key(2), ENV, EquationParams(), uniform_policy, None, obs,
                            state, 64, 6)
    assert np.asarray(bad.outcome).mean() < 0.3
    assert np.all(np.asarray(bad.evaluations) <= 6) and np.all(np.asarray(bad.evaluations) >= 1)


def random_candidates(seed, n=16):
    rng = np.random.default_rng(seed)
    answers = rng.integers(-3, 4, size=n)
    answered = rng.random(n) < 0.8
    truth = 1
    return Candidates(answer=jnp.asarray(answers, jnp.int32), answered=jnp.asarray(answered),
                      outcome=jnp.asarray((answers == truth) & answered, jnp.float32),
                      process_min=jnp.asarray(rng.random(n), jnp.float32),
                      process_mean=jnp.asarray(rng.random(n), jnp.float32),
                      evaluations=jnp.full(n, 3, jnp.int32))


@pytest.mark.parametrize("seed", range(5))
def test_votes_vs_python(seed):
    c = random_candidates(seed)
    ans = np.asarray(c.answer)
    ok = np.asarray(c.answered)
    w = np.asarray(c.process_min)
    counts = Counter(ans[ok].tolist())
    top = max(counts.values())
    first = next(a for a in ans[ok] if counts[a] == top)  # ties: first appearance
    got, correct = jax.jit(majority_vote)(c)
    assert int(got) == first and float(correct) == float(first == 1)
    totals = {a: w[ok & (ans == a)].sum() for a in set(ans[ok].tolist())}
    best = max(totals.values())
    first_w = next(a for a in ans[ok] if np.isclose(totals[a], best))
    got_w, _ = jax.jit(weighted_vote)(c, c.process_min)
    assert int(got_w) == first_w
    idx, correct = best_of_n(c, c.outcome)
    assert float(correct) == float(np.asarray(c.outcome).max())
    # vmap over problems
    stacked = jax.tree_util.tree_map(lambda x: jnp.stack([x, x]), c)
    assert jax.vmap(majority_vote)(stacked)[0].shape == (2,)


@pytest.mark.parametrize("level", [1, 2, 3])
def test_prm_beam_search_solves_with_a_uniform_policy(level):
    params = EquationParams(level=jnp.int32(level))
    for seed in range(3):
        obs, state = problem(seed, level)
        answer, correct, evaluations = jax.jit(
            lambda o, s: beam_search(ENV, params, uniform_policy, None, o, s, beam_width=2,
                                     expansions=ENV.num_actions, max_steps=6))(obs, state)
        assert float(correct) == 1.0 and int(answer) == int(state.solution)
        assert 0 < int(evaluations) <= 6 * 2 * (1 + ENV.num_actions)


def test_search_bad_arguments():
    obs, state = problem(0)
    with pytest.raises(ValueError, match="num_samples"):
        sample_candidates(jax.random.key(0), ENV, EquationParams(), uniform_policy, None, obs,
                          state, 0, 4)
    with pytest.raises(ValueError, match="beam_width"):
        beam_search(ENV, EquationParams(), uniform_policy, None, obs, state, beam_width=0,
                    expansions=2, max_steps=3)
