"""LM test-time search (rljax.search.lm_search): answer keys and majority voting against
slow Python references; sample-and-vote against a recomputation from strings; the step
verifier's scores of hand-written partial completions; tie-breaking; PRM beam search's
compute counts in closed form (forced policies), against a slow Python beam loop with the
same randomness, and against pass@1 at equal samples on a briefly supervised TinyLM."""

from collections import Counter
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from rljax.envs.arithmetic import (
    SEMICOLON,
    ArithmeticTask,
    Problems,
    completion_text,
    reference_rewards,
    render_problem,
)
from rljax.policies import LMConfig, TinyLM
from rljax.search.lm_search import (
    _top_by_score,
    final_answer_key,
    majority_vote_index,
    prm_beam_search,
    sample_and_vote,
    step_scores,
)
from rljax.tokenizer import EOS_ID, PAD_ID, CharTokenizer

TOKENIZER = CharTokenizer()
TASK = ArithmeticTask(levels=(4,), prompt_length=11, solution_length=12)
P, T = 11, 12  # prompt columns, new tokens
LM = TinyLM(LMConfig(context_length=P + T, width=32, num_layers=1, num_heads=2))
W, E, ROUNDS = 2, 2, 3  # beam width, expansions, rounds of the trained-model runs
SFT_STEPS = 400


def encode_rows(texts, width=T):
    """Hand-written completions -> ``(tokens, mask) [N, width]``. A text may end in
    ``|`` (terminated by EOS, then garbage after it) or ``~`` (cut: mask 0 from there)."""
    tokens = np.full((len(texts), width), PAD_ID, np.int32)
    mask = np.zeros((len(texts), width), np.int32)
    for row, text in enumerate(texts):
        if text.endswith("~"):
            ids = list(TOKENIZER.encode(text[:-1]))
            tokens[row, :len(ids)] = ids
            tokens[row, len(ids):] = TOKENIZER.id_of("7")  # unread: mask 0
            mask[row, :len(ids)] = 1
        else:
            ids = list(TOKENIZER.encode(text.rstrip("|"))) + [EOS_ID]
            if text.endswith("|"):
                ids += list(TOKENIZER.encode("9;x"))  # after the EOS: ignored
            tokens[row, :len(ids)] = ids
            mask[row, :len(ids)] = 1
    return tokens, mask


def reference_key(tokens, mask):
    """Slow reference of final_answer_key for one row."""
    read = []
    for token, keep in zip(tokens.tolist(), mask.tolist(), strict=True):
        if not keep or token == EOS_ID:
            break
        read.append(token)
    last = []
    for token in read:
        last = [] if token == SEMICOLON else last + [token]
    return last + [PAD_ID] * (len(tokens) - len(last))


def reference_majority(keys, valid):
    """Slow reference of majority_vote_index: most votes, then earliest first occurrence."""
    counts, first = Counter(), {}
    for index, (key, ok) in enumerate(zip(keys, valid, strict=True)):
        if ok:
            counts[key] += 1
            first.setdefault(key, index)
    if not counts:
        return 0
    return first[max(counts, key=lambda k: (counts[k], -first[k]))]


def equation_problems(operands):
    """Level-4 Problems for ``(a, x, b)`` triples (rendered by the slow reference)."""
    prompts, solutions = zip(*(render_problem(4, o) for o in operands), strict=True)
    prompt, prompt_mask = TOKENIZER.encode_prompts(prompts, P)
    solution, solution_mask = TOKENIZER.encode_completions(solutions, TASK.solution_length)
    n = len(operands)
    return Problems(prompt=jnp.asarray(prompt), prompt_mask=jnp.asarray(prompt_mask),
                    level=jnp.full((n,), 4, jnp.int32),
                    operands=jnp.asarray(operands, jnp.int32),
                    answer=jnp.asarray([o[1] for o in operands], jnp.int32),
                    solution=jnp.asarray(solution), solution_mask=jnp.asarray(solution_mask))


