"""One seed's REINFORCE training on the ChainMDP, built from the library's layers.

Shared by the ``orm-vs-prm`` study, the ``grid`` / ``sweep`` / ``scaling`` benchmarks and
the quick-start notebook, so all of them time and report the same program.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

from rljax.advantages import make_baseline
from rljax.algorithms import EpisodeBatch, reinforce
from rljax.envs import ChainMDP
from rljax.nonfinite import NONFINITE_STEP, track_nonfinite
from rljax.policies import tabular_softmax
from rljax.rollout import episode_rollout


def make_chain_train(
    *,
    mode: str,
    chain_length: int = 5,
    episodes: int = 400,
    learning_rate: float = 0.1,
    baseline: str = "ema",
    baseline_init: float = 0.5,
    baseline_rate: float = 0.05,
):
    """Build ``train(key) -> {"success": bool [episodes], "final_logits": [N, 2],
    NONFINITE_STEP: int32 []}`` for reward mode ``mode``.

    Each episode: roll out the tabular softmax policy for ``chain_length`` steps, update
    with REINFORCE (ORM: every step's return is the final outcome, ``discount=1``;
    PRM: each step's return is its own correctness, ``discount=0``), baseline fed with the
    episode's score (outcome reward, or fraction of correct steps), plain SGD.
    ``success[e]`` is whether episode ``e`` had every step correct;
    ``outputs[rljax.nonfinite.NONFINITE_STEP]`` is the first episode after whose update
    the parameters were non-finite (NaN/inf), ``-1`` if none.
    """
    env = ChainMDP(chain_length, mode)
    env_params = env.default_params
    policy = tabular_softmax(env.num_states, env.num_actions)
    kwargs = {"initial": baseline_init, "rate": baseline_rate} if baseline == "ema" else {}
    rl = reinforce(
        policy.apply,
        baseline=make_baseline(baseline, **kwargs),
        discount=1.0 if mode == "orm" else 0.0,
    )
    opt = optax.sgd(learning_rate)
    score_key = "outcome_reward" if mode == "orm" else "correct_fraction"

    def train(key):
        # Episode e's policy noise is row e of one draw on key_policy (see
        # rollout.draw_uniforms_and_keys: no per-episode key splitting); the env and update
        # keys are folded per episode and dropped by XLA when nothing reads them.
        key_init, key_policy, key_env, key_update = jax.random.split(key, 4)
        params = policy.init(key_init, None)
        carry = (params, rl.init(params), opt.init(params), jnp.int32(-1))

        def one_episode(carry, episode):
            params, rl_state, opt_state, nonfinite_step = carry
            traj = episode_rollout(
                key_policy, env, env_params, policy.apply, params, chain_length, unroll=True,
                row=episode, env_key=jax.random.fold_in(key_env, episode),
            )
            batch = EpisodeBatch(
                obs=traj.obs[None],
                actions=traj.action[None],
                rewards=traj.reward[None],
                mask=jnp.ones_like(traj.reward)[None],
                episode_reward=traj.info[score_key][-1:],
            )
            grads, rl_state, _ = rl.update(
                params, rl_state, batch, jax.random.fold_in(key_update, episode)
            )
            updates, opt_state = opt.update(grads, opt_state, params)
            params = optax.apply_updates(params, updates)
            nonfinite_step = track_nonfinite(nonfinite_step, episode, params)
            success = traj.info["outcome_reward"][-1] > 0
            return (params, rl_state, opt_state, nonfinite_step), success

        (params, _, _, nonfinite_step), success = jax.lax.scan(
            one_episode, carry, jnp.arange(episodes))
        return {"success": success, "final_logits": params["logits"],
                NONFINITE_STEP: nonfinite_step}

    return train
