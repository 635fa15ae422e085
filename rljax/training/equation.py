"""One seed's GRPO training of the MLP actor-critic on "solve for x", and its evaluation.

Used by studies that compare an untrained and a trained policy (``rl-then-search``): the
trained actor is the search prior, the trained critic its value; ``test-time-search``
starts its problems with :func:`start_state`.

One update of :func:`make_equation_grpo_train`'s ``train(key)``:

1. sample ``P`` training problems, each at a level drawn from ``config.level_weights``
   (:func:`training_problems`: problems in the held-out split,
   :func:`rljax.envs.equation.is_held_out`, are redrawn, so training never sees one);
2. ``G`` attempts per problem with the masked policy at ``config.temperature`` for
   ``T = max_steps`` moves (an attempt stops at its answer; later steps are masked out),
   recording features ``[P, G, T, 8]``, action masks ``[P, G, T, 60]``, actions,
   log-probabilities, step-verifier rewards ``[P, G, T]`` and outcomes ``[P, G]``;
3. advantages: ``"outcome"`` (default) -- GRPO's group-relative outcome advantage (Shao
   et al., 2024, §4.1.2); ``"process"`` -- process supervision (§4.1.3,
   :func:`rljax.advantages.process_supervision_advantages`) on the environment's step
   verifier (1 for a move that lowers ``phi``); ``"progress"`` -- the same process
   supervision on potential-based step rewards ``phi(s_t) - phi(s_{t+1})`` (Ng et al.,
   1999), with the outcome as the answer step's reward; ``"outcome+progress"`` -- the sum
   of the first and the third;
4. ``config.inner_iterations`` (GRPO's mu) optimizer steps on the batch through
   :func:`rljax.algorithms.multi_step_update`, with the GRPO clipped surrogate (+ KL to the
   initial policy when ``kl_beta > 0``) on the actor and, on the critic, a Monte Carlo
   value regression ``value_coef * mean_t (V(s_t) - R)^2`` toward the attempt's outcome
   ``R`` (so ``V(s)`` estimates the policy's probability of solving from ``s``).

The whole run is one ``lax.scan`` over updates: ``jax.jit(train)`` is one program and
``jax.vmap(train)`` runs several seeds in it.

**What learns (measured, docs/equation_policy.md).** Pure outcome GRPO with a small
entropy bonus on the masked policy (``entropy_coef``) is the default and the best of the
modes measured: at initialisation a few of the ``P G = 512`` attempts per update succeed
by chance (mostly at level 0), enough signal to start. The raw step verifier is
farmable -- "subtract k" then "subtract -k" earns a reward every second move -- and the
policy learns exactly that (per-step reward -> 0.5, accuracy 0). The potential-based
``"progress"`` rewards telescope (no farming) but lead to a plateau of unit moves
(``b -> b + 1`` repeated), which the entropy bonus only partly escapes.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from rljax.advantages import process_supervision_advantages
from rljax.algorithms import multi_step_update
from rljax.algorithms.base import LossAux, RLTransform
from rljax.algorithms.grpo import GroupBatch, grpo
from rljax.config import ConfigError, check_fields, param
from rljax.envs.equation import (
    HOLDOUT_MODULUS,
    NUM_LEVELS,
    EquationEnv,
    EquationParams,
    EquationState,
    distance_to_solved,
    is_held_out,
    sample_split_equation,
)
from rljax.policies.equation import equation_actor_critic, masked_logits, masked_policy
from rljax.policies.sampling import categorical_log_prob, sample_masked
from rljax.types import Array, Params, PRNGKey

ADVANTAGES = ("outcome", "process", "progress", "outcome+progress")


@dataclasses.dataclass(frozen=True)
class EquationTrainConfig:
    """One seed's GRPO run on "solve for x".

    Attributes:
      level_weights: sampling weights of levels 0..3 for training problems.
      problems_per_update: P.
      group_size: G attempts per problem.
      updates: number of batches (rollout + update).
      learning_rate: Adam step size.
      kl_beta: KL coefficient toward the initial policy (0 disables it).
      clip_epsilon: PPO-style clip range of the GRPO surrogate.
      inner_iterations: GRPO's mu (optimizer steps per batch).
      num_minibatches: minibatches per inner iteration (split along problems).
      advantage: ``"outcome"`` (default), ``"progress"``, ``"process"`` or
        ``"outcome+progress"`` (module docstring).
      value_coef: weight of the critic's regression loss (0: critic untrained).
      entropy_coef: weight of the actor's entropy bonus (masked policy; 0: none).
      hidden_sizes: hidden widths of the actor and critic torsos.
      encoding: ``"onehot"`` or ``"raw"`` (:func:`rljax.policies.equation.encode_observation`).
      temperature: sampling temperature of the training rollouts.
      max_steps: moves per attempt (the environment's limit).
      holdout_modulus: every problem whose hash is 0 mod this is held out of training
        (about 1/m of each level); evaluation draws only from the held-out split. 0 or 1
        disables the split.
      seed: base seed (used by :func:`main`; ``train(key)`` takes its key).
    """

    level_weights: tuple[float, ...] = (0.1, 0.3, 0.3, 0.3)
    problems_per_update: int = param(64, "P: problems per update", low=1)
    group_size: int = param(8, "G: attempts per problem", low=1)
    updates: int = param(600, "GRPO updates (rollout + update) per seed", low=1)
    learning_rate: float = param(3e-3, "Adam's step size", low=0.0, low_open=True)
    kl_beta: float = param(0.0, "KL coefficient toward the initial policy (0: off)", low=0.0)
    clip_epsilon: float = param(0.2, "clip range of the GRPO surrogate", low=0.0,
                                low_open=True)
    inner_iterations: int = param(1, "GRPO's mu: optimizer steps per batch", low=1)
    num_minibatches: int = param(1, "minibatches per inner iteration (divides P)", low=1)
    advantage: str = param("outcome", "outcome, progress, process or outcome+progress",
                           choices=ADVANTAGES)
    value_coef: float = param(0.5, "weight of the critic's loss (0: untrained)", low=0.0)
    entropy_coef: float = param(0.03, "weight of the actor's entropy bonus", low=0.0)
    hidden_sizes: tuple[int, ...] = (64, 64)
    encoding: str = param("onehot", "the observation encoding", choices=("onehot", "raw"))
    temperature: float = param(1.0, "sampling temperature of the training rollouts",
                               low=0.0, low_open=True)
    max_steps: int = param(8, "moves per attempt (the environment's limit)", low=1)
    holdout_modulus: int = param(HOLDOUT_MODULUS, "problems with hash = 0 mod this are "
                                 "held out (0 or 1: no split)", low=0)
    seed: int = param(0, "base seed of main() (train(key) takes its key)", sweep=False,
                      low=0, high=2**31 - 1)

    def __post_init__(self):
        self.validate()

    def validate(self) -> None:
        """Raise a one-line :class:`~rljax.config.ConfigError` naming the first invalid
        field (each against its declaration, then the weights and sizes)."""
        if len(self.level_weights) != NUM_LEVELS or min(self.level_weights) < 0 or not (
            sum(self.level_weights) > 0
        ):
            raise ConfigError(
                f"level_weights: need {NUM_LEVELS} non-negative weights with a positive sum, "
                f"got {self.level_weights!r}")
        check_fields(self)
        if self.problems_per_update % self.num_minibatches:
            raise ConfigError(
                f"num_minibatches: must divide problems_per_update {self.problems_per_update}, "
                f"got {self.num_minibatches}")

    def train_config(self) -> EquationTrainConfig:
        """This config's trainer fields as a plain :class:`EquationTrainConfig` (what a
        study config that extends it hands the trainer)."""
        names = [f.name for f in dataclasses.fields(EquationTrainConfig)]
        return EquationTrainConfig(**{name: getattr(self, name) for name in names})


# ---------------------------------------------------------------------------------------
# Problems (the held-out split itself lives in rljax.envs.equation)


def training_problems(key_levels: PRNGKey, key_problems: PRNGKey,
                      config: EquationTrainConfig, num: int) -> tuple[Array, Array, Array]:
    """``num`` training problems: ``(levels [num], coeffs [num, 4], solutions [num])``.

    Levels are drawn (``key_levels``) from ``config.level_weights``; each problem comes
    (``key_problems``) from the *training* side of the split
    (:func:`rljax.envs.equation.sample_split_equation` with ``held_out=False``), so no
    update ever sees an evaluation problem. :func:`make_equation_grpo_train` draws every
    update's batch through this function.
    """
    level_logits = jnp.log(jnp.asarray(config.level_weights, jnp.float32))
    levels = jax.random.categorical(key_levels, level_logits, shape=(num,)).astype(jnp.int32)
    coeffs, solution = jax.vmap(
        lambda k, lv: sample_split_equation(k, lv, config.holdout_modulus, False))(
            jax.random.split(key_problems, num), levels)
    return levels, coeffs, solution


def start_state(coeffs: Array, solution: Array) -> EquationState:
    """The environment state at the start of problem ``coeffs``."""
    return EquationState(coeffs=coeffs, solution=solution, time=jnp.int32(0),
                         answered=jnp.bool_(False), answer=jnp.int32(0))


# ---------------------------------------------------------------------------------------
# Attempts


def run_attempt(
    key: PRNGKey,
    env: EquationEnv,
    env_params: EquationParams,
    logits_fn,
    state: EquationState,
    *,
    greedy: bool = False,
    temperature: float = 1.0,
) -> dict[str, Array]:
    """One attempt of ``T = env_params.max_steps`` moves from ``state``.

    Each move: ``a ~ softmax(masked logits / temperature)`` (``greedy``: argmax).

    Args:
      key: PRNG key.
      env, env_params: the environment.
      logits_fn: ``features [8] -> logits [A]`` (unmasked).
      state: start state.
      greedy: act greedily.
      temperature: > 0, for sampling.

    Returns:
      dict of ``features [T, 8]``, ``action_mask [T, A]``, ``actions [T]``,
      ``log_probs [T]`` (masked policy at temperature 1, the one trained), ``alive [T]``
      (float, 1 until and including the answer step), ``process_reward [T]`` (0 when not
      alive) and ``outcome`` (scalar, 1 if the stated answer was right).
    """

    def step(carry, key_t):
        state_t, done = carry
        features = env.observation(state_t, env_params)
        mask = env.action_mask(state_t, env_params)
        logits = masked_logits(logits_fn(features), mask)
        action = sample_masked(key_t, logits, mask, 0.0 if greedy else temperature)
        _, state_n, _, terminated, truncated, info = env.transition(key_t, state_t, action,
                                                                    env_params)
        alive = ~done
        state_n = jax.tree_util.tree_map(lambda n, o: jnp.where(alive, n, o), state_n, state_t)
        progress = jnp.where(
            info["answered"], info["outcome_reward"],
            (distance_to_solved(state_t.coeffs) - distance_to_solved(state_n.coeffs)
             ).astype(jnp.float32))
        record = {
            "features": features,
            "action_mask": mask,
            "actions": action,
            "log_probs": categorical_log_prob(logits, action),
            "alive": alive.astype(jnp.float32),
            "process_reward": jnp.where(alive, info["process_reward"], 0.0),
            "progress_reward": jnp.where(alive, progress, 0.0),
            "outcome": jnp.where(alive, info["outcome_reward"], 0.0),
        }
        return (state_n, done | terminated | truncated), record

    keys = jax.random.split(key, env_params.max_steps)
    _, record = jax.lax.scan(step, (state, jnp.bool_(False)), keys)
    record["outcome"] = jnp.sum(record["outcome"])
    return record


# ---------------------------------------------------------------------------------------
# Training


def _with_critic_and_entropy(rl: RLTransform, policy_apply, value_fn, value_coef: float,
                             entropy_coef: float) -> RLTransform:
    """``rl`` on ``params["actor"]``, plus an entropy bonus
    ``-entropy_coef * mean_t H(pi(.|s_t))`` on the actor and the critic's Monte Carlo
    regression ``value_coef * mean_t (V(s_t) - R)^2`` on ``params["critic"]`` (means over
    alive steps); the batch is ``(GroupBatch, returns [P, G, T])``."""

    def update(params, state, batch, key=None, **extra):
        group_batch, returns = batch
        actor_grads, state, metrics = rl.update(params["actor"], state, group_batch, key,
                                                **extra)
        mask = group_batch.mask.astype(jnp.float32)
        count = jnp.maximum(jnp.sum(mask), 1.0)

        def neg_entropy(actor):
            log_probs = jax.nn.log_softmax(policy_apply(actor, group_batch.obs), axis=-1)
            entropy = -jnp.sum(jnp.exp(log_probs) * log_probs, axis=-1)
            return -jnp.sum(entropy * mask) / count

        neg_ent, entropy_grads = jax.value_and_grad(neg_entropy)(params["actor"])
        actor_grads = jax.tree_util.tree_map(lambda a, e: a + entropy_coef * e, actor_grads,
                                             entropy_grads)

        def value_loss(critic):
            values = value_fn({"critic": critic}, group_batch.obs["features"])
            return jnp.sum(jnp.square(values - returns) * mask) / count

        loss, critic_grads = jax.value_and_grad(value_loss)(params["critic"])
        critic_grads = jax.tree_util.tree_map(lambda g: value_coef * g, critic_grads)
        return {"actor": actor_grads, "critic": critic_grads}, state, {
            **metrics, "value_loss": loss, "entropy": -neg_ent}

    def loss(params, state, batch, key=None, **extra):
        # the scalar whose gradient `update` returns (to float rounding: `update` sums the
        # three gradients separately, which keeps the study's recorded bits)
        group_batch, returns = batch
        actor_loss, aux = rl.loss(params["actor"], state, group_batch, key, **extra)
        mask = group_batch.mask.astype(jnp.float32)
        count = jnp.maximum(jnp.sum(mask), 1.0)
        log_probs = jax.nn.log_softmax(policy_apply(params["actor"], group_batch.obs), axis=-1)
        entropy = jnp.sum(-jnp.sum(jnp.exp(log_probs) * log_probs, axis=-1) * mask) / count
        values = value_fn({"critic": params["critic"]}, group_batch.obs["features"])
        value_loss = jnp.sum(jnp.square(values - returns) * mask) / count
        total = actor_loss - entropy_coef * entropy + value_coef * value_loss
        metrics = {**aux.metrics, "value_loss": value_loss, "entropy": entropy}
        return total, LossAux(aux.rl_state, metrics)

    return RLTransform(init=lambda params: rl.init(params["actor"]), update=update, loss=loss)


def make_network(config: EquationTrainConfig):
    """The config's actor-critic (:func:`rljax.policies.equation.equation_actor_critic`)."""
    return equation_actor_critic(config.hidden_sizes, encoding=config.encoding)