def sft_loss(params, problems):
    log_probs = LM.completion_log_probs(params, problems.prompt, problems.prompt_mask,
                                        problems.solution, problems.solution_mask)
    mask = problems.solution_mask
    return -jnp.sum(log_probs * mask) / jnp.sum(mask)


@jax.jit
def supervised_params(key):
    """SFT_STEPS Adam steps (3e-3, batch 64) of cross-entropy on correct level-4
    solutions: a model that gets about 1 in 5 samples right at temperature 1."""
    init_key, data_key = jax.random.split(key)
    params = LM.init(init_key)
    optimizer = optax.adam(3e-3)

    def step(carry, step_key):
        params, opt_state = carry
        grads = jax.grad(sft_loss)(params, TASK.sample(step_key, 64))
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), None

    (params, _), _ = jax.lax.scan(step, (params, optimizer.init(params)),
                                  jax.random.split(data_key, SFT_STEPS))
    return params


@pytest.fixture(scope="module")
def params():
    return supervised_params(jax.random.key(0))


@pytest.fixture(scope="module")
def problems():
    return jax.jit(lambda k: TASK.sample(k, 64, split="eval"))(jax.random.key(5))


# ------------------------------------------------------------------------- keys, votes


KEY_TEXTS = ["3x=15;x=5", "x=5|", "x=-12", "3x=15;", "", "3x=15;x=~", "x=5~", ";;x=7",
             "12", "-19|", "x=5;x=6"]


def test_final_answer_key_matches_reference_under_jit_and_vmap():
    tokens, mask = encode_rows(KEY_TEXTS)
    expected = np.asarray([reference_key(t, m) for t, m in zip(tokens, mask, strict=True)])
    np.testing.assert_array_equal(jax.jit(final_answer_key)(tokens, mask), expected)
    # vmap over a leading axis: the rows and the rows shifted by one
    stacked_t, stacked_m = np.stack([tokens, np.roll(tokens, 1, 0)]), np.stack(
        [mask, np.roll(mask, 1, 0)])
    keys = jax.jit(jax.vmap(final_answer_key))(stacked_t, stacked_m)
    np.testing.assert_array_equal(keys[0], expected)
    np.testing.assert_array_equal(keys[1], np.roll(expected, 1, 0))
    # the same final answer text gives the same key, whatever came before it
    assert TOKENIZER.decode(expected[0]) == TOKENIZER.decode(expected[1]) == "x=5"
    np.testing.assert_array_equal(expected[0], expected[1])
    assert TOKENIZER.decode(expected[3]) == "" and TOKENIZER.decode(expected[5]) == "x="


def test_majority_vote_index_matches_reference_under_jit_and_vmap():
    rng = np.random.default_rng(0)
    keys = rng.integers(3, 6, size=(300, 8, 2)).astype(np.int32)  # few distinct keys
    valid = rng.random((300, 8)) < 0.6
    got = jax.jit(jax.vmap(majority_vote_index))(keys, valid)
    expected = [reference_majority([tuple(k) for k in ks], v)
                for ks, v in zip(keys, valid, strict=True)]
    np.testing.assert_array_equal(got, expected)
    assert got.dtype == jnp.int32
    # hand cases: an invalid plurality is ignored; a tie goes to the key seen first
    # (index of its first *valid* occurrence); nothing valid gives 0
    a, b, c = [5, 5], [6, 6], [7, 7]
    vote = jax.jit(majority_vote_index)
    assert int(vote(np.array([c, c, c, a, b, a]), np.array([0, 0, 0, 1, 1, 1]))) == 3
    assert int(vote(np.array([a, b, b, a]), np.array([0, 1, 1, 1]))) == 1
    assert int(vote(np.array([a, b, a, b]), np.array([1, 1, 1, 1]))) == 0
    assert int(vote(np.array([b, a, b, a]), np.array([0, 1, 1, 1]))) == 1
    assert int(vote(np.array([a, b]), np.array([0, 0]))) == 0


# ------------------------------------------------------------------ sample and vote


