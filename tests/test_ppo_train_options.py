"""PPOTrainConfig's semantics switches: ``bootstrap_truncations=False`` ends a time-limit
truncation like a termination (gymnax < 1.0, gymnax-blines, rejax) and is bitwise the run
on an env that gives no ``final_obs``; ``grad_clip="elementwise"`` is ``optax.clip``
(rejax) where the default is the global norm. Each under jit and vmap, with one-line
errors for bad values."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from rljax.contracts import TruncationBootstrapWarning
from rljax.envs import CartPole
from rljax.policies import mlp_actor_critic
from rljax.training import PPOTrainConfig, make_ppo_train
from rljax.training.ppo import ppo_optimizer

NET = mlp_actor_critic(2, (16, 16))
# 10-step episodes: every env truncates several times in each 16-step rollout.
CONFIG = PPOTrainConfig(num_envs=2, num_steps=16, total_steps=2 * 16 * 4, learning_rate=1e-3)


class NoFinalObs:
    """CartPole whose step info lacks ``final_obs`` (what an env without it gives)."""

    def __init__(self, env):
        self.env = env
        self.default_params = env.default_params

    def __getattr__(self, name):
        return getattr(self.env, name)

    def reset(self, key, params):
        return self.env.reset(key, params)

    def step(self, key, state, action, params):
        obs, state, reward, terminated, truncated, info = self.env.step(key, state, action,
                                                                        params)
        return obs, state, reward, terminated, truncated, {
            k: v for k, v in info.items() if k != "final_obs"}


def _run(env, config):
    keys = jax.random.split(jax.random.key(3), 2)
    return jax.jit(jax.vmap(make_ppo_train(env, NET, config)))(keys)


def test_no_bootstrap_is_the_run_without_final_obs_and_bootstrapping_changes_it():
    env = CartPole(max_steps_in_episode=10)
    off = _run(env, CONFIG.replace(bootstrap_truncations=False))
    with pytest.warns(TruncationBootstrapWarning, match="final_obs"):
        plain = _run(NoFinalObs(env), CONFIG)
    on = _run(env, CONFIG)
    for name in off:
        np.testing.assert_array_equal(off[name], plain[name], err_msg=name)
    assert int(np.asarray(on["episodes"]).sum()) > 0
    assert not np.array_equal(on["value_loss"], off["value_loss"])


def _grads(key):
    a, b = jax.random.split(key)
    return {"w": 3.0 * jax.random.normal(a, (5, 4)), "b": 0.2 * jax.random.normal(b, (4,))}


@pytest.mark.parametrize("grad_clip", ["elementwise", "global_norm"])
def test_grad_clip_matches_optax_under_jit_and_vmap(grad_clip):
    config = CONFIG.replace(grad_clip=grad_clip, max_grad_norm=0.5, anneal_lr=False)
    clip = optax.clip if grad_clip == "elementwise" else optax.clip_by_global_norm
    reference = optax.chain(clip(0.5), optax.adam(1e-3, eps=1e-5))
    params = {"w": jnp.zeros((5, 4)), "b": jnp.zeros(4)}

    def two_steps(tx, key):
        state = tx.init(params)
        p = params
        for k in jax.random.split(key, 2):
            updates, state = tx.update(_grads(k), state, p)
            p = optax.apply_updates(p, updates)
        return p

    keys = jax.random.split(jax.random.key(0), 3)
    ours = jax.jit(jax.vmap(lambda k: two_steps(ppo_optimizer(config), k)))(keys)
    theirs = jax.vmap(lambda k: two_steps(reference, k))(keys)
    for name in ours:
        np.testing.assert_allclose(ours[name], theirs[name], rtol=1e-6, atol=1e-9)
    other = optax.chain((optax.clip_by_global_norm if grad_clip == "elementwise"
                         else optax.clip)(0.5), optax.adam(1e-3, eps=1e-5))
    differs = jax.vmap(lambda k: two_steps(other, k))(keys)
    assert not np.allclose(ours["w"], differs["w"], rtol=1e-4)


@pytest.mark.parametrize("field, value", [("grad_clip", "norm"),
                                          ("bootstrap_truncations", 1)])
def test_bad_switch_values_fail_in_one_line(field, value):
    with pytest.raises(ValueError, match=f"^{field}: must be") as info:
        make_ppo_train(CartPole(), NET, CONFIG.replace(**{field: value}))
    assert "\n" not in str(info.value)