def init_params(config: EquationTrainConfig, key: PRNGKey) -> Params:
    """Untrained parameters ``{"actor", "critic"}`` (what ``train(key)`` starts from)."""
    key_init = jax.random.split(key, 4)[0]
    return make_network(config).init(key_init, jnp.zeros(8, jnp.float32))


def make_equation_grpo_train(config: EquationTrainConfig = EquationTrainConfig()):
    """Build ``train(key) -> (params, logs)`` for ``config`` (module docstring).

    Returns:
      ``train``: ``params`` is ``{"actor", "critic"}`` (the actor-critic of
      :func:`make_network`); ``logs`` holds ``[updates]`` arrays ``accuracy`` (fraction of
      the update's ``P G`` attempts that were right), ``signal_fraction`` (groups whose
      outcomes differ), ``process_reward`` (mean step-verifier reward per alive step),
      ``loss``, ``value_loss``, ``kl``, ``clip_fraction``, and ``level_accuracy`` /
      ``level_count`` ``[updates, 4]`` (attempt accuracy per level; NaN where none), and
      ``held_out_drawn`` ``[updates]`` (how many of the update's problems lie in the
      evaluation split; 0 unless the split is broken).
    """
    env = EquationEnv()
    env_params = EquationParams(level=jnp.int32(0), max_steps=config.max_steps)
    net = make_network(config)
    p, g, t = config.problems_per_update, config.group_size, config.max_steps
    rl = grpo(
        masked_policy(net.actor.apply),
        group_size=g,
        advantage="group_relative",
        clip_epsilon=config.clip_epsilon,
        kl_beta=config.kl_beta,
    )
    rl = _with_critic_and_entropy(rl, masked_policy(net.actor.apply), net.value,
                                  config.value_coef, config.entropy_coef)
    optimizer = optax.adam(config.learning_rate)
    # The evaluation split the logs check against (the default one when training's is off).
    split_modulus = config.holdout_modulus if config.holdout_modulus > 1 else HOLDOUT_MODULUS

    def attempts(params, key, coeffs, solution):
        # G attempts at one problem.
        state = start_state(coeffs, solution)
        logits_fn = lambda f: net.actor.apply(params["actor"], f)  # noqa: E731
        run = lambda k: run_attempt(k, env, env_params, logits_fn, state,  # noqa: E731
                                    temperature=config.temperature)
        return jax.vmap(run)(jax.random.split(key, g))

    def advantages(record):
        alive = record["alive"]
        outcome_adv = None
        if config.advantage in ("outcome", "outcome+progress"):
            rewards = record["outcome"]
            mean = jnp.mean(rewards, axis=1, keepdims=True)
            std = jnp.std(rewards, axis=1, keepdims=True)
            outcome_adv = jnp.broadcast_to(((rewards - mean) / (std + 1e-6))[..., None],
                                           (p, g, t)) * alive
        if config.advantage == "outcome":
            return outcome_adv
        ends = jnp.broadcast_to(jnp.arange(t), (g, t))
        steps = record["process_reward" if config.advantage == "process" else "progress_reward"]
        process = jax.vmap(lambda r, m: process_supervision_advantages(r, ends, m, t))(
            steps, alive)
        return process if outcome_adv is None else process + outcome_adv

    def train(key: PRNGKey) -> tuple[Params, dict[str, Array]]:
        key_init, key_levels, key_problems, key_run = jax.random.split(key, 4)
        params = net.init(key_init, jnp.zeros(8, jnp.float32))
        ref_actor = params["actor"]
        carry = (params, rl.init(params), optimizer.init(params))

        def one_update(carry, u):
            params, rl_state, opt_state = carry
            levels, coeffs, solution = training_problems(
                jax.random.fold_in(key_levels, u), jax.random.fold_in(key_problems, u),
                config, p)
            key_attempts, key_update = jax.random.split(jax.random.fold_in(key_run, u))
            record = jax.vmap(attempts, in_axes=(None, 0, 0, 0))(
                params, jax.random.split(key_attempts, p), coeffs, solution)
            obs = {"features": record["features"], "action_mask": record["action_mask"]}
            if config.kl_beta > 0:
                ref_log_probs = categorical_log_prob(
                    masked_policy(net.actor.apply)(ref_actor, obs), record["actions"])
            else:
                ref_log_probs = record["log_probs"]
            batch = GroupBatch(
                obs=obs,
                actions=record["actions"],
                mask=record["alive"],
                rewards=record["outcome"],
                old_log_probs=record["log_probs"],
                ref_log_probs=ref_log_probs,
                advantages=None if config.advantage == "outcome" else advantages(record),
            )
            returns = jnp.broadcast_to(record["outcome"][..., None], (p, g, t))
            params, rl_state, opt_state, metrics = multi_step_update(
                rl, optimizer, params, rl_state, opt_state, (batch, returns), key_update,
                num_epochs=config.inner_iterations, num_minibatches=config.num_minibatches)
            solved = jnp.mean(record["outcome"], axis=1)  # [P]
            onehot = jax.nn.one_hot(levels, NUM_LEVELS)  # [P, 4]
            count = jnp.sum(onehot, axis=0)
            level_accuracy = jnp.where(count > 0, solved @ onehot / jnp.maximum(count, 1),
                                       jnp.nan)
            alive = record["alive"]
            logs = {
                "accuracy": jnp.mean(record["outcome"]),
                "signal_fraction": metrics["signal_fraction"],
                "process_reward": jnp.sum(record["process_reward"]) / jnp.sum(alive),
                "loss": metrics["loss"],
                "value_loss": metrics["value_loss"],
                "kl": metrics["kl"],
                "entropy": metrics["entropy"],
                "clip_fraction": metrics["clip_fraction"],
                "level_accuracy": level_accuracy,
                "level_count": count,
                "held_out_drawn": jnp.sum(is_held_out(coeffs, split_modulus)),
            }
            return (params, rl_state, opt_state), logs

        (params, _, _), logs = jax.lax.scan(one_update, carry, jnp.arange(config.updates))
        return params, logs

    return train


