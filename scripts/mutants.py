"""Mutation check: does the suite fail when a guarantee is removed? (not part of CI)

Each mutant is ``(name, file, old, new, tests)``: the text ``old`` (which must occur
exactly once in ``file``) is replaced by ``new`` in a temporary copy of the repository
(the files ``git ls-files`` lists, tracked or untracked-but-not-ignored), and the tests
that should catch it run there::

    python -m pytest -q -x -p no:cacheprovider TESTS      (cwd and PYTHONPATH = the copy)

Before the tests run, the copy's Python is asked which file it imports for the mutated
module, and that file must be the copy's and contain ``new``; so the editable install of
the checkout cannot silently stand in for the mutant. The same tests are first run on the
unmutated copy (they must pass, else "caught" would mean nothing).

Prints ``mutant -> caught (first failing test) / survived`` and exits 1 if any survived
(or a baseline failed). Usage::

    python scripts/mutants.py                 # all mutants
    python scripts/mutants.py ema_before_use  # some, by name
    python scripts/mutants.py --list
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

REPO = Path(__file__).resolve().parents[1]
CONTRACTS = "tests/test_contracts.py"


class Mutant(NamedTuple):
    """One text substitution and the tests that must catch it."""

    name: str
    file: str
    old: str
    new: str
    tests: tuple[str, ...]


MUTANTS = (
    Mutant("ignore_clip_epsilon_high", "rljax/algorithms/grpo.py",
           "epsilon_high=clip_epsilon_high, dual_clip=dual_clip, mask=train_mask)",
           "epsilon_high=None, dual_clip=dual_clip, mask=train_mask)",
           ("tests/test_grpo_variants.py",)),
    Mutant("kl_k3_is_k1", "rljax/losses.py",
           "    return jnp.expm1(log_rho) - log_rho\n",
           "    return -log_rho\n",
           ("tests/test_grpo_variants.py", "tests/test_losses.py")),
    Mutant("drop_dual_clip", "rljax/losses.py",
           "jnp.where(advantages < 0, jnp.maximum(objective, dual_clip * advantages),",
           "jnp.where(advantages < 0, objective,",
           ("tests/test_grpo_variants.py", "tests/test_losses.py")),
    Mutant("gspo_token_ratio", "rljax/algorithms/grpo.py",
           "        if sequence_ratio:\n",
           "        if False:\n",
           ("tests/test_grpo_variants.py",)),
    Mutant("group_std_ddof_1", "rljax/advantages.py",
           "def group_relative_advantages(rewards: Array, *, epsilon: float = 1e-6, ddof: int = 0)",
           "def group_relative_advantages(rewards: Array, *, epsilon: float = 1e-6, ddof: int = 1)",
           ("tests/test_advantages_group.py", "tests/test_grpo.py")),
    Mutant("gae_no_truncation_bootstrap", "rljax/advantages.py",
           "next_values = jnp.where(trunc > 0, truncation_values, next_values)",
           "next_values = jnp.where(trunc > 0, 0.0, next_values)",
           ("tests/test_gae.py",)),
    Mutant("ppo_no_value_clip", "rljax/algorithms/ppo.py",
           "value_loss(values, batch.returns, batch.old_values, value_clip)",
           "value_loss(values, batch.returns)",
           ("tests/test_ppo.py",)),
    Mutant("mcts_backup_sign", "rljax/search/loop.py",
           "leaf_value = reward + discount * leaf_value",
           "leaf_value = reward - discount * leaf_value",
           ("tests/test_mcts.py", "tests/test_mcts_equivalence.py")),
    Mutant("block_padding_off", "rljax/sweep.py",
           "            out = program[\"compiled\"](*self._round_inputs(pairs, "
           "r * self.round_size))\n",
           "            out = program[\"jitted\"](*jax.tree_util.tree_map(\n"
           "                lambda x, n=setup.seeds_in(r): x[:n],\n"
           "                self._round_inputs(pairs, r * self.round_size)))\n",
           ("tests/test_fixed_blocks.py", "tests/test_config_axis.py")),
    Mutant("grid_pairs_take_config_zero", "rljax/sweep.py",
           "        config = np.minimum(p // self.num_seeds, self.num_configs - 1)\n",
           "        config = np.zeros_like(p)\n",
           ("tests/test_config_axis.py",)),
    Mutant("tune_evaluates_on_tuning_seeds", "rljax/tune.py",
           "_call(run_configs, np.array([best]), split.evaluation_first,",
           "_call(run_configs, np.array([best]), split.tuning_first,",
           ("tests/test_tune.py",)),
    Mutant("ema_baseline_updated_before_use", "rljax/advantages.py",
           "return jnp.broadcast_to(b, episode_rewards.shape), {\"value\": new_value}",
           "return jnp.broadcast_to(new_value, episode_rewards.shape), {\"value\": new_value}",
           ("tests/test_core_reinforce.py", "tests/test_curriculum.py")),
    Mutant("tensorboard_flag_ignored", "rljax/cli.py",
           "    if args.tensorboard is not None and not supports_tensorboard(module):\n",
           "    if False:\n",
           ("tests/test_tensorboard.py",)),
    Mutant("ci_drops_pytest_status", ".ci/run",
           'if [ "$status" -ne 0 ]; then', 'if false; then',
           ("tests/test_doc_pages.py::test_ci_run_is_the_readme_command_and_propagates_pytest_status",)),
    Mutant("ci_ignores_import_skips", ".ci/run",
           "grep -qiE 'could not import|no module named'", "grep -qiE 'never matches this'",
           ("tests/test_doc_pages.py::test_ci_run_fails_on_a_skip_for_a_missing_module",)),
    Mutant("log_prob_jvp_sign", "rljax/policies/sampling.py",
           "score = one_hot - jnp.exp(log_probs)",
           "score = jnp.exp(log_probs) - one_hot",
           ("tests/test_log_prob_grads.py",)),
    # ---- boundary contracts (rljax.contracts): each check removed must fail a test
    Mutant("contract_head_vs_action_space", "rljax/contracts.py",
           "        if n is not None and actions != int(n):\n",
           "        if False:\n",
           (CONTRACTS,)),
    Mutant("contract_gaussian_vs_box", "rljax/contracts.py",
           "        if (int(jnp.shape(mean)[-1]),) != tuple(shape) or jnp.shape(log_std) != "
           "jnp.shape(mean):\n",
           "        if False:\n",
           (CONTRACTS,)),
    Mutant("contract_gaussian_vs_actions", "rljax/contracts.py",
           "    if actions_shape is not None and tuple(jnp.shape(mean)) != tuple(actions_shape):\n",
           "    if False:\n",
           (CONTRACTS,)),
    Mutant("contract_apply_returns_a_pair", "rljax/contracts.py",
           "    if not (isinstance(out, tuple | list) and len(out) == 2):\n"
           "        raise ContractError(f\"{apply_name} (actor-critic)",
           "    if False:\n"
           "        raise ContractError(f\"{apply_name} (actor-critic)",
           (CONTRACTS,)),
    Mutant("contract_recurrent_head_unchecked", "rljax/training/recurrent_ppo.py",
           "    _check_recurrent_head(net, reset_envs, env_params, num_envs, env_name, "
           "action_space)\n",
           "    pass\n",
           (CONTRACTS,)),
    Mutant("contract_value_shape", "rljax/contracts.py",
           "    if not _is_array(value) or tuple(jnp.shape(value)) != tuple(batch_shape):\n",
           "    if False:\n",
           (CONTRACTS,)),
    Mutant("contract_reset_vs_step_obs", "rljax/contracts.py",
           "        if per_env(r) != per_env(s):\n",
           "        if False:\n",
           (CONTRACTS,)),
    Mutant("contract_reward_scalar", "rljax/contracts.py",
           "        if per_env(value) != []:\n",
           "        if False:\n",
           (CONTRACTS,)),
    Mutant("contract_reward_floating", "rljax/contracts.py",
           "        if kind == \"float\" and not jnp.issubdtype(dtype, jnp.floating):\n",
           "        if False:\n",
           (CONTRACTS,)),
    Mutant("contract_done_bool", "rljax/contracts.py",
           "        if kind == \"bool\" and dtype != jnp.bool_:\n",
           "        if False:\n",
           (CONTRACTS,)),
    Mutant("contract_custom_output_shape", "rljax/contracts.py",
           "    if not _is_array(out) or tuple(jnp.shape(out)) != tuple(expected):\n",
           "    if False:\n",
           (CONTRACTS,)),
    Mutant("contract_advantage_checked_against_itself", "rljax/algorithms/grpo.py",
           "check_output_shape(\"advantage=\", advantage, out, rewards.shape,",
           "check_output_shape(\"advantage=\", advantage, out, out.shape,",
           (CONTRACTS,)),
    Mutant("contract_logits_rank", "rljax/contracts.py",
           "    if (not _is_array(logits) or jnp.ndim(logits) != len(batch) + 1\n"
           "            or list(jnp.shape(logits)[:-1]) != batch):\n",
           "    if False:\n",
           (CONTRACTS,)),
    Mutant("contract_lm_vocabulary", "rljax/training/lm.py",
           "        if size != vocab_size:\n",
           "        if False:\n",
           (CONTRACTS,)),
    Mutant("contract_sweep_outputs", "rljax/contracts.py",
           "        if not (_is_array(leaf) or isinstance(leaf, int | float | bool | complex | "
           "np.generic)):\n",
           "        if False:\n",
           (CONTRACTS,)),
    Mutant("base_step_drops_final_obs", "rljax/envs/base.py",
           "        if \"final_obs\" not in info:",
           "        if False:",
           (CONTRACTS,)),
    Mutant("no_bootstrap_warning", "rljax/training/ppo.py",
           "        warn_no_final_obs(env_name)\n",
           "        pass\n",
           (CONTRACTS, "tests/test_ppo_train_options.py")),
    # issue 32: declared once, options as arguments
    Mutant("study_drops_sweep_options", "rljax/study.py",
           "        summary = call_study(module, config, work_out, grid, options)\n",
           "        summary = call_study(module, config, work_out, grid, SweepOptions())\n",
           ("tests/test_study.py",)),
    Mutant("none_traced_value_stays_traced", "rljax/grid.py",
           "        return tuple(f for f in traced if getattr(config, f) is None)\n",
           "        return ()\n",
           ("tests/test_grid_cli.py",)),
    Mutant("ppo_transform_reads_one_field", "rljax/training/ppo_config.py",
           "if f.name in PPO_ARGUMENTS}",
           "if f.name == \"clip_epsilon\"}",
           ("tests/test_ppo_traced.py",)),
    Mutant("check_fields_ignores_bounds", "rljax/config.py",
           "                require_int(f.name, value, low, high)\n",
           "                require_int(f.name, value)\n",
           ("tests/test_config_declarations.py",)),
    Mutant("study_config_copy_check_blind", "tests/test_structure.py",
           "                if isinstance(k.value, ast.Attribute) and k.value.attr == k.arg\n",
           "                if False\n",
           ("tests/test_structure.py::test_the_copy_check_can_fail",)),
    Mutant("lm_loss_scores_temperature_one", "rljax/training/lm.py",
           "            cfg.temperature, cfg.top_k or None)\n\n    def grpo_transform",
           "            1.0, None)\n\n    def grpo_transform",
           ("tests/test_lm_recipe.py::"
            "test_old_log_probs_are_the_samplers_at_temperature_and_top_k",)),
    Mutant("lm_old_log_probs_untempered", "rljax/training/lm.py",
           "        return sampling_logits(logits, self.config.temperature, "
           "self.config.top_k or None)\n",
           "        return logits\n",
           ("tests/test_lm_recipe.py::test_old_log_probs_are_the_samplers_at_temperature_and_top_k",)),
    Mutant("lm_sampler_ignores_top_k_in_scoring", "rljax/policies/lm_common.py",
           "        logits = sampling_logits(logits, temperature, top_k)\n        log_probs",
           "        logits = sampling_logits(logits, temperature, None)\n        log_probs",
           ("tests/test_lm_recipe.py::test_old_log_probs_are_the_samplers_at_temperature_and_top_k",)),
    Mutant("lm_warmup_off", "rljax/training/lm.py",
           "    return lambda count: learning_rate * jnp.minimum(1.0, (count + 1) / updates)",
           "    return lambda count: learning_rate + 0 * count",
           ("tests/test_lm_recipe.py::test_rl_learning_rate_warmup_closed_form_and_in_the_optimizer",)),
    Mutant("lm_refill_takes_first_groups", "rljax/training/lm.py",
           "        chosen = jnp.argsort(~signal, stable=True)[:p]",
           "        chosen = jnp.arange(p)",
           ("tests/test_lm_recipe.py::test_refill_keeps_the_first_groups_with_signal_in_draw_order",)),
    Mutant("warm_start_lookup_ignores_key", "rljax/training/lm_warm_start.py",
           "        row, found = jnp.argmax(match), jnp.any(match)\n",
           "        row, found = 0, True\n",
           ("tests/test_lm_recipe.py::"
            "test_cached_warm_start_is_shared_bitwise_and_keyed_by_config",)),
    Mutant("lm_bank_ignored", "rljax/training/lm.py",
           "        if isinstance(bank, tuple):\n",
           "        if True:\n",
           ("tests/test_lm_recipe.py::test_label_bank_supervised_draws_come_only_from_the_seed_bank",)),
    # issue 36: value-based transforms
    Mutant("dqn_no_double_q", "rljax/algorithms/dqn.py",
           "            selector_q = q_apply(params, batch.next_obs)\n",
           "            selector_q = next_q_target\n",
           ("tests/test_dqn.py",)),
    Mutant("dqn_no_target_update", "rljax/algorithms/dqn.py",
           "            lambda t, p: jnp.where(due, (1.0 - tau) * t + tau * "
           "jax.lax.stop_gradient(p), t),\n",
           "            lambda t, p: t,\n",
           ("tests/test_dqn.py",)),
    Mutant("pqn_lambda_zero", "rljax/algorithms/pqn.py",
           "gamma=gamma, lam=lam, truncated=truncated,",
           "gamma=gamma, lam=0.0, truncated=truncated,",
           ("tests/test_pqn.py",)),
    Mutant("lora_merge_without_scale", "rljax/policies/lora.py",
           '                update = config.scale * (ab["a"] @ ab["b"])\n',
           '                update = ab["a"] @ ab["b"]\n',
           ("tests/test_lora.py", "tests/test_lm_lora_training.py")),
    Mutant("lm_sampling_ignores_task_eos", "rljax/training/lm.py",
           "            top_k=cfg.top_k or None, stop_ids=(eos,), pad_id=pad)\n",
           "            top_k=cfg.top_k or None)\n",
           ("tests/test_text_tasks.py",)),
    Mutant("fsdp_replicates_everything", "rljax/training/lm_sharding.py",
           "        if size > 1 and dims:\n",
           "        if False:\n",
           ("tests/test_lm_sharding.py",)),
    # SAC (issue 36): the squashed density, the clipped double-Q target, the Polyak target
    # and where each loss's gradient may flow
    Mutant("sac_no_log_det_correction", "rljax/policies/distributions.py",
           "jacobian = jnp.sum(log_one_minus_tanh_squared(action) + jnp.log(scale), axis=-1)",
           "jacobian = jnp.sum(0.0 * action + jnp.log(scale), axis=-1)",
           ("tests/test_sac.py", "tests/test_distributions.py")),
    Mutant("sac_no_double_q", "rljax/algorithms/sac.py",
           "soft_value = jnp.min(next_q, axis=0) - alpha * next_log_pi",
           "soft_value = next_q[0] - alpha * next_log_pi",
           ("tests/test_sac.py",)),
    Mutant("sac_no_target_update", "rljax/algorithms/sac.py",
           "target_critic = polyak_update(state.target_critic, critic_now, tau)",
           "target_critic = state.target_critic",
           ("tests/test_sac.py",)),
    Mutant("sac_terminal_bootstrapped", "rljax/algorithms/sac.py",
           "not_terminal = 1.0 - batch.terminated.astype(rewards.dtype)",
           "not_terminal = jnp.ones_like(rewards)",
           ("tests/test_sac.py",)),
    Mutant("sac_critic_target_not_stopped", "rljax/algorithms/sac.py",
           "target = jax.lax.stop_gradient(rewards + discount * not_terminal * soft_value)",
           "target = rewards + discount * not_terminal * soft_value",
           ("tests/test_sac.py",)),
    Mutant("sac_actor_loss_moves_critics", "rljax/algorithms/sac.py",
           "q_pi = critics(critic_now, batch.obs, head.env_action(u))",
           'q_pi = critics(params["critic"], batch.obs, head.env_action(u))',
           ("tests/test_sac.py",)),
    Mutant("sac_actor_loss_moves_alpha", "rljax/algorithms/sac.py",
           "alpha = jax.lax.stop_gradient(jnp.exp(log_alpha))",
           "alpha = jnp.exp(log_alpha)",
           ("tests/test_sac.py",)),
    Mutant("sac_temperature_log_pi_not_stopped", "rljax/algorithms/sac.py",
           "-log_alpha * (jax.lax.stop_gradient(log_pi) + entropy_target)",
           "-log_alpha * (log_pi + entropy_target)",
           ("tests/test_sac.py",)),
    # issue 36: the off-policy trainers
    Mutant("offpolicy_truncation_not_bootstrapped", "rljax/training/offpolicy.py",
           'bootstrap_obs = jnp.where(cut, info["final_obs"], next_obs)',
           "bootstrap_obs = next_obs",
           ("tests/test_offpolicy_trainers.py",)),
    Mutant("pqn_trainer_truncations_dropped", "rljax/training/pqn.py",
           "truncated = jnp.logical_and(done, jnp.logical_not(terminated)) if bootstrap else None",
           "truncated = None",
           ("tests/test_offpolicy_trainers.py",)),
    Mutant("dqn_trainer_learns_before_learning_starts", "rljax/training/dqn.py",
           "learning = steps_done >= config.learning_starts",
           "learning = steps_done >= 0",
           ("tests/test_offpolicy_trainers.py",)),
    Mutant("pqn_targets_ignore_given_max_q", "rljax/algorithms/pqn.py",
           "    if max_q is None:\n",
           "    if True:\n",
           ("tests/test_pqn.py",)),
    Mutant("pqn_trainer_targets_not_from_acting_q", "rljax/training/pqn.py",
           "                      jnp.max(q, axis=-1))",
           "                      jnp.mean(q, axis=-1))",
           ("tests/test_offpolicy_trainers.py",)),
    Mutant("chunked_sweep_copies_its_state", "rljax/sweep.py",
           "jax.jit(advance_block, donate_argnums=0, **shard)",
           "jax.jit(advance_block, **shard)",
           ("tests/test_core_sweep.py",)),
    Mutant("offpolicy_compare_tunes_on_fresh_seeds", "experiments/offpolicy_compare.py",
           "base = config.method_config(method, config.tune_seeds, 0)",
           "base = config.method_config(method, config.tune_seeds, config.first_seed)",
           ("tests/test_offpolicy_studies.py::test_compare_tunes_on_tuning_seeds_and_reports_fresh_ones",)),
)


def _module_of(file: str) -> str | None:
    if not file.endswith(".py") or not (file.startswith("rljax/")
                                        or file.startswith("experiments/")):
        return None
    mod = file[:-3].replace("/", ".")
    return mod[: -len(".__init__")] if mod.endswith(".__init__") else mod


def copy_repo(dest: Path) -> None:
    """Copy the files git knows of (tracked, and untracked but not ignored) into ``dest``."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO, check=True, capture_output=True).stdout.decode().split("\0")
    for rel in filter(None, listed):
        src = REPO / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)