def test_sample_and_vote_greedy_equals_greedy_accuracy(params, problems):
    @jax.jit
    def greedy(params):  # one program: the vote and a plain greedy generate
        out = sample_and_vote(LM, params, TASK, problems, jax.random.key(1), num_samples=3,
                              max_new_tokens=T, temperature=0.0)
        completion = LM.generate(params, problems.prompt, problems.prompt_mask,
                                 jax.random.key(2), max_new_tokens=T, temperature=0.0)
        return out, completion, TASK.rewards(problems, completion.tokens, completion.mask)

    out, completion, rewards = greedy(params)
    accuracy = rewards.accuracy
    assert 0 < float(accuracy.mean()) < 1  # the comparison has both outcomes
    for name in ("pass_at_1", "majority", "best_of_n_oracle"):
        np.testing.assert_array_equal(out[name], accuracy, err_msg=name)
    for n in range(3):
        np.testing.assert_array_equal(out["tokens"][:, n], completion.tokens)


def test_sample_and_vote_matches_a_recomputation_from_strings_under_vmap(params, problems):
    run = jax.jit(jax.vmap(lambda k: sample_and_vote(LM, params, TASK, problems, k,
                                                     num_samples=4, max_new_tokens=T)))
    out = jax.device_get(run(jax.random.split(jax.random.key(3), 2)))
    operands = np.asarray(problems.operands)
    ties_or_invalid = 0
    for s in range(2):
        assert out["correct"][s].shape == (64, 4)
        np.testing.assert_array_equal(out["samples"][s], 4)
        np.testing.assert_array_equal(out["model_calls"][s], 4 * T)
        for b in range(64):
            keys, valid = [], []
            for n in range(4):
                text, terminated = completion_text(out["tokens"][s, b, n],
                                                   out["mask"][s, b, n])
                ref = reference_rewards(4, operands[b], text, terminated, TASK.max_steps)
                assert out["correct"][s, b, n] == ref["accuracy"]
                assert out["format"][s, b, n] == ref["format"]
                keys.append(text.split(";")[-1])
                valid.append(ref["format"] == 1.0)
            index = reference_majority(keys, valid)
            ties_or_invalid += index != 0
            assert out["index"][s, b] == index, (s, b, keys, valid)
            assert out["majority"][s, b] == out["correct"][s, b, index]
        np.testing.assert_allclose(out["pass_at_1"][s], out["correct"][s].mean(1))
        np.testing.assert_array_equal(out["best_of_n_oracle"][s], out["correct"][s].max(1))
    assert ties_or_invalid > 10  # the vote is not trivially the first sample
    assert (out["majority"] != out["pass_at_1"]).any()


# --------------------------------------------------------------------- step scores


def test_step_scores_of_hand_written_partial_completions():
    texts = [("3x=15;", 1.0), ("3x=16;", 0.0), ("3x=15;x=5", 1.0), ("3x=15;x=5;", 1.0),
             ("3x=15;x=6;", 0.5), ("3x=15;x=", 0.0), ("", 0.0), ("x=5;", 1.0),
             ("15=3x;", 1.0), ("3x=15;;", 0.5)]
    rows = np.full((len(texts), T), PAD_ID, np.int32)
    lengths = np.zeros(len(texts), np.int32)
    for row, (text, _) in enumerate(texts):
        ids = TOKENIZER.encode(text)
        if text == "3x=15;x=5":  # a finished completion: ended by EOS
            ids = np.append(ids, EOS_ID)
        rows[row, :len(ids)] = ids
        lengths[row] = len(ids)
    problems = equation_problems([(3, 5, 4)] * len(texts))
    assert TOKENIZER.decode(problems.prompt[0]) == "3x+4=19;"
    expected = np.asarray([score for _, score in texts], np.float32)
    score = jax.jit(lambda p, t, n: step_scores(TASK, p, t, n))
    np.testing.assert_allclose(score(problems, rows, lengths), expected)
    batched = jax.tree_util.tree_map(lambda x: jnp.stack([x, x]), problems)
    np.testing.assert_allclose(
        jax.jit(jax.vmap(lambda p, t, n: step_scores(TASK, p, t, n)))(
            batched, np.stack([rows, rows]), np.stack([lengths, lengths])),
        np.stack([expected, expected]))


