"""Shared test settings.

* Every test has a timeout (pyproject: [tool.pytest.ini_options]).
* XLA compilation dominates this suite on 2 cores, and several tests compile the same
  program (the same trainer config, a sweep rebuilt for a resume). A per-session
  persistent compilation cache lets identical programs compile once. It is keyed on the
  program, so results are the same as without it. Under pytest-xdist the workers of one
  run share it (``PYTEST_XDIST_TESTRUNUID``), and the subprocesses and notebook kernels
  the tests start are pointed at it too.
* The suite's programs are tiny and compiled once each, so XLA's CPU backend is told to
  skip LLVM's optimisation passes (``--xla_backend_optimization_level=0``, appended to
  ``XLA_FLAGS`` before the backend starts; subprocesses and notebook kernels inherit it):
  measured 40 % less wall time on the slowest tests. Results are the same programs'
  results (tests compare within one setting or with tolerances); studies and benchmarks
  run with XLA's defaults.
"""

import os
import tempfile
from pathlib import Path

import pytest

_FAST_COMPILE = "--xla_backend_optimization_level=0"
if _FAST_COMPILE not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {_FAST_COMPILE}".strip()

import jax  # noqa: E402  (after XLA_FLAGS)

_RUN = os.environ.get("PYTEST_XDIST_TESTRUNUID")
if _RUN:
    _CACHE = str(Path(tempfile.gettempdir()) / f"rljax-test-xla-cache-{_RUN}")
    os.makedirs(_CACHE, exist_ok=True)
else:
    _CACHE = tempfile.mkdtemp(prefix="rljax-test-xla-cache-")
jax.config.update("jax_compilation_cache_dir", _CACHE)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


# Longest first: pytest-xdist hands tests out in collection order, so a slow file collected
# last (notebooks, sweep survival: late in the alphabet) would leave one worker running it
# alone at the end. These files held the slowest tests of a full run (--durations, 2
# workers); they go first, the rest keep their order.
SLOW_FIRST = ("test_notebooks.py", "test_lm_training.py", "test_lm_grpo_study.py",
              "test_sweep_survival.py", "test_bench_lm.py", "test_ppo_traced.py",
              "test_mctx_import_swap.py", "test_ppo.py", "test_bench_scaling.py",
              "test_search_studies.py", "test_interval_coverage.py", "test_ppo_cartpole.py",
              "test_tune.py", "test_gdro_study.py", "test_mcts.py", "test_equation_training.py",
              "test_lm_trainer_variants.py", "test_lm_variants_study.py", "test_evaluation.py",
              "test_brax_adapter.py")


