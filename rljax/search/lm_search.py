"""Test-time search for causal language models on the verifiable arithmetic task.

The non-LM helpers of :mod:`rljax.search.best_of_n` and :mod:`rljax.search.beam` search
over environment actions; these search over *text*: a
:class:`~rljax.policies.lm_common.CausalLM` writes completions token by token and
:class:`~rljax.envs.ArithmeticTask`'s reward programs judge them (the outcome verifier
``accuracy``, the form check ``format`` and the exact step verifier ``process``).

* :func:`final_answer_key` -- the text of a completion's last ``;``-separated step, as a
  fixed-width token key (equal keys <=> equal stated final answers).
* :func:`majority_vote_index` -- self-consistency: a representative of the most frequent
  key among the valid completions (Wang et al., 2022, arXiv:2203.11171).
* :func:`sample_and_vote` -- N independent completions per problem; majority vote,
  pass@1 and the best-of-N *oracle* (best-of-N under the exact outcome verifier).
* :func:`prm_beam_search` -- step-level beam search guided by the exact process verifier
  (Lightman et al., 2023, arXiv:2305.20050; beam search over steps as in Snell et al.,
  2024, arXiv:2408.03314); :func:`step_scores` is its scorer of partial completions.

Compute is counted in **samples**: a full completion for :func:`sample_and_vote`, a
one-step continuation for :func:`prm_beam_search` (``W * E`` per round). Budgets are
compared at *equal samples*: ``N = W * E`` completions for voting against ``W * E``
continuations per round for beam search; its ``W * E`` lineages each write about one
full solution over the rounds, so both sample about the same number of tokens. Both also
report ``model_calls``, per-row model evaluations: cached one-token decode steps for
:func:`sample_and_vote`, full forwards over prompt and completion (no KV cache) for
:func:`prm_beam_search`.

Every function is pure and jit/vmap-able; the per-problem batch axis ``B`` is explicit.
"""

from __future__ import annotations

from typing import Any

import chex
import jax
import jax.numpy as jnp
import numpy as np

from rljax.envs.arithmetic import SEMICOLON, ArithmeticTask, Problems
from rljax.policies.sampling import categorical_from_uniform
from rljax.tokenizer import EOS_ID, PAD_ID
from rljax.types import Array, Params, PRNGKey

_DROPPED = -1.0
"""Score of a candidate that must not survive (a finished beam's extra copies): below
every process reward (which lies in [0, 1])."""