def test_top_by_score_takes_the_best_and_breaks_ties_at_random():
    score = jnp.asarray([[0.5, 1.0, 0.0, 0.75, 1.0, 0.25]])
    chosen = jax.jit(jax.vmap(lambda k: _top_by_score(score, k, 3)))(
        jax.random.split(jax.random.key(0), 400))  # [400, 1, 3]
    best_two = np.sort(np.asarray(chosen[:, 0, :2]), axis=1)
    np.testing.assert_array_equal(best_two, np.broadcast_to([1, 4], best_two.shape))
    np.testing.assert_array_equal(chosen[:, 0, 2], 3)
    first = np.asarray(chosen[:, 0, 0])
    assert 150 < (first == 1).sum() < 250  # the tie 1 vs 4 goes either way
    ties = jax.jit(jax.vmap(lambda k: _top_by_score(jnp.zeros((1, 8)), k, 2)))(
        jax.random.split(jax.random.key(1), 400))
    counts = np.bincount(np.asarray(ties).reshape(-1), minlength=8)
    assert counts.min() > 60 and counts.max() < 140  # about 100 each: not by index


# -------------------------------------------------------------------- beam search


def forced(params, token):
    """The head biased so the model writes ``token`` with probability ~1."""
    params = jax.tree_util.tree_map(np.array, params)
    params["params"]["head"]["bias"][..., token] += 60.0
    return params


def test_prm_beam_search_compute_counts_in_closed_form():
    w, e, rounds = 2, 3, 4
    c = w * e
    problems = equation_problems([(3, 5, 4), (1, -2, 7), (9, -9, -9), (2, 0, 1)])
    base = jax.device_get(jax.jit(LM.init)(jax.random.key(0)))
    digit = TOKENIZER.id_of("7")
    stacked = jax.tree_util.tree_map(lambda *x: jnp.stack(x), forced(base, EOS_ID),
                                     forced(base, SEMICOLON), forced(base, digit),
                                     jax.tree_util.tree_map(lambda x: x * 3.0, base))
    run = jax.jit(jax.vmap(lambda p: prm_beam_search(
        LM, p, TASK, problems, jax.random.key(1), beam_width=w, expansions=e,
        max_new_tokens=T, max_steps=rounds)))
    out = jax.device_get(run(stacked))
    ones = np.ones(4, np.int32)
    # EOS at once: one round of one token, every beam done
    np.testing.assert_array_equal(out["rounds"][0], ones)
    np.testing.assert_array_equal(out["samples"][0], c * ones)
    np.testing.assert_array_equal(out["model_calls"][0], c * ones)
    np.testing.assert_array_equal(out["tokens"][0][:, 0], EOS_ID)
    np.testing.assert_array_equal(out["mask"][0].sum(1), ones)
    # ';' at once: every round writes one one-token step, all rounds run
    np.testing.assert_array_equal(out["rounds"][1], rounds * ones)
    np.testing.assert_array_equal(out["samples"][1], c * rounds * ones)
    np.testing.assert_array_equal(out["model_calls"][1], c * rounds * ones)
    np.testing.assert_array_equal(out["tokens"][1][:, :rounds], SEMICOLON)
    np.testing.assert_array_equal(out["mask"][1].sum(1), rounds * ones)
    # never a step end: round 1 writes all T tokens, then every beam is finished
    np.testing.assert_array_equal(out["rounds"][2], ones)
    np.testing.assert_array_equal(out["samples"][2], c * ones)
    np.testing.assert_array_equal(out["model_calls"][2], c * T * ones)
    np.testing.assert_array_equal(out["tokens"][2], digit)
    for s in range(3):
        np.testing.assert_array_equal(out["correct"][s], 0.0)
    # an untrained (sharpened) model: the beams of a problem are not copies of one
    beams = out["beam_tokens"][3]  # [4, W, T]
    assert all((beams[b, 0] != beams[b, 1]).any() for b in range(4))
    assert (out["samples"][3] == c * out["rounds"][3]).all()