def _env(copy: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(copy), *filter(None, [env.get("PYTHONPATH")])])
    env.pop("PYTEST_XDIST_TESTRUNUID", None)
    return env


def check_import(copy: Path, mutant: Mutant) -> None:
    """The copy's Python imports the mutated module from the copy, with the mutant in it."""
    mod = _module_of(mutant.file)
    if mod is None:
        return
    code = f"import importlib; print(importlib.import_module({mod!r}).__file__)"
    out = subprocess.run([sys.executable, "-c", code], cwd=copy, env=_env(copy),
                         capture_output=True, text=True, check=True).stdout.strip()
    path = Path(out).resolve()
    if not path.is_relative_to(copy.resolve()):
        raise RuntimeError(f"{mutant.name}: imports {path}, not the copy's {mutant.file}")
    if mutant.new not in path.read_text():
        raise RuntimeError(f"{mutant.name}: the imported {path} lacks the mutant")


def run_tests(copy: Path, tests: tuple[str, ...], timeout: float) -> tuple[int, str]:
    """``(returncode, first failing test or '')`` of pytest on ``tests`` in the copy."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-rfE",
           *tests]
    try:
        proc = subprocess.run(cmd, cwd=copy, env=_env(copy), capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return 124, "(timeout)"
    failed = re.findall(r"^(?:FAILED|ERROR) (\S+.*)$", proc.stdout, re.M)
    if proc.returncode != 0 and not failed:
        failed = [f"(pytest exit {proc.returncode}: {proc.stdout.strip().splitlines()[-1:]})"]
    return proc.returncode, failed[0] if failed else ""


def apply(copy: Path, mutant: Mutant) -> str:
    """Write the mutant into the copy; return the original text (to restore)."""
    path = copy / mutant.file
    text = path.read_text()
    count = text.count(mutant.old)
    if count != 1:
        raise RuntimeError(f"{mutant.name}: old text occurs {count} times in {mutant.file}, "
                           "expected exactly once")
    path.write_text(text.replace(mutant.old, mutant.new))
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="mutants to run (default: all)")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    parser.add_argument("--no-baseline", action="store_true",
                        help="skip running the tests on the unmutated copy first")
    parser.add_argument("--timeout", type=float, default=900.0,
                        help="seconds per pytest run (default 900)")
    args = parser.parse_args(argv)
    known = {m.name: m for m in MUTANTS}
    if args.list:
        for m in MUTANTS:
            print(f"{m.name:34s} {m.file:28s} {' '.join(m.tests)}")
        return 0
    unknown = [n for n in args.names if n not in known]
    if unknown:
        print(f"mutants: unknown name(s) {', '.join(unknown)}; see --list", file=sys.stderr)
        return 2
    chosen = [known[n] for n in args.names] if args.names else list(MUTANTS)
    rows, bad = [], False
    with tempfile.TemporaryDirectory(prefix="rljax-mutants-") as tmp:
        copy = Path(tmp)
        copy_repo(copy)
        for m in chosen:  # every old text is checked before anything runs
            apply(copy, m)
            (copy / m.file).write_text((REPO / m.file).read_text())
        if not args.no_baseline:
            tests = tuple(dict.fromkeys(t for m in chosen for t in m.tests))
            start = time.perf_counter()
            code, first = run_tests(copy, tests, args.timeout * 2)
            print(f"baseline ({len(tests)} test files, {time.perf_counter() - start:.0f} s): "
                  f"{'pass' if code == 0 else 'FAIL ' + first}", flush=True)
            if code != 0:
                return 1
        for m in chosen:
            original = apply(copy, m)
            try:
                check_import(copy, m)
                start = time.perf_counter()
                code, first = run_tests(copy, m.tests, args.timeout)
                seconds = time.perf_counter() - start
            finally:
                (copy / m.file).write_text(original)
            first = first.split(" - ")[0]
            caught = code != 0
            bad |= not caught
            rows.append((m.name, f"caught  {first}" if caught else "SURVIVED", seconds))
            print(f"{m.name:34s} {rows[-1][1]}  ({seconds:.0f} s)", flush=True)
    print("\n| mutant | result | s |\n|---|---|---|")
    for name, result, seconds in rows:
        print(f"| {name} | {result} | {seconds:.0f} |")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