# ---------------------------------------------------------------------------------------
# Evaluation


def solve_held_out(
    params: Params,
    key: PRNGKey,
    level: int | Array,
    num_problems: int,
    *,
    greedy: bool = True,
    temperature: float = 1.0,
    config: EquationTrainConfig = EquationTrainConfig(),
) -> Array:
    """One attempt at each of ``num_problems`` held-out problems of ``level``.

    Args:
      params: ``{"actor", ...}`` of :func:`make_network` (``config``'s architecture).
      key: PRNG key (the problems and, when sampling, the moves).
      level: difficulty 0..3.
      num_problems: N.
      greedy: argmax moves (else sample at ``temperature``).
      temperature: > 0.
      config: gives the architecture, ``max_steps`` and the held-out split.

    Returns:
      float32 ``[N]``: 1 where the attempt's answer was right.
    """
    env = EquationEnv()
    env_params = EquationParams(level=jnp.int32(0), max_steps=config.max_steps)
    net = make_network(config)
    level = jnp.asarray(level, jnp.int32)
    key_problems, key_moves = jax.random.split(key)

    def one(kp, km):
        coeffs, solution = sample_split_equation(kp, level, config.holdout_modulus,
                                                 config.holdout_modulus > 1)
        logits_fn = lambda f: net.actor.apply(params["actor"], f)  # noqa: E731
        record = run_attempt(km, env, env_params, logits_fn, start_state(coeffs, solution),
                             greedy=greedy, temperature=temperature)
        return record["outcome"]

    return jax.vmap(one)(jax.random.split(key_problems, num_problems),
                         jax.random.split(key_moves, num_problems))