@dataclass(frozen=True)
class ScriptedPolicy:
    """A policy that writes one of K fixed completions: at each column the next-token
    distribution is the weights of the scripts consistent with the completion so far
    (``params = (scripts int32 [K, T], weights float32 [K])``); the two members of the
    CausalLM interface that prm_beam_search uses."""

    context_length: int = P + T

    def logits(self, params, tokens, mask):
        del mask
        scripts, weights = params
        n, k = tokens.shape[0], scripts.shape[0]
        match = tokens[:, None, P:] == scripts[None]  # [N, K, T]
        prefix = jnp.concatenate([jnp.ones((n, k, 1), bool),
                                  jnp.cumprod(match, axis=2).astype(bool)[..., :-1]], axis=2)
        mass = jnp.einsum("nkt,k,ktv->ntv", prefix.astype(jnp.float32), weights,
                          jax.nn.one_hot(scripts, TOKENIZER.vocab_size))
        logits = jnp.where(mass > 0, jnp.log(jnp.maximum(mass, 1e-30)), -1e30)
        return jnp.zeros((n, P + T, TOKENIZER.vocab_size)).at[:, P - 1:P + T - 1].set(logits)


def scripts(*texts_and_weights):
    texts, weights = zip(*texts_and_weights, strict=True)
    tokens, _ = TOKENIZER.encode_completions(texts, T)
    return jnp.asarray(tokens), jnp.asarray(weights, jnp.float32)


def test_prm_beam_search_answers_with_the_best_final_beam():
    problems = equation_problems([(3, 5, 4)])
    policy = ScriptedPolicy()
    # after one round the beams are "3x=15;" (step score 1, unterminated: final process
    # 0) and "x=5<EOS>" (1 and 1), in a random order
    both = scripts(("3x=15;x=5", 0.5), ("x=5", 0.5))
    out = jax.device_get(jax.jit(jax.vmap(lambda k: prm_beam_search(
        policy, both, TASK, problems, k, beam_width=2, expansions=2, max_new_tokens=T,
        max_steps=1)))(jax.random.split(jax.random.key(0), 32)))
    process = out["beam_process"][:, 0]  # [keys, W]
    best = np.argmax(process, axis=1)
    np.testing.assert_array_equal(out["process"][:, 0], process.max(1))
    np.testing.assert_array_equal(out["tokens"][:, 0], out["beam_tokens"][:, 0][
        np.arange(32), best])
    assert (best != 0).sum() >= 4  # not vacuous: the best beam is often not the first
    texts = [[TOKENIZER.decode(t) for t in row] for row in out["beam_tokens"][:, 0]]
    has_answer = np.asarray([any(t == "x=5" and m.sum() == 4 for t, m in zip(
        row, mask, strict=True)) for row, mask in zip(texts, out["beam_mask"][:, 0],
                                                      strict=True)])
    np.testing.assert_array_equal(out["correct"][:, 0], has_answer)
    # greedy: the likelier script's first step (wrong), then its right final step
    wrong_first = scripts(("3x=16;x=5", 0.6), ("3x=15;x=5", 0.4))
    greedy = jax.device_get(jax.jit(lambda k: prm_beam_search(
        policy, wrong_first, TASK, problems, k, beam_width=1, expansions=1,
        max_new_tokens=T, max_steps=3, temperature=0.0))(jax.random.key(1)))
    assert TOKENIZER.decode(greedy["tokens"][0]) == "3x=16;x=5"
    assert greedy["mask"][0].sum() == 10  # with its EOS
    assert greedy["correct"][0] == 1.0 and greedy["process"][0] == 0.5
    assert greedy["rounds"][0] == 2 and greedy["model_calls"][0] == 6 + 4
    # sampled: the exact step verifier finds the right first step (1 in 0.4 of the
    # continuations) among E = 8 (all wrong with probability 0.6^8 < 2 %)
    sampled = jax.device_get(jax.jit(jax.vmap(lambda k: prm_beam_search(
        policy, wrong_first, TASK, problems, k, beam_width=1, expansions=8,
        max_new_tokens=T, max_steps=3)))(jax.random.split(jax.random.key(2), 16)))
    assert sampled["process"].mean() > 0.85 and (sampled["correct"] == 1).all()