# Tests left out of the default run (and CI) to keep it under 10 minutes on 2 cores, each
# with the fast test that still guards its feature there; `python -m pytest -m slow` runs
# them. Listed here rather than decorated where they stand because most are single cases
# of a parametrised test. A name that no longer matches a collected test is an error.
CI_SLOW = {
    # the LM tutorial's toy run (about 30 s of CPU: the LM trainer's compile); the same
    # path, a TINY config through ChunkedSweep with checkpoints, runs in the default run
    "test_doc_pages.py::test_python_block_runs[python@docs/tutorials/lm_grpo.md:26]":
        "tests/test_lm_training.py's chunked resume and GRPO step tests",
    # PPO through the Brax adapter for 3 updates (18 s): the adapter's step-by-step
    # comparisons with Brax and the trainer's final_obs check of a Brax env stay
    "test_brax_adapter.py::test_ppo_trains_a_brax_env_for_a_few_updates":
        "test_brax_adapter.py::test_ppo_bootstraps_a_brax_envs_truncations and "
        "test_steps_equal_brax_under_jit_and_vmap",
    # extra cases of a parametrised test: the other cases stay
    "test_lm_generation.py::test_padded_batch_equals_each_prompt_alone[decoder-0.0]":
        "the sampled (temperature 1) decoder case",
    "test_gymnax_adapter.py::test_every_registered_env_steps_through_the_adapter"
    "[Freeway-MinAtar]": "the Breakout-MinAtar case",
    "test_gymnax_adapter.py::test_every_registered_env_steps_through_the_adapter"
    "[Asterix-MinAtar]": "the Breakout-MinAtar case",
    "test_gymnax_adapter.py::test_every_registered_env_steps_through_the_adapter"
    "[Seaquest-MinAtar]": "the Breakout-MinAtar case",
    "test_gymnax_adapter.py::test_every_registered_env_steps_through_the_adapter"
    "[SpaceInvaders-MinAtar]": "the Breakout-MinAtar case",
    "test_mcts_equivalence.py::test_muzero_policy_matches_mctx_without_noise"
    "[B1-A16-S48-dNone-g0.95]": "the B8 depth-2 and B64 masked cases; Gumbel's B1 case",
    "test_mcts_equivalence.py::test_muzero_policy_matches_mctx_without_noise"
    "[B8-A16-S40-d3-g-1.0]": "the B64 discount -1 case",
    "test_mcts_equivalence.py::test_gumbel_muzero_policy_matches_mctx_without_noise"
    "[B8-A16-S40-d3-g-1.0]": "the B64 discount -1 case",
    "test_tune.py::test_optimism_coverage_of_the_bootstrap_is_as_recorded[median]":
        "the iqm case",
    "test_tune.py::test_optimism_coverage_of_the_mean_is_as_recorded[skewed-16]":
        "the skewed-8 and symmetric-16 cases",
    "test_log_prob_grads.py::test_check_grads_fwd_and_rev_orders_1_and_2[19]": "case 5",
    "test_evaluation.py::test_matches_episode_loop_cartpole[False]": "the deterministic case"
        " and the Pendulum sampled one",
    "test_stats_vs_rliable.py::test_probability_of_improvement_ci_matches_rliable"
    "[percentile]": "the basic-interval case",
    "test_equation.py::test_split_partitions_the_whole_problem_space_and_samplers_respect_it"
    "[3]": "levels 0-2",
    "test_search_mctx_dropin.py::test_tree_fields_have_mctx_dtypes_and_results_under_jit"
    "[muzero_policy-dict_bfloat16]": "the Gumbel int8 case; the bfloat16 embeddings of "
        "test_mctx_import_swap",
    "test_optax_idiom.py::test_grad_of_loss_is_update_bitwise[grpo]": "the ppo and "
        "reinforce cases",
    "test_bench_sweep.py::test_library_fused_and_numpy_agree[prm]": "the orm case",
    # single tests whose feature another default-run test guards
    "test_ppo_traced.py::test_chunks_with_hparams_are_bitwise_train_with_hparams":
        "test_ppo.py::test_first_nonfinite_update_whole_and_chunked (chunks == whole) and "
        "test_traced_values_are_bitwise_the_constant_config",
    "test_lm_training.py::test_prompt_gdro_curriculum_over_levels":
        "test_curriculum.py::test_sampler_jit_and_vmap_match_per_seed_loop[prompt_gdro]",
    "test_search_mctx_dropin.py::test_leafless_embedding_under_vmap_and_subtree_reuse":
        "test_mctx_import_swap.py (mctx's demos) and test_mcts.py's get_subtree test",
    "test_ppo_env.py::test_discrete_env_writes_files_and_keys":
        "test_catch_is_flattened_and_runs_as_a_grid (the same study on a discrete env)",
    "test_equation_training.py::test_masked_policy_puts_no_mass_on_invalid_actions":
        "test_core_policy.py's sample_masked tests",
    "test_mcts.py::test_rows_are_independent_and_vmap_matches":
        "test_mcts_equivalence.py (batched searches equal mctx's)",
    "test_stochastic_muzero.py::test_matches_mctx_under_jit_without_invalid_actions":
        "test_matches_mctx_under_vmap_over_keys_with_invalid_actions_and_options",
    "test_compare.py::test_atari100k_report": "test_report_on_two_runs",
    # the sac study end to end (6 s): its harness runs in the dqn / pqn study tests, SAC's
    # trainer (chunks, truncations, evaluation) in test_offpolicy_trainers.py
    "test_offpolicy_studies.py::test_sac_study_runs_on_a_box_env":
        "test_dqn_study_writes_its_files_and_its_figures_follow_the_table and "
        "test_offpolicy_trainers.py's SAC tests",
    "test_ppo.py::test_composes_with_optax_and_the_shared_loop":
        "test_optax_idiom.py::test_grad_of_loss_is_update_bitwise[ppo]",
    "test_gymnax_adapter.py::test_ppo_sweep_runs_on_a_gymnax_env":
        "test_ppo_env.py::test_catch_is_flattened_and_runs_as_a_grid",
    "test_fixed_blocks.py::test_one_vs_four_devices_bitwise":
        "test_core_sweep.py::test_one_vs_eight_devices_bitwise",
    "test_ppo_continuous.py::test_gaussian_ppo_on_pendulum_runs_finitely_under_vmap":
        "test_ppo_env.py::test_pendulum_trains_the_gaussian_head_at_its_published_config",
    "test_episode_returns.py::test_final_returns_of_a_ppo_sweep_is_one_value_per_seed":
        "test_contracts.py::test_the_docs_env_template_trains_bootstraps_and_reports_final_"
        "returns (final_returns of a PPO sweep) and the loop-reference tests",
    "test_cli_interrupt.py::test_ctrl_c_during_compile_exits_130_quietly[2.5]":
        "the [1.0] case (also inside the first compile)",
    "test_lm_recipe.py::test_old_log_probs_are_the_samplers_at_temperature_and_top_k[ppo]":
        "the [grpo] case (the shared sampling_logits and completion_log_probs path)",
    # `rljax bench lm-scale` at its quick size (14 s: two step compiles and the sampler);
    # each of its parts has a default-run test of its own
    "test_bench_lm_scale.py::test_quick_run_reports_the_issue_keys":
        "test_lm_lora_training.py (LoRA's state), test_lm_training.py's step-memory test, "
        "test_lm_generation.py's padded == alone, test_lm_sharding.py's 8-device check "
        "(the same run_sharding_figures), test_gpu_figures.py (the bench is registered)",
    # issue 35's tests (sharding, LoRA, text tasks) were offset by these, each guarded
    "test_ppo_env.py::test_first_seed_runs_fresh_seed_ids_bitwise_those_of_a_longer_run":
        "test_config_axis.py::test_first_seed_shifts_seed_ids_without_changing_a_seeds_result",
    "test_lm_generation.py::test_jit_and_vmap_over_seeds":
        "the padded-batch tests (per-row keys, under jit) and test_lm_training.py's chunked "
        "sweep (generate vmapped over seeds)",
    "test_peer_tests.py::test_gymnax_patch_summary_and_exit_status":
        "test_mctx_patch_and_working_folder (the same script's patch, summary and exit "
        "status) and test_result_is_ok_only_with_passes_and_no_failures",
    "test_lm_search.py::test_sample_and_vote_greedy_equals_greedy_accuracy":
        "test_sample_and_vote_matches_a_recomputation_from_strings_under_vmap",
    "test_lm_search.py::test_prm_beam_search_answers_with_the_best_final_beam":
        "test_prm_beam_search_matches_a_slow_reference_beam_loop",
    "test_evaluation.py::test_matches_episode_loop_pendulum_gaussian_and_raw_rewards":
        "test_matches_episode_loop_cartpole[True] (the same loop reference), "
        "test_actions_are_clipped_to_the_box_only_in_the_env_step (a Box env)",
    "test_lm_sharding.py::test_sharded_step_equals_single_device_step_on_8_devices":
        "the in-process rules tests (every leaf covered and divided; parameters + Adam per "
        "device <= 0.2 of replicated for the 8-device layout, by shard shapes; the sharded "
        "step is the data-parallel trainer's); the 8-device figures recorded by `rljax "
        "bench lm-scale` are pinned by test_study_env_figures.py",
    "test_brax_adapter.py::test_action_repeat_equals_brax_episode_wrapper":
        "test_steps_equal_brax_under_jit_and_vmap (the step it repeats)",
    "test_lm_trainer_variants.py::test_checkpoint_starts_every_seed_and_ppo_value_model_runs":
        "test_checkpoint_mismatches_are_one_line_errors (the same loading path), "
        "test_hf_checkpoint.py's round trips (the params read bitwise) and "
        "test_lm_variants_study.py's checkpoint forwarding",
    "test_lm_trainer_variants.py::test_decoder_grpo_steps_under_jit_and_vmap":
        "test_lm_lora_training.py's decoder GRPO step (the decoder sized by policy_config "
        "from the same fields) and test_lm_training.py's chunked sweep (vmapped seeds)",
    "test_mcts_equivalence.py::test_noisy_policies_match_mctx_too":
        "test_stochastic_muzero.py::test_matches_mctx_under_vmap_over_keys_with_invalid_"
        "actions_and_options (Dirichlet noise) and test_mctx_import_swap.py (mctx's demos)",
    "test_gpu_figures.py::test_tiny_run_writes_one_json_and_refuses_to_overwrite":
        "test_every_benchmark_has_both_presets_and_their_constants_exist and "
        "test_apply_preset_refuses_an_unknown_constant",
    "test_lm_training.py::test_step_memory_counts_the_critic":
        "test_lm_grpo_study.py::test_quick_run_writes_every_figure (the study's "
        "memory_ratio, GRPO / PPO step bytes through training_step_memory)",
    "test_lm_generation.py::test_padded_batch_equals_each_prompt_alone[tiny_lm-1.0]":
        "the [decoder-1.0] case (the same CausalLM.generate)",
    "test_lm_lora_training.py::test_ppo_trains_policy_adapters_and_the_value_model":
        "test_grpo_trains_only_the_adapters_on_a_frozen_base (the shared policy_params "
        "merge; PPO's actor-critic reads it the same way)",
}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(SLOW_FIRST)))
    files = {item.path.name for item in items}
    found = set()
    for item in items:
        name = f"{item.path.name}::{item.name}"
        if name in CI_SLOW:
            item.add_marker(pytest.mark.slow)
            found.add(name)
    missing = [name for name in CI_SLOW if name.split("::")[0] in files and name not in found]
    whole_files = not config.getoption("keyword") and not any("::" in a for a in config.args)
    if missing and whole_files:
        raise pytest.UsageError(f"tests/conftest.py CI_SLOW names no collected test: {missing}")