def evaluate_greedy(params: Params, key: PRNGKey, level: int | Array, num_problems: int, *,
                    config: EquationTrainConfig = EquationTrainConfig()) -> Array:
    """Greedy accuracy (mean over ``num_problems`` held-out problems of ``level``)."""
    return jnp.mean(solve_held_out(params, key, level, num_problems, config=config))


def evaluate_sampled(params: Params, key: PRNGKey, level: int | Array, num_problems: int, *,
                     temperature: float = 1.0,
                     config: EquationTrainConfig = EquationTrainConfig()) -> Array:
    """Sampled (pass@1) accuracy at ``temperature`` over held-out problems of ``level``."""
    return jnp.mean(solve_held_out(params, key, level, num_problems, greedy=False,
                                   temperature=temperature, config=config))


# ---------------------------------------------------------------------------------------
# Measurement script


def main(config: EquationTrainConfig = EquationTrainConfig(), seeds: int = 3,
         num_problems: int = 1000) -> dict[str, Any]:
    """Train ``seeds`` seeds (one vmapped program) and print held-out greedy accuracy per
    level before and after training; returns the numbers."""
    train = jax.jit(jax.vmap(make_equation_grpo_train(config)))
    keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(config.seed), i))(
        jnp.arange(seeds))
    start = time.perf_counter()
    params, logs = jax.block_until_ready(train(keys))
    seconds = time.perf_counter() - start
    initial = jax.vmap(lambda k: init_params(config, k))(keys)
    eval_key = jax.random.key(12345)
    evaluate = jax.jit(jax.vmap(
        lambda prm, lv: evaluate_greedy(prm, eval_key, lv, num_problems, config=config),
        in_axes=(0, None)), static_argnums=())
    result = {"train_seconds": seconds, "before": [], "after": []}
    for level in range(NUM_LEVELS):
        before = np.asarray(evaluate(initial, level))
        after = np.asarray(evaluate(params, level))
        result["before"].append(before.tolist())
        result["after"].append(after.tolist())
        print(f"level {level}: greedy accuracy before {before.round(3)} after {after.round(3)}")
    print(f"train: {seeds} seeds x {config.updates} updates in {seconds:.1f} s (incl. compile)")
    print("final attempt accuracy", np.asarray(logs["accuracy"][:, -10:].mean(axis=1)).round(3))
    return result


if __name__ == "__main__":
    main()