def _check_count(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise ValueError(f"{name}: must be an integer >= 1, got {value!r}")


def _check_temperature(temperature: Any) -> Any:
    if isinstance(temperature, np.generic):
        temperature = temperature.item()
    if isinstance(temperature, bool) or (
            isinstance(temperature, int | float) and not temperature >= 0):
        raise ValueError(f"temperature: must be a number >= 0, got {temperature!r}")
    if not isinstance(temperature, int | float) and jnp.ndim(temperature) != 0:
        raise ValueError(f"temperature: must be a scalar, got shape {jnp.shape(temperature)}")
    return temperature


def _repeat_problems(problems: Problems, times: int) -> Problems:
    """Each problem repeated ``times`` times in a row: ``[B, ...] -> [B * times, ...]``."""
    return jax.tree_util.tree_map(lambda x: jnp.repeat(x, times, axis=0), problems)


def final_answer_key(tokens: Array, mask: Array) -> Array:
    """The tokens of each completion's last step, left-aligned and PAD-filled.

    A completion's text is read as :meth:`ArithmeticTask.rewards` reads it: it ends at the
    first EOS or at the first position whose mask is 0, whichever comes first. The key is
    the text after the last ``;`` of that text (the whole text if there is none), up to
    but excluding the end::

        key[n, k] = tokens[n, s_n + k]  if s_n + k < e_n  else PAD
        e_n = min{t : tokens[n, t] = EOS or mask[n, t] = 0}  (T if none)
        s_n = 1 + max{t < e_n : tokens[n, t] = ';'}           (0 if none)

    ``3x=15;x=5<EOS>`` and ``x=5<EOS>`` both give ``x=5``. The task's answer forms have
    no leading zeros (``_INTEGER_RE``), so equal key <=> equal stated value for valid
    completions; whether a completion is valid (e.g. its ``format`` reward) is the
    caller's to decide.

    Args:
      tokens: int ``[N, T]`` completions ``[chars, EOS]`` right-padded.
      mask: ``[N, T]`` (int or bool), 1 on generated tokens.

    Returns:
      int32 ``[N, T]`` keys.
    """
    chex.assert_rank([tokens, mask], 2)
    chex.assert_equal_shape([tokens, mask])
    tokens = jnp.asarray(tokens, jnp.int32)
    width = tokens.shape[1]
    columns = jnp.arange(width)
    stop = (tokens == EOS_ID) | (jnp.asarray(mask) == 0)
    end = jnp.min(jnp.where(stop, columns, width), axis=1)  # [N]
    separator = (tokens == SEMICOLON) & (columns < end[:, None])
    start = 1 + jnp.max(jnp.where(separator, columns, -1), axis=1)  # [N]
    source = start[:, None] + columns  # [N, T]
    gathered = jnp.take_along_axis(tokens, jnp.minimum(source, width - 1), axis=1)
    return jnp.where(source < end[:, None], gathered, PAD_ID).astype(jnp.int32)


def majority_vote_index(keys: Array, valid: Array) -> Array:
    """Self-consistency: the index of a representative of the most frequent valid key.

    ``votes_i = sum_j 1[valid_j and key_j = key_i]``; the result is
    ``argmax_i (votes_i if valid_i else -1)`` (the first maximiser). So among keys with
    the most votes the one whose first valid occurrence comes first wins, and the index
    returned is that first valid occurrence; with nothing valid it is 0. Pairwise
    comparison, ``O(N^2 T)`` (fine for N <= 64). Wang et al. (2022), "Self-Consistency
    Improves Chain of Thought Reasoning in Language Models", arXiv:2203.11171.

    Args:
      keys: int ``[N, T]`` answer keys (e.g. :func:`final_answer_key`).
      valid: ``[N]`` (bool or 0/1), which completions may vote.

    Returns:
      int32 ``[]`` index into ``N``.
    """
    chex.assert_rank([keys, valid], [2, 1])
    chex.assert_equal_shape_prefix([keys, valid], 1)
    valid = jnp.asarray(valid).astype(bool)
    same = jnp.all(keys[:, None, :] == keys[None, :, :], axis=-1)  # [N, N]
    votes = jnp.sum(same & valid[None, :], axis=1).astype(jnp.int32)
    return jnp.argmax(jnp.where(valid, votes, -1)).astype(jnp.int32)


def sample_and_vote(policy: Any, params: Params, task: ArithmeticTask, problems: Problems,
                    key: PRNGKey, *, num_samples: int, max_new_tokens: int,
                    temperature: float = 1.0) -> dict[str, Array]:
    """N independent completions per problem, judged three ways.

    The ``B`` prompts are repeated ``N`` times (problem ``b``'s samples are rows
    ``b N .. b N + N - 1``) and sampled in one ``policy.generate`` call, then scored by
    ``task.rewards``. With ``c_bn`` the accuracy of sample ``n`` of problem ``b``:

    * ``majority``: ``c_{b, i*}`` with ``i* = majority_vote_index(final_answer_key,
      format == 1)`` -- self-consistency over the well-formed samples (Wang et al., 2022,
      arXiv:2203.11171); 0 when no sample is well formed.
    * ``pass_at_1``: ``mean_n c_bn``, the expected accuracy of one sample.
    * ``best_of_n_oracle``: ``max_n c_bn``. Best-of-N with the *exact outcome verifier*
      as the judge is an **oracle** (it reads the reference answer; pass@N), an upper
      bound for any verifier-based selection, not a method deployable without answers.

    Compute: ``N`` samples (full completions) per problem, from ``T = max_new_tokens``
    decode steps (KV cache, the prefill counted as the first) of ``B N`` rows:
    ``model_calls = N T`` per problem.

    Args:
      policy: a :class:`~rljax.policies.lm_common.CausalLM` (``generate``).
      params: its parameters.
      task: the task whose ``rewards`` judge the completions.
      problems: ``B`` problems (prompts ``[B, P]``).
      key: PRNG key.
      num_samples: N >= 1.
      max_new_tokens: T >= 1 tokens per completion (``P + T <= context_length``).
      temperature: >= 0 (0 is greedy: all N samples equal).

    Returns:
      ``{"majority", "pass_at_1", "best_of_n_oracle"}``: float32 ``[B]``;
      ``"correct"``, ``"format"``: float32 ``[B, N]`` per-sample accuracy / form;
      ``"index"``: int32 ``[B]`` the majority's representative;
      ``"tokens"``, ``"mask"``: int32 ``[B, N, T]`` the samples;
      ``"samples"``: int32 ``[B]``, N (completions sampled per problem);
      ``"model_calls"``: int32 ``[B]``, ``N T``.
    """
    _check_count("num_samples", num_samples)
    temperature = _check_temperature(temperature)
    chex.assert_rank([problems.prompt, problems.prompt_mask], 2)
    b, n = problems.prompt.shape[0], num_samples
    repeated = _repeat_problems(problems, n)
    completion = policy.generate(params, repeated.prompt, repeated.prompt_mask, key,
                                 max_new_tokens=max_new_tokens, temperature=temperature)
    rewards = task.rewards(repeated, completion.tokens, completion.mask)
    correct = rewards.accuracy.reshape(b, n)
    form = rewards.format.reshape(b, n)
    tokens = completion.tokens.astype(jnp.int32)
    keys = final_answer_key(tokens, completion.mask).reshape(b, n, -1)
    index = jax.vmap(majority_vote_index)(keys, form == 1)
    majority = jnp.take_along_axis(correct, index[:, None], axis=1)[:, 0]
    return {
        "majority": majority.astype(jnp.float32),
        "pass_at_1": jnp.mean(correct, axis=1).astype(jnp.float32),
        "best_of_n_oracle": jnp.max(correct, axis=1).astype(jnp.float32),
        "correct": correct.astype(jnp.float32),
        "format": form.astype(jnp.float32),
        "index": index,
        "tokens": tokens.reshape(b, n, -1),
        "mask": completion.mask.astype(jnp.int32).reshape(b, n, -1),
        "samples": jnp.full((b,), n, jnp.int32),
        "model_calls": jnp.full((b,), n * max_new_tokens, jnp.int32),
    }


def step_scores(task: ArithmeticTask, problems: Problems, tokens: Array, length: Array
                ) -> Array:
    """The process verifier's score of partial completions (steps written so far).

    The completion is its first ``length`` tokens; a trailing ``;`` (a finished step) is
    replaced by EOS so the reward program reads the finished steps as a terminated text,
    and the score is its ``process`` reward: the fraction of written steps that are valid
    and keep the solution set (Lightman et al., 2023, arXiv:2305.20050, made exact). A
    completion already ended by EOS keeps its full-text score; one that ends mid-step
    (neither ``;`` nor EOS last) scores 0 (not terminated).

    Args:
      task: the task (its ``rewards``).
      problems: ``N`` problems.
      tokens: int ``[N, T]`` completions, right-padded.
      length: int ``[N]`` tokens written (``0 <= length <= T``).

    Returns:
      float32 ``[N]`` in [0, 1].
    """
    chex.assert_rank([tokens, length], [2, 1])
    chex.assert_equal_shape_prefix([tokens, length], 1)
    columns = jnp.arange(tokens.shape[1])
    mask = (columns < length[:, None]).astype(jnp.int32)
    last = columns == (length[:, None] - 1)
    terminated = jnp.where(last & (tokens == SEMICOLON), EOS_ID, tokens).astype(jnp.int32)
    return task.rewards(problems, terminated, mask).process.astype(jnp.float32)


def _top_by_score(score: Array, key: PRNGKey, count: int) -> Array:
    """The indices of the ``count`` highest scores per row, ties in a random order.

    A uniformly random permutation of each row (``argsort`` of uniforms drawn from
    ``key``), then a stable sort by descending score: equal scores keep the random order.

    Args:
      score: float ``[B, C]``.
      key: PRNG key.
      count: K <= C.

    Returns:
      int32 ``[B, K]``, best first.
    """
    permutation = jnp.argsort(jax.random.uniform(key, score.shape), axis=1)
    by_score = jnp.argsort(-jnp.take_along_axis(score, permutation, axis=1), axis=1,
                           stable=True)
    return jnp.take_along_axis(permutation, by_score, axis=1)[:, :count].astype(jnp.int32)


def prm_beam_search(policy: Any, params: Params, task: ArithmeticTask, problems: Problems,
                    key: PRNGKey, *, beam_width: int, expansions: int, max_new_tokens: int,
                    max_steps: int, temperature: float = 1.0) -> dict[str, Array]:
    """Step-level beam search guided by the task's exact process verifier.

    Per problem ``W = beam_width`` partial completions (beams) are kept. Each round every
    beam that can still write is extended by ``E = expansions`` independently sampled
    continuations of **one step**: tokens are drawn from ``softmax(logits / temperature)``
    (argmax at temperature 0) until the candidate writes ``;`` (end of step), EOS (done)
    or reaches ``T = max_new_tokens`` tokens. Every candidate is then scored by
    :func:`step_scores` (the ``process`` reward of its finished steps; Lightman et al.,
    2023, arXiv:2305.20050) and the ``W`` best of the ``W E`` candidates survive, ties
    broken by a uniformly random order (a key-derived permutation, then a stable sort by
    score), so equal scores are not resolved by index. A finished beam (EOS written, or
    ``T`` tokens) is carried as its own single candidate with its score; its other
    ``E - 1`` slots are dropped. Round 1 starts from ``W`` copies of the empty
    completion: all ``W E`` candidates are sampled independently, so ties among them are
    broken at random rather than keeping ``W`` copies of one. PRM-guided beam search
    over steps as in Snell et al. (2024), "Scaling LLM Test-Time Compute Optimally...",
    arXiv:2408.03314. Rounds are a fixed-count ``lax.fori_loop`` of ``max_steps``; a
    problem whose beams are all finished just carries them.

    Shapes do not grow: each candidate has a buffer ``[P + T]`` (its prompt, left-padded
    as given, then its completion right-padded) and a length; every token iteration runs
    one full forward ``policy.logits`` over the ``[B W E, P + T]`` buffers (no KV cache),
    reads the logits at column ``P - 1 + length`` of each row, and writes the sampled
    token at column ``P + length`` of the rows still writing their step. The token loop
    of a round is a ``lax.while_loop`` that ends once no candidate is writing.

    The answer is the final beam with the highest ``process`` reward on its actual text
    (an unterminated beam scores 0), the lowest index among ties.

    Budget. ``W E`` step-continuations (samples) per round in which the problem had a
    beam that could still write: comparable to ``N = W E`` full completions of
    :func:`sample_and_vote` ("equal samples"; the ``W E`` lineages each write about one
    full solution over the rounds, so the sampled tokens are about equal too).
    ``model_calls`` counts candidate forwards: ``W E`` per token iteration in which any
    of the problem's candidates was still writing (what the problem needs on its own,
    e.g. under vmap; in a batch the loop runs until the slowest problem's candidates
    stop, over all ``B W E`` rows). Each is a full forward over ``P + T`` columns, so it
    costs more than one cached decode step of :func:`sample_and_vote`.

    Args:
      policy: a :class:`~rljax.policies.lm_common.CausalLM`, or any object with its
        ``logits(params, tokens, mask)`` and ``context_length``.
      params: its parameters.
      task: the task whose ``rewards`` score the steps (``process``) and the answer.
      problems: ``B`` problems (prompts ``[B, P]``).
      key: PRNG key.
      beam_width: W >= 1.
      expansions: E >= 1 continuations per beam per round.
      max_new_tokens: T >= 1, the most completion tokens (``P + T <= context_length``).
      max_steps: R >= 1 rounds (steps written at most).
      temperature: >= 0; a Python number, or a scalar array > 0.

    Returns:
      ``"correct"``, ``"process"``: float32 ``[B]`` the chosen beam's ``accuracy`` and
      ``process`` rewards; ``"tokens"``, ``"mask"``: int32 ``[B, T]`` its completion
      (mask 1 on the tokens written); ``"beam_tokens"``, ``"beam_mask"``: int32
      ``[B, W, T]`` and ``"beam_process"``: float32 ``[B, W]``, every final beam;
      ``"rounds"``: int32 ``[B]`` rounds run; ``"samples"``: int32 ``[B]``,
      ``W E * rounds``; ``"model_calls"``: int32 ``[B]`` candidate forwards.
    """
    for name, value in (("beam_width", beam_width), ("expansions", expansions),
                        ("max_new_tokens", max_new_tokens), ("max_steps", max_steps)):
        _check_count(name, value)
    temperature = _check_temperature(temperature)
    prompt, prompt_mask = problems.prompt, problems.prompt_mask
    chex.assert_rank([prompt, prompt_mask], 2)
    chex.assert_equal_shape([prompt, prompt_mask])
    b, p = prompt.shape
    w, e, t = beam_width, expansions, max_new_tokens
    c = w * e
    if p + t > policy.context_length:
        raise ValueError(f"max_new_tokens: prompt length {p} + max_new_tokens {t} exceeds "
                         f"context_length {policy.context_length}")
    greedy = isinstance(temperature, int | float) and temperature == 0
    columns = jnp.arange(p + t)
    completion_columns = jnp.arange(t)
    candidates_problems = _repeat_problems(problems, c)
    beam_problems = _repeat_problems(problems, w)
    prompts = jnp.broadcast_to(prompt.astype(jnp.int32)[:, None], (b, c, p))
    prompt_masks = jnp.broadcast_to(prompt_mask.astype(jnp.int32)[:, None], (b, c, p))
    first_copy = (jnp.arange(c) % e) == 0  # [C]: candidate w E + e is copy e of beam w

    def sample(logits: Array, u: Array) -> Array:
        if greedy:
            return jnp.argmax(logits, axis=-1).astype(jnp.int32)
        return categorical_from_uniform(u, logits / jnp.asarray(temperature, logits.dtype))

    def write_step(buffer, buffer_mask, length, done, writing, u):
        """Extend every ``writing`` candidate by one step; returns the new buffers,
        lengths, done flags and token iterations each problem ran ``[B]``."""

        def cond(state):
            return jnp.any(state[4])

        def body(state):
            buffer, buffer_mask, length, done, writing, iterations, i = state
            logits = policy.logits(params, buffer.reshape(b * c, p + t),
                                   buffer_mask.reshape(b * c, p + t))
            column = (p - 1 + length).reshape(b * c, 1, 1)
            logits = jnp.take_along_axis(logits, column, axis=1)[:, 0].reshape(b, c, -1)
            token = sample(logits, jax.lax.dynamic_index_in_dim(u, i, keepdims=False))
            here = (columns == (p + length)[..., None]) & writing[..., None]
            buffer = jnp.where(here, token[..., None], buffer)
            buffer_mask = jnp.where(here, 1, buffer_mask)
            iterations = iterations + jnp.any(writing, axis=1).astype(jnp.int32)
            length = length + writing.astype(jnp.int32)
            done = done | (writing & (token == EOS_ID))
            writing = writing & (token != EOS_ID) & (token != SEMICOLON) & (length < t)
            return buffer, buffer_mask, length, done, writing, iterations, jnp.minimum(
                i + 1, t - 1)

        state = (buffer, buffer_mask, length, done, writing, jnp.zeros((b,), jnp.int32),
                 jnp.int32(0))
        buffer, buffer_mask, length, done, _, iterations, _ = jax.lax.while_loop(
            cond, body, state)
        return buffer, buffer_mask, length, done, iterations

    def one_round(r, carry):
        tokens, length, done, rounds, calls = carry  # [B, W, T], [B, W], [B, W], [B], [B]
        round_key = jax.random.fold_in(key, r)
        token_key, order_key = jax.random.split(round_key)
        finished = done | (length >= t)  # [B, W]
        live = jnp.any(~finished, axis=1)  # [B]: the problem samples this round
        expand = lambda x: jnp.repeat(x, e, axis=1)  # noqa: E731  [B, W, ...] -> [B, C, ...]
        cand_tokens, cand_length, cand_done = expand(tokens), expand(length), expand(done)
        cand_finished = expand(finished)
        kept = ~cand_finished | first_copy  # a finished beam keeps one copy
        buffer = jnp.concatenate([prompts, cand_tokens], axis=2)
        buffer_mask = jnp.concatenate(
            [prompt_masks, (completion_columns < cand_length[..., None]).astype(jnp.int32)],
            axis=2)
        u = jax.random.uniform(token_key, (t, b, c))
        buffer, _, cand_length, cand_done, iterations = write_step(
            buffer, buffer_mask, cand_length, cand_done, ~cand_finished, u)
        cand_tokens = buffer[:, :, p:]
        score = step_scores(task, candidates_problems, cand_tokens.reshape(b * c, t),
                            cand_length.reshape(b * c)).reshape(b, c)
        score = jnp.where(kept, score, _DROPPED)
        chosen = _top_by_score(score, order_key, w)  # [B, W]
        pick = lambda x: jnp.take_along_axis(  # noqa: E731
            x, chosen.reshape(b, w, *(1,) * (x.ndim - 2)), axis=1)
        keep_old = ~live.reshape(b, 1, 1)
        tokens = jnp.where(keep_old, tokens, pick(cand_tokens))
        length = jnp.where(keep_old[..., 0], length, pick(cand_length))
        done = jnp.where(keep_old[..., 0], done, pick(cand_done))
        return (tokens, length, done, rounds + live.astype(jnp.int32),
                calls + c * iterations)

    init = (jnp.full((b, w, t), PAD_ID, jnp.int32), jnp.zeros((b, w), jnp.int32),
            jnp.zeros((b, w), bool), jnp.zeros((b,), jnp.int32), jnp.zeros((b,), jnp.int32))
    tokens, length, _, rounds, calls = jax.lax.fori_loop(0, max_steps, one_round, init)
    mask = (completion_columns < length[..., None]).astype(jnp.int32)  # [B, W, T]
    rewards = task.rewards(beam_problems, tokens.reshape(b * w, t), mask.reshape(b * w, t))
    process = rewards.process.reshape(b, w)
    accuracy = rewards.accuracy.reshape(b, w)
    best = jnp.argmax(process, axis=1)  # the first among ties
    take = lambda x: jnp.take_along_axis(  # noqa: E731
        x, best.reshape(b, 1, *(1,) * (x.ndim - 2)), axis=1)[:, 0]
    return {
        "correct": take(accuracy).astype(jnp.float32),
        "process": take(process).astype(jnp.float32),
        "tokens": take(tokens),
        "mask": take(mask),
        "beam_tokens": tokens,
        "beam_mask": mask,
        "beam_process": process.astype(jnp.float32),
        "rounds": rounds,
        "samples": rounds * c,
        "model_calls": calls,
    }


__all__ = ["final_answer_key", "majority_vote_index", "prm_beam_search", "sample_and_vote",
           "step_scores"]