def reference_beam_search(params, problems, key, *, beam_width, expansions, max_steps):
    """Slow reference of prm_beam_search at temperature 1: Python loops over rounds,
    token iterations and candidates; the same uniforms (from the documented key use),
    the model's logits over the same [B C, P + T] buffers, the inverse CDF in float64,
    steps scored by the string reference of the rewards."""
    logits_fn = jax.jit(LM.logits)
    prompt, prompt_mask = np.asarray(problems.prompt), np.asarray(problems.prompt_mask)
    operands = np.asarray(problems.operands)
    b, c = prompt.shape[0], beam_width * expansions
    beams = [[([], False)] * beam_width for _ in range(b)]  # (tokens, done)
    rounds, calls = np.zeros(b, int), np.zeros(b, int)

    def process(row, tokens, terminate_step):
        tokens = list(tokens)
        if terminate_step and tokens and tokens[-1] == SEMICOLON:
            tokens[-1] = EOS_ID
        text, terminated = completion_text(tokens, [1] * len(tokens))
        return reference_rewards(4, operands[row], text, terminated, TASK.max_steps)

    for r in range(max_steps):
        token_key, order_key = jax.random.split(jax.random.fold_in(key, r))
        u = np.asarray(jax.random.uniform(token_key, (T, b, c)), np.float64)
        order_u = np.asarray(jax.random.uniform(order_key, (b, c)))
        cands = [[list(beams[i][j // expansions][0]) for j in range(c)] for i in range(b)]
        done = [[beams[i][j // expansions][1] for j in range(c)] for i in range(b)]
        finished = [[done[i][j] or len(cands[i][j]) >= T for j in range(c)] for i in range(b)]
        writing = [[not f for f in row] for row in finished]
        iteration = 0
        while any(any(row) for row in writing):
            buffer = np.zeros((b, c, P + T), np.int32)
            mask = np.zeros((b, c, P + T), np.int32)
            for i in range(b):
                for j in range(c):
                    buffer[i, j, :P], mask[i, j, :P] = prompt[i], prompt_mask[i]
                    n = len(cands[i][j])
                    buffer[i, j, P:P + n], mask[i, j, P:P + n] = cands[i][j], 1
            logits = np.asarray(logits_fn(params, buffer.reshape(b * c, -1),
                                          mask.reshape(b * c, -1)), np.float64)
            logits = logits.reshape(b, c, P + T, -1)
            for i in range(b):
                calls[i] += c * any(writing[i])
                for j in range(c):
                    if not writing[i][j]:
                        continue
                    row = logits[i, j, P - 1 + len(cands[i][j])]
                    probs = np.exp(row - row.max())
                    cdf = np.cumsum(probs / probs.sum())[:-1]
                    token = int(np.sum(cdf <= u[iteration, i, j]))
                    cands[i][j].append(token)
                    done[i][j] = token == EOS_ID
                    writing[i][j] = (token not in (EOS_ID, SEMICOLON)
                                     and len(cands[i][j]) < T)
            iteration += 1
        for i in range(b):
            if all(finished[i][j] for j in range(0, c, expansions)):
                continue  # every beam finished: carried as is
            rounds[i] += 1
            score = [process(i, cands[i][j], True)["process"]
                     if not finished[i][j] or j % expansions == 0 else -1.0
                     for j in range(c)]
            permutation = np.argsort(order_u[i], kind="stable")
            order = permutation[np.argsort([-score[j] for j in permutation], kind="stable")]
            beams[i] = [(cands[i][j], done[i][j]) for j in order[:beam_width]]
    best = []
    for i in range(b):
        finals = [process(i, tokens, False) for tokens, _ in beams[i]]
        index = int(np.argmax([f["process"] for f in finals]))
        best.append((beams[i][index][0], finals[index]))
    return best, rounds, calls


@pytest.fixture(scope="module")
def beam_results(params, problems):
    run = jax.jit(jax.vmap(lambda k: prm_beam_search(
        LM, params, TASK, problems, k, beam_width=W, expansions=E, max_new_tokens=T,
        max_steps=ROUNDS)))
    keys = jax.random.split(jax.random.key(7), 2)
    return keys, jax.device_get(run(keys))


def test_prm_beam_search_matches_a_slow_reference_beam_loop(params, problems, beam_results):
    keys, out = beam_results
    for s in range(2):
        best, rounds, calls = reference_beam_search(
            params, problems, keys[s], beam_width=W, expansions=E, max_steps=ROUNDS)
        np.testing.assert_array_equal(out["rounds"][s], rounds)
        np.testing.assert_array_equal(out["samples"][s], W * E * rounds)
        np.testing.assert_array_equal(out["model_calls"][s], calls)
        for b, (tokens, ref) in enumerate(best):
            n = len(tokens)
            np.testing.assert_array_equal(out["tokens"][s, b, :n], tokens)
            np.testing.assert_array_equal(out["mask"][s, b], np.arange(T) < n)
            assert out["correct"][s, b] == ref["accuracy"]
            assert out["process"][s, b] == np.float32(ref["process"])


def test_prm_beam_search_is_verified_and_beats_pass_at_1(params, problems, beam_results):
    keys, out = beam_results
    vote = jax.jit(jax.vmap(lambda k: sample_and_vote(
        LM, params, TASK, problems, k, num_samples=W * E, max_new_tokens=T)))(keys)
    rewards_fn = jax.jit(TASK.rewards)
    for s in range(2):
        rewards = rewards_fn(problems, out["tokens"][s], out["mask"][s])
        np.testing.assert_array_equal(out["correct"][s], rewards.accuracy)
        np.testing.assert_array_equal(out["process"][s], rewards.process)
        assert (out["rounds"][s] >= 1).all() and (out["rounds"][s] <= ROUNDS).all()
        calls, samples = out["model_calls"][s], out["samples"][s]
        assert ((calls % (W * E) == 0) & (calls >= samples) & (calls <= samples * T)).all()
        assert (out["rounds"][s] == 2).mean() > 0.5  # most solutions take two steps
        # an exact PRM at equal samples: clearly better than one sample (measured about
        # 0.45-0.5 against 0.2 at these sizes)
        beam, single = float(out["correct"][s].mean()), float(vote["pass_at_1"][s].mean())
        print(f"beam search {beam:.3f}, pass@1 {single:.3f}")
        assert beam >= single + 0.15, (beam, single)


def test_bad_arguments_are_one_line_errors(problems):
    params = ({}, {})  # never reached: the checks run first
    beam = dict(beam_width=2, expansions=2, max_new_tokens=T, max_steps=2)
    for name, value in (("beam_width", 0), ("expansions", 1.5), ("max_steps", True),
                        ("max_new_tokens", 0)):
        with pytest.raises(ValueError, match=f"^{name}: must be an integer >= 1"):
            prm_beam_search(LM, params, TASK, problems, jax.random.key(0),
                            **{**beam, name: value})
    with pytest.raises(ValueError, match="^max_new_tokens: prompt length 11 \\+"):
        prm_beam_search(LM, params, TASK, problems, jax.random.key(0),
                        **{**beam, "max_new_tokens": T + 1})
    with pytest.raises(ValueError, match="^temperature: must be a number >= 0"):
        prm_beam_search(LM, params, TASK, problems, jax.random.key(0), **beam,
                        temperature=-1.0)
    with pytest.raises(ValueError, match="^num_samples: must be an integer >= 1"):
        sample_and_vote(LM, params, TASK, problems, jax.random.key(0), num_samples=0,
                        max_new_tokens=T)
