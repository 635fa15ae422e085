"""Arithmetic tasks: traced prompt rendering and reward programs against string references."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rljax.envs.arithmetic import (
    LEVEL_NAMES,
    LEVEL_SIZES,
    WIDEST_PROMPT_TOKENS,
    WIDEST_SOLUTION_TOKENS,
    ArithmeticTask,
    Problems,
    Rewards,
    all_problems,
    completion_text,
    eval_split_mask_numpy,
    problem_answer,
    problem_hash,
    problem_hash_numpy,
    problem_index,
    reference_rewards,
    render_problem,
)
from rljax.tokenizer import ARITHMETIC_ALPHABET, BOS_ID, EOS_ID, PAD_ID, CharTokenizer

TOKENIZER = CharTokenizer()
ALL_LEVELS = ArithmeticTask(levels=(0, 1, 2, 3, 4))
FIELDS = ("accuracy", "format", "process", "num_steps")
# In test texts '^' stands for BOS and '_' for PAD (as completion_text writes them).
SPECIAL_CHARS = {"^": BOS_ID, "_": PAD_ID}
T = 24  # completion length of the hand-written cases


def encode_text(text, terminated, length=T, stop_mask=False):
    """A completion ``[chars, EOS?]`` right-padded; ``stop_mask``: unterminated by a mask
    that ends right after the text (instead of by running out of columns)."""
    ids = [SPECIAL_CHARS[c] if c in SPECIAL_CHARS else TOKENIZER.id_of(c) for c in text]
    if terminated:
        ids.append(EOS_ID)
    elif not stop_mask:
        assert len(ids) == length, "unterminated by length: the text must fill T"
    assert len(ids) <= length
    tokens = np.full(length, PAD_ID, np.int32)
    tokens[:len(ids)] = ids
    mask = np.zeros(length, np.int32)
    mask[:len(ids)] = 1
    if not terminated and not stop_mask:
        mask[:] = 1
    return tokens, mask


def make_problems(levels, operands):
    """Problems carrying only what the rewards read (level, answer)."""
    levels = np.asarray(levels, np.int32)
    operands = np.asarray(operands, np.int32).reshape(-1, 3)
    answers = [problem_answer(int(level), ops.tolist())
               for level, ops in zip(levels, operands, strict=True)]
    n = levels.shape[0]
    dummy = jnp.zeros((n, 1), jnp.int32)
    return Problems(prompt=dummy, prompt_mask=dummy, level=jnp.asarray(levels),
                    operands=jnp.asarray(operands), answer=jnp.asarray(answers, jnp.int32),
                    solution=dummy, solution_mask=dummy)


def assert_matches_reference(task, problems, tokens, mask, rewards):
    """Every row of ``rewards`` equals :func:`reference_rewards` on the decoded text."""
    tokens, mask = np.asarray(tokens), np.asarray(mask)
    problems, rewards = jax.device_get((problems, rewards))
    for row in range(tokens.shape[0]):
        text, terminated = completion_text(tokens[row], mask[row])
        level = int(problems.level[row])
        operands = np.asarray(problems.operands[row]).tolist()
        expected = reference_rewards(level, operands, text, terminated, task.max_steps)
        got = {name: float(getattr(rewards, name)[row]) for name in FIELDS}
        want = {name: float(expected[name]) for name in FIELDS}
        where = (LEVEL_NAMES[level], operands, text, terminated)
        assert got == pytest.approx(want), where
        # (pytest >= 9 refuses nested containers in approx, so the list separately)
        assert np.asarray(rewards.step_correct[row]).tolist() == pytest.approx(
            list(expected["step_correct"])), where


# --------------------------------------------------------------------------------------
# Prompts and solutions.
# --------------------------------------------------------------------------------------


def test_sampled_problems_render_like_the_reference():
    per_level = 300
    levels = jnp.repeat(jnp.arange(5, dtype=jnp.int32), per_level)
    sample = jax.jit(lambda key, lv: ALL_LEVELS.sample(key, levels.shape[0], lv))
    problems = jax.device_get(sample(jax.random.key(0), levels))
    assert problems.prompt.dtype == np.int32 and problems.solution.dtype == np.int32
    prompts, solutions = [], []
    for row in range(levels.shape[0]):
        level, operands = int(problems.level[row]), problems.operands[row].tolist()
        prompt, solution = render_problem(level, operands)
        prompts.append(prompt)
        solutions.append(solution)
        assert TOKENIZER.decode(problems.prompt[row]) == prompt
        assert TOKENIZER.decode(problems.solution[row]) == solution
        assert int(problems.answer[row]) == problem_answer(level, operands)
    want_prompt, want_prompt_mask = TOKENIZER.encode_prompts(prompts, ALL_LEVELS.prompt_length)
    want_solution, want_solution_mask = TOKENIZER.encode_completions(
        solutions, ALL_LEVELS.solution_length)
    np.testing.assert_array_equal(problems.prompt, want_prompt)
    np.testing.assert_array_equal(problems.prompt_mask, want_prompt_mask)
    np.testing.assert_array_equal(problems.solution, want_solution)
    np.testing.assert_array_equal(problems.solution_mask, want_solution_mask)

    a, second, third = problems.operands.T
    by_level = problems.level.reshape(5, per_level)
    assert np.all(by_level == np.arange(5)[:, None])
    ranges = {0: ((0, 9), (0, 9), {0}), 1: ((0, 99), (0, 99), {0, 1}),
              2: ((0, 999), (0, 999), {0, 1}), 3: ((2, 9), (2, 99), {2}),
              4: ((1, 9), (-9, 9), set(range(-9, 10)) - {0})}
    for level, ((a_lo, a_hi), (b_lo, b_hi), thirds) in ranges.items():
        rows = problems.level == level
        assert a[rows].min() >= a_lo and a[rows].max() <= a_hi
        assert second[rows].min() >= b_lo and second[rows].max() <= b_hi
        assert set(third[rows].tolist()) == thirds or set(third[rows].tolist()) < thirds
    # Draws cover their ranges: both ops, a = 1 equations, negative and zero x.
    assert set(third[problems.level == 1].tolist()) == {0, 1}
    assert set(third[problems.level == 4].tolist()) == set(range(-9, 10)) - {0}
    assert set(second[problems.level == 4].tolist()) == set(range(-9, 10))
    assert set(a[problems.level == 4].tolist()) == set(range(1, 10))
    assert set(a[problems.level == 0].tolist()) == set(range(10))


def test_default_levels_are_drawn_uniformly():
    task = ArithmeticTask(levels=(1, 3), prompt_length=7, solution_length=4)
    problems = jax.jit(lambda key: task.sample(key, 4000))(jax.random.key(1))
    levels = np.asarray(problems.level)
    assert set(levels.tolist()) == {1, 3}
    assert abs(np.mean(levels == 1) - 0.5) < 0.04
    ops = np.asarray(problems.operands[:, 2])[levels == 1]
    assert abs(np.mean(ops == 1) - 0.5) < 0.05
    texts = TOKENIZER.decode_batch(problems.prompt)
    assert all(len(t) + 1 <= 7 for t in texts)


# --------------------------------------------------------------------------------------
# The train / eval split.
# --------------------------------------------------------------------------------------

# Operand axes per level in index order: (a values, second values, third values).
SPLIT_AXES = {0: (range(10), range(10), [0]), 1: (range(100), range(100), [0, 1]),
              2: (range(1000), range(1000), [0, 1]), 3: (range(2, 10), range(2, 100), [2]),
              4: (range(1, 10), range(-9, 10), [b for b in range(-9, 10) if b])}


def _fmix32_python(level, index):
    """Slow reference of problem_hash: Python integers masked to 32 bits."""
    m = 0xFFFFFFFF
    h = ((index * 8 + level) & m) ^ ((level * 0x9E3779B9) & m)
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & m
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & m
    return h ^ (h >> 16)


def _numpy_index(level, operands):
    """Problem index by numpy's ravel_multi_index over the operand axes (independent of
    problem_index's formula)."""
    operands = np.asarray(operands)
    positions = []
    for column, axis in enumerate(SPLIT_AXES[level]):
        axis = np.asarray(list(axis))
        position = np.searchsorted(axis, operands[:, column])
        assert np.all(axis[np.clip(position, 0, len(axis) - 1)] == operands[:, column])
        positions.append(position)
    return np.ravel_multi_index(positions, [len(axis) for axis in SPLIT_AXES[level]])


@pytest.mark.parametrize("level", range(5))
def test_split_is_a_fixed_hash_over_the_whole_problem_space(level):
    """Every problem of the level: index and hash agree between jnp (jit + vmap), the
    numpy twin and Python integers; the eval side is ~20 % of a split level and empty on
    a level too small to split."""
    problems = all_problems(level)
    assert problems.shape == (LEVEL_SIZES[level], 3)
    want = np.asarray(list(itertools.product(*SPLIT_AXES[level])), np.int32)
    np.testing.assert_array_equal(problems, want)
    levels = np.full(len(problems), level, np.int32)
    index = jax.jit(jax.vmap(problem_index))(levels, problems)
    np.testing.assert_array_equal(index, np.arange(len(problems)))
    hashes = np.asarray(jax.jit(jax.vmap(problem_hash))(levels, index))
    np.testing.assert_array_equal(hashes, problem_hash_numpy(levels, np.arange(len(problems))))
    rows = np.random.default_rng(level).choice(len(problems), 500)
    assert hashes[rows].tolist() == [_fmix32_python(level, int(i)) for i in rows]
    mask = eval_split_mask_numpy(level)
    np.testing.assert_array_equal(mask, hashes < np.uint32(round(0.2 * 2**32)))
    task = ArithmeticTask(levels=(level,), prompt_length=10, solution_length=12)
    dummy = jnp.zeros((len(problems), 1), jnp.int32)
    batch = Problems(prompt=dummy, prompt_mask=dummy, level=jnp.asarray(levels),
                     operands=jnp.asarray(problems), answer=dummy[:, 0], solution=dummy,
                     solution_mask=dummy)
    held_out = np.asarray(jax.jit(task.is_held_out)(batch))
    if level in (1, 2, 4):  # at least MIN_SPLIT_PROBLEMS = 1000 problems
        assert task.is_split(level) and task.held_out_levels == (level,)
        np.testing.assert_array_equal(held_out, mask)
        assert abs(mask.mean() - 0.2) < 0.03
        assert task.split_size(level, "eval") == mask.sum() > 0
        assert task.split_size(level, "train") == len(problems) - mask.sum()
    else:
        assert not task.is_split(level) and task.training_only_levels == (level,)
        assert not held_out.any()
        assert task.split_size(level, "eval") == task.split_size(level, "train") == len(problems)


def test_training_draws_never_hit_an_eval_problem_and_eval_draws_only_eval():
    """A big jitted sample per side, checked against the numpy masks by an independent
    index; both sides are covered uniformly (every problem of level 4's sides is drawn)."""
    task = ArithmeticTask(levels=(0, 1, 2, 3, 4), prompt_length=10, solution_length=12)
    masks = {level: eval_split_mask_numpy(level) for level in range(5)}
    sizes = {"train": (16000, 50000), "eval": (8000, 12000)}  # all levels, level 4

    @jax.jit
    def draw(key):
        keys = jax.random.split(key, 4)
        return {split: (task.sample(keys[2 * i], n, split=split),
                        task.sample(keys[2 * i + 1], m, level=jnp.full(m, 4), split=split))
                for i, (split, (n, m)) in enumerate(sizes.items())}

    draws = jax.device_get(draw(jax.random.key(9)))
    for split, (problems, equations) in draws.items():
        level, operands = problems.level, problems.operands
        assert set(level.tolist()) == set(range(5))
        for lv in range(5):
            index = _numpy_index(lv, operands[level == lv])
            on_eval = masks[lv][index]
            if lv in (0, 3):  # not split: any problem, none of them held out
                assert len(np.unique(index)) > 0.5 * min(LEVEL_SIZES[lv], len(index))
            elif split == "train":
                assert not on_eval.any(), f"a training draw of level {lv} is an eval problem"
            else:
                assert on_eval.all(), f"an eval draw of level {lv} is a training problem"
        assert TOKENIZER.decode_batch(problems.prompt[:50]) == [
            render_problem(int(lv), ops)[0] for lv, ops in zip(level[:50], operands[:50],
                                                               strict=True)]
        # Level 4 (3 078 problems): each side's problems are all drawn, about equally often.
        side = masks[4] if split == "eval" else ~masks[4]
        counts = np.bincount(_numpy_index(4, equations.operands), minlength=LEVEL_SIZES[4])
        assert counts[side].min() > 0 and counts[side].max() < 3 * counts[side].mean(), split
        assert counts[~side].sum() == 0


def test_the_fallback_of_a_missed_draw_is_on_the_right_side():
    """When every candidate misses (probability <= 1e-9, forced here by eval_fraction
    0.99 with one candidate's worth of luck), the draw is the side's first problem."""
    from rljax.envs.arithmetic import _first_on_side

    for level in (1, 2, 4):
        for eval_side in (False, True):
            ops = _first_on_side(level, 0.2, eval_side)
            index = _numpy_index(level, [ops])[0]
            assert bool(eval_split_mask_numpy(level)[index]) == eval_side
    task = ArithmeticTask(levels=(1,), prompt_length=7, solution_length=4, eval_fraction=0.99)
    problems = jax.jit(lambda key: task.sample(key, 300))(jax.random.key(0))
    index = _numpy_index(1, np.asarray(problems.operands))
    assert not eval_split_mask_numpy(1, 0.99)[index].any()


def test_small_levels_are_flagged_and_the_threshold_is_a_field():
    task = ArithmeticTask(levels=(0, 1))
    assert task.held_out_levels == (1,) and task.training_only_levels == (0,)
    problems = jax.jit(lambda key: task.sample(key, 400, split="eval"))(jax.random.key(2))
    held_out = np.asarray(task.is_held_out(problems))
    level = np.asarray(problems.level)
    assert held_out[level == 1].all() and not held_out[level == 0].any()
    # Level 0 only: nothing to split, so the eval draw is the unsplit draw.
    only0 = ArithmeticTask(levels=(0,))
    draws = jax.jit(lambda key: [only0.sample(key, 32, split=split)
                                 for split in ("train", "eval", "all")])(jax.random.key(3))
    for draw in draws[:2]:
        jax.tree.map(np.testing.assert_array_equal, draw, draws[2])
    lower = ArithmeticTask(levels=(3,), prompt_length=6, solution_length=4,
                           min_split_problems=500)
    assert lower.held_out_levels == (3,)
    assert ArithmeticTask(levels=(3,), prompt_length=6, solution_length=4).held_out_levels == ()


@pytest.mark.parametrize("fields, name", [
    ({"eval_fraction": 0.0}, "eval_fraction"), ({"eval_fraction": 1.0}, "eval_fraction"),
    ({"eval_fraction": "0.2"}, "eval_fraction"), ({"min_split_problems": 0},
                                                  "min_split_problems"),
])
def test_bad_split_fields_are_one_line_errors(fields, name):
    with pytest.raises(ValueError, match=name):
        ArithmeticTask(**fields).validate()
    with pytest.raises(ValueError, match="split"):
        ArithmeticTask().sample(jax.random.key(0), 4, split="test")


def test_widest_lengths_are_exact():
    candidates = {0: (range(10), range(10), [0]), 1: (range(100), range(100), [0, 1]),
                  2: ([0, 9, 10, 99, 100, 999], [0, 9, 10, 99, 100, 999], [0, 1]),
                  3: (range(2, 10), range(2, 100), [2]),
                  4: (range(1, 10), range(-9, 10), [b for b in range(-9, 10) if b])}
    for level, axes in candidates.items():
        texts = [render_problem(level, ops) for ops in itertools.product(*axes)]
        assert max(len(p) for p, _ in texts) + 1 == WIDEST_PROMPT_TOKENS[level]
        assert max(len(s) for _, s in texts) + 1 == WIDEST_SOLUTION_TOKENS[level]


def test_same_key_same_problems_and_vmap_over_keys_equals_a_loop():
    sample = jax.jit(lambda key: ALL_LEVELS.sample(key, 16))
    keys = jax.random.split(jax.random.key(3), 4)
    first, again = sample(keys[0]), sample(keys[0])
    jax.tree.map(np.testing.assert_array_equal, first, again)
    assert not np.array_equal(first.operands, sample(keys[1]).operands)
    batched = jax.jit(jax.vmap(lambda key: ALL_LEVELS.sample(key, 16)))(keys)
    for i, key in enumerate(keys):
        jax.tree.map(lambda b, s, i=i: np.testing.assert_array_equal(b[i], s), batched,
                     sample(key))


# --------------------------------------------------------------------------------------
# Rewards: hand-written cases with known verdicts.
# --------------------------------------------------------------------------------------

EQ = (3, 5, 4)  # 3x+4=19; -> x = 5
EQ1 = (1, -3, -4)  # x-4=-7; -> x = -3
EQ0 = (2, 0, 1)  # 2x+1=1; -> x = 0

# (level, operands, text, terminated, accuracy, format, process)
CASES = [
    (4, EQ, "3x=15;x=5", True, 1, 1, 1),
    (4, EQ, "3x=19-4;x=5", True, 1, 1, 1),
    (4, EQ, "4+3x=19;3x=15;x=5", True, 1, 1, 1),
    (4, EQ, "3x+4=19;x=5", True, 1, 1, 1),
    (4, EQ, "x=5", True, 1, 1, 1),
    (4, EQ, "-3x=-15;x=5", True, 1, 1, 1),
    (4, EQ, "15=3x;x=5", True, 1, 1, 1),
    (4, EQ, "x+x+x=15;x=5", True, 1, 1, 1),
    (4, EQ, "0003x=15;x=5", True, 1, 1, 1),
    (4, EQ, "+3x=+15;x=5", True, 1, 1, 1),
    (4, EQ, "3x=16;x=5", True, 1, 1, 0.5),  # valid step that changes the solution set
    (4, EQ, "3x=15;x=6", True, 0, 1, 0.5),
    (4, EQ, "x=6", True, 0, 1, 0),
    (4, EQ, "3x4=1", True, 0, 0, 0),
    (4, EQ, "3x=15;x==5", True, 0, 0, 0.5),
    (4, EQ, "xx=5", True, 0, 0, 0),
    (4, EQ, "+-3x=-15;x=5", True, 0, 0, 0.5),
    (4, EQ, "3*x=15;x=5", True, 0, 0, 0.5),
    (4, EQ, "3x=15;;x=5", True, 0, 0, 2 / 3),
    (4, EQ, "x=5;", True, 0, 0, 0.5),
    (4, EQ, ";x=5", True, 0, 0, 0.5),
    (4, EQ, "3x=15", True, 0, 0, 1),  # right step, no final answer
    (4, EQ, "5=x", True, 0, 0, 1),
    (4, EQ, "x=05", True, 0, 0, 1),  # parses and keeps, not the integer form
    (4, EQ, "1x=5", True, 0, 0, 1),
    (4, EQ, "x=+5", True, 0, 0, 1),
    (4, EQ, "x=5+0", True, 0, 0, 1),
    (4, EQ, "0x=0;x=5", True, 1, 1, 0.5),
    (4, EQ, "x-x=0;x=5", True, 1, 1, 0.5),
    (4, EQ, "x=5;x=5;x=5;x=5", True, 1, 1, 1),
    (4, EQ, "x=5;x=5;x=5;x=5;x=5", True, 0, 0, 1),  # more than max_steps
    (4, EQ, "x=12345", True, 0, 0, 0),  # 5-digit coefficient
    (4, EQ, "x=", True, 0, 0, 0),
    (4, EQ, "=5", True, 0, 0, 0),
    (4, EQ, "x", True, 0, 0, 0),
    (4, EQ, "x=5=5", True, 0, 0, 0),
    (4, EQ, "x=5x", True, 0, 0, 0),
    (4, EQ, "", True, 0, 0, 0),
    (4, EQ, "x=^5", True, 0, 0, 0),
    (4, EQ, "3x=15;x=_5", True, 0, 0, 0.5),
    (4, EQ, "x=5", False, 0, 0, 0),  # unterminated (mask ends)
    (4, EQ, "3x=15;3x=15;3x=15;3x=15;", False, 0, 0, 0),  # unterminated (out of columns)
    (4, EQ1, "x=-3", True, 1, 1, 1),
    (4, EQ1, "x-4=-7;x=-3", True, 1, 1, 1),
    (4, EQ1, "x=-7+4", True, 0, 0, 1),
    (4, EQ1, "x=3", True, 0, 1, 0),
    (4, EQ1, "x=-03", True, 0, 0, 1),
    (4, EQ0, "2x=0;x=0", True, 1, 1, 1),
    (4, EQ0, "x=-0", True, 0, 0, 1),
    (4, EQ0, "x=00", True, 0, 0, 1),
    (1, (52, 71, 1), "-19", True, 1, 1, 1),
    (1, (52, 71, 1), "19", True, 0, 1, 0),
    (1, (52, 71, 1), "-019", True, 0, 0, 0),
    (1, (52, 71, 1), "+19", True, 0, 0, 0),
    (1, (52, 71, 1), "-19;", True, 0, 0, 0),
    (1, (52, 71, 1), "-19=", True, 0, 0, 0),
    (1, (52, 71, 1), "--19", True, 0, 0, 0),
    (1, (52, 71, 1), "-", True, 0, 0, 0),
    (1, (52, 71, 1), "-19", False, 0, 0, 0),
    (1, (52, 71, 1), "-1_9", True, 0, 0, 0),
    (1, (52, 71, 1), "^-19", True, 0, 0, 0),
    (1, (52, 71, 1), "", True, 0, 0, 0),
    (1, (5, 5, 1), "0", True, 1, 1, 1),
    (1, (5, 5, 1), "-0", True, 0, 0, 0),
    (1, (5, 5, 1), "00", True, 0, 0, 0),
    (0, (3, 4, 0), "7", True, 1, 1, 1),
    (0, (3, 4, 0), "07", True, 0, 0, 0),
    (0, (3, 4, 0), "x=7", True, 0, 0, 0),
    (2, (999, 999, 0), "1998", True, 1, 1, 1),
    (2, (999, 999, 0), "199800", True, 0, 1, 0),  # 6 digits: the form allows it
    (2, (999, 999, 0), "1998000", True, 0, 0, 0),  # 7 digits: malformed
    (2, (512, 309, 0), "821", True, 1, 1, 1),
    (3, (7, 23, 2), "161", True, 1, 1, 1),
    (3, (7, 23, 2), "7*23", True, 0, 0, 0),
    (3, (7, 23, 2), "161161161161161161161161", False, 0, 0, 0),
]


def encode_cases(cases):
    tokens, masks = zip(*[encode_text(text, terminated, stop_mask=len(text) < T)
                          for _, _, text, terminated, *_ in cases], strict=True)
    problems = make_problems([c[0] for c in cases], [c[1] for c in cases])
    return problems, np.stack(tokens), np.stack(masks)


def test_hand_written_cases_have_the_stated_verdicts_and_match_the_reference():
    problems, tokens, masks = encode_cases(CASES)
    rewards = jax.device_get(jax.jit(ALL_LEVELS.rewards)(problems, tokens, masks))
    for row, (level, operands, text, terminated, accuracy, form, process) in enumerate(CASES):
        expected = reference_rewards(level, operands, text, terminated, ALL_LEVELS.max_steps)
        stated = {"accuracy": accuracy, "format": form, "process": process}
        assert {k: expected[k] for k in stated} == pytest.approx(stated), text
        got = {k: float(getattr(rewards, k)[row]) for k in stated}
        assert got == pytest.approx(stated), (LEVEL_NAMES[level], text, terminated)
    assert_matches_reference(ALL_LEVELS, problems, tokens, masks, rewards)
    # The step verdicts of a few equation cases.
    by_text = {c[2]: row for row, c in enumerate(CASES) if c[:2] == (4, EQ) and c[3]}
    np.testing.assert_array_equal(rewards.step_correct[by_text["3x=16;x=5"]], [0, 1, 0, 0])
    np.testing.assert_array_equal(rewards.step_correct[by_text["3x=15;;x=5"]], [1, 0, 1, 0])
    np.testing.assert_array_equal(
        rewards.step_correct[by_text["x=5;x=5;x=5;x=5;x=5"]], [1, 1, 1, 1])
    assert int(rewards.num_steps[by_text["x=5;x=5;x=5;x=5;x=5"]]) == 5
    np.testing.assert_array_equal(rewards.step_correct[by_text["x=5"]], [1, 0, 0, 0])
    assert int(rewards.num_steps[by_text[""]]) == 0


def test_reference_solutions_score_one():
    problems = jax.jit(lambda key: ALL_LEVELS.sample(key, 256))(jax.random.key(4))
    rewards = jax.jit(ALL_LEVELS.rewards)(problems, problems.solution, problems.solution_mask)
    problems, rewards = jax.device_get((problems, rewards))
    for name in ("accuracy", "format", "process"):
        np.testing.assert_array_equal(getattr(rewards, name), 1.0)
    equation = np.asarray(problems.level == 4) & np.asarray(problems.operands[:, 0] != 1)
    np.testing.assert_array_equal(rewards.num_steps, np.where(equation, 2, 1))
    for row in range(16):
        level, operands = int(problems.level[row]), problems.operands[row].tolist()
        _, solution = render_problem(level, operands)
        ref = reference_rewards(level, operands, solution, True, ALL_LEVELS.max_steps)
        assert (ref["accuracy"], ref["format"], ref["process"]) == (1, 1, 1)


# --------------------------------------------------------------------------------------
# Rewards: random completions against the reference.
# --------------------------------------------------------------------------------------


def write_terms(rng, x_coefficient, constant):
    """``x_coefficient x + constant`` as 1-2 randomly split, randomly ordered terms."""
    terms = []
    split = int(rng.integers(-3, 4)) if rng.random() < 0.3 else 0
    if x_coefficient or rng.random() < 0.3:
        terms += [(x_coefficient - split, "x"), (split, "x")] if split else [
            (x_coefficient, "x")]
    if constant or not terms:
        terms.append((constant, ""))
    rng.shuffle(terms)
    text = ""
    for coefficient, var in terms:
        digits = "" if var and abs(coefficient) == 1 and rng.random() < 0.7 else str(
            abs(coefficient))
        sign = "-" if coefficient < 0 else ("+" if text or rng.random() < 0.2 else "")
        text += sign + digits + var
    return text


def linear_step(rng, answer):
    """A step ``lhs=rhs`` that keeps ``x = answer`` with probability about 0.7."""
    slope = int(rng.choice([-3, -2, -1, 0, 1, 2, 3, 5]))
    lhs_const = int(rng.integers(-9, 10))
    rhs_x = int(rng.choice([0, 0, 0, 1, -2]))
    rhs_const = slope * answer + lhs_const + (0 if rng.random() < 0.7 else 1)
    return (write_terms(rng, slope + rhs_x, lhs_const) + "="
            + write_terms(rng, rhs_x, rhs_const))


def random_completions(rng, problems, length, num):
    """``num`` completions: random strings biased toward the alphabet, and mutations of
    the correct solution (one character replaced, inserted or deleted) and random linear
    steps, with EOS, PAD, BOS and early mask ends sprinkled in."""
    alphabet = list(ARITHMETIC_ALPHABET)
    weights = np.array([3.0] * 10 + [2, 3, 1, 3, 4, 3])
    weights /= weights.sum()
    tokens = np.full((num, length), PAD_ID, np.int32)
    masks = np.zeros((num, length), np.int32)
    for row in range(num):
        level = int(problems.level[row])
        operands = np.asarray(problems.operands[row]).tolist()
        kind = rng.integers(5)
        if kind == 0:  # random characters
            text = "".join(rng.choice(alphabet, size=rng.integers(0, length), p=weights))
        elif kind == 1:  # the solution, mutated once
            text = list(render_problem(level, operands)[1])
            spot = int(rng.integers(len(text) + 1))
            char = str(rng.choice(alphabet, p=weights))
            move = rng.integers(3)
            if move == 0 and spot < len(text):
                text[spot] = char
            elif move == 1:
                text.insert(spot, char)
            elif spot < len(text):
                del text[spot]
            text = "".join(text)
        elif kind == 4:  # 1-5 short steps: the solution's, and answers right or wrong
            answer = problem_answer(level, operands)
            pool = render_problem(level, operands)[1].split(";") + [
                f"x={answer}", f"x={answer + 1}", f"{-answer}=-x"]
            text = ";".join(rng.choice(pool, size=rng.integers(1, 6)))
        else:  # linear steps, mostly true of the answer, ending (usually) in x=<integer>
            answer = problem_answer(level, operands)
            steps = [linear_step(rng, answer) for _ in range(rng.integers(1, 4))]
            if kind == 3:
                steps.append(f"x={answer + int(rng.integers(-1, 2))}")
            text = ";".join(steps)
        ids = [TOKENIZER.id_of(c) for c in text][:length]
        ends = rng.random()
        if len(ids) < length and ends < 0.8:
            ids.append(EOS_ID)
        if rng.random() < 0.1 and ids:  # a special token somewhere inside
            ids[int(rng.integers(len(ids)))] = int(rng.choice([PAD_ID, BOS_ID, EOS_ID]))
        tokens[row, :len(ids)] = ids
        used = len(ids) if rng.random() < 0.85 else int(rng.integers(len(ids) + 1))
        masks[row, :used] = 1
        if rng.random() < 0.1:  # junk after the end, still masked
            tokens[row, used:] = rng.integers(0, TOKENIZER.vocab_size, length - used)
    return tokens, masks


@pytest.mark.parametrize("length", [12, 24])
def test_random_completions_match_the_reference(length):
    rng = np.random.default_rng(length)
    num = 400
    levels = np.where(rng.random(num) < 0.5, 4, rng.integers(0, 4, num)).astype(np.int32)
    problems = jax.device_get(
        jax.jit(lambda key, lv: ALL_LEVELS.sample(key, num, lv))(jax.random.key(5), levels))
    tokens, masks = random_completions(rng, problems, length, num)
    rewards = jax.jit(ALL_LEVELS.rewards)(problems, tokens, masks)
    assert_matches_reference(ALL_LEVELS, problems, tokens, masks, rewards)
    # The sample is not degenerate: every verdict occurs.
    assert 0 < float(jnp.mean(rewards.accuracy)) < 1
    assert 0 < float(jnp.mean(rewards.format)) < 1
    assert np.any((np.asarray(rewards.process) > 0) & (np.asarray(rewards.process) < 1))


def test_out_of_vocabulary_ids_are_malformed_and_a_mask_gap_ends_the_text():
    seven, three, x, equals = (TOKENIZER.id_of(c) for c in "73x=")
    problems = make_problems([0, 4, 0, 0], [(3, 4, 0), EQ, (3, 4, 0), (3, 4, 0)])
    tokens = np.asarray([[seven, 99, EOS_ID, 0, 0],
                         [x, equals, -1, EOS_ID, 0],
                         [seven, three, EOS_ID, 0, 0],  # the mask ends after "7"
                         [seven, EOS_ID, seven, 0, 0]], np.int32)  # junk after EOS
    masks = np.asarray([[1, 1, 1, 0, 0], [1, 1, 1, 1, 0], [1, 0, 1, 0, 0], [1, 1, 1, 1, 1]],
                       np.int32)
    rewards = jax.jit(ALL_LEVELS.rewards)(problems, tokens, masks)
    np.testing.assert_array_equal(rewards.format, [0, 0, 0, 1])
    np.testing.assert_array_equal(rewards.accuracy, [0, 0, 0, 1])
    assert completion_text(tokens[0], masks[0]) == ("7?", True)
    assert completion_text(tokens[2], masks[2]) == ("7", False)
    assert_matches_reference(ALL_LEVELS, problems, tokens, masks, rewards)


# --------------------------------------------------------------------------------------
# Transformations, combined reward, errors.
# --------------------------------------------------------------------------------------


def test_rewards_under_jit_and_vmap_equal_eager_and_a_loop():
    problems, tokens, masks = encode_cases(CASES[:40])
    eager = ALL_LEVELS.rewards(problems, tokens, masks)
    jitted = jax.jit(ALL_LEVELS.rewards)(problems, tokens, masks)
    jax.tree.map(np.testing.assert_array_equal, eager, jitted)
    # An extra leading axis (e.g. seeds): 4 blocks of 10.
    stacked = jax.tree.map(lambda v: v.reshape(4, 10, *v.shape[1:]), problems)
    batched = jax.jit(jax.vmap(ALL_LEVELS.rewards))(
        stacked, tokens.reshape(4, 10, T), masks.reshape(4, 10, T))
    for block in range(4):
        rows = slice(10 * block, 10 * block + 10)
        jax.tree.map(lambda b, e, block=block, rows=rows: np.testing.assert_array_equal(
            b[block], e[rows]), batched, eager)
    # Boolean masks read like integer masks.
    boolean = ALL_LEVELS.rewards(problems, tokens, masks.astype(bool))
    jax.tree.map(np.testing.assert_array_equal, eager, boolean)


def test_sample_then_score_in_one_vmapped_program():
    task = ArithmeticTask(levels=(0, 4), prompt_length=10, solution_length=12)

    def score(key):
        problems = task.sample(key, 8)
        rewards = task.rewards(problems, problems.solution, problems.solution_mask)
        return task.combined_reward(rewards, {"accuracy": 1.0, "process": 0.5})

    totals = jax.jit(jax.vmap(score))(jax.random.split(jax.random.key(6), 3))
    np.testing.assert_array_equal(totals, 1.5)


def test_combined_reward_is_the_weighted_sum():
    rewards = Rewards(accuracy=jnp.array([1.0, 0.0, 1.0]), format=jnp.array([1.0, 1.0, 0.0]),
                      process=jnp.array([0.5, 0.25, 1.0]), step_correct=jnp.zeros((3, 4)),
                      num_steps=jnp.ones(3, jnp.int32))
    weights = {"accuracy": 1.0, "format": 0.2, "process": 0.5}
    want = [1.0 + 0.2 + 0.25, 0.2 + 0.125, 1.0 + 0.5]
    np.testing.assert_allclose(ALL_LEVELS.combined_reward(rewards, weights), want, rtol=1e-6)
    np.testing.assert_allclose(ALL_LEVELS.combined_reward(rewards, {"format": 2.0}),
                               [2.0, 2.0, 0.0])
    np.testing.assert_array_equal(ALL_LEVELS.combined_reward(rewards, {}), [0.0, 0.0, 0.0])
    # Traced weights (a sweep may vmap over them).
    by_weight = jax.jit(jax.vmap(lambda w: ALL_LEVELS.combined_reward(
        rewards, {"accuracy": w})))(jnp.array([0.0, 2.0]))
    np.testing.assert_array_equal(by_weight, [[0, 0, 0], [2, 0, 2]])
    with pytest.raises(ValueError, match="accurracy"):
        ALL_LEVELS.combined_reward(rewards, {"accurracy": 1.0})


@pytest.mark.parametrize("fields, name", [
    ({"levels": ()}, "levels"),
    ({"levels": [0, 1]}, "levels"),
    ({"levels": (0, 5)}, "levels"),
    ({"levels": (-1,)}, "levels"),
    ({"levels": (True,)}, "levels"),
    ({"levels": (0, 2), "prompt_length": 8}, "prompt_length"),
    ({"levels": (4,), "prompt_length": 9}, "prompt_length"),
    ({"levels": (4,), "solution_length": 11}, "solution_length"),
    ({"levels": (1,), "solution_length": 3.5}, "solution_length"),
    ({"levels": (4,), "max_steps": 1}, "max_steps"),
    ({"levels": (0,), "max_steps": 0}, "max_steps"),
])
def test_validate_names_the_bad_field(fields, name):
    task = ArithmeticTask(**fields)
    with pytest.raises(ValueError, match=name):
        task.validate()
    with pytest.raises(ValueError, match=name):
        task.sample(jax.random.key(0), 4)


def test_valid_configs_pass_and_bad_arguments_are_named():
    ArithmeticTask().validate()
    ArithmeticTask(levels=(0,), prompt_length=5, solution_length=3, max_steps=1).validate()
    ArithmeticTask(levels=(0, 1, 2, 3, 4), prompt_length=10, solution_length=12).validate()
    with pytest.raises(ValueError, match="num"):
        ALL_LEVELS.sample(jax.random.key(0), 0)
    with pytest.raises(ValueError, match="level"):
        render_problem(5, (1, 2, 0))
    with pytest.raises(ValueError, match="level"):
        reference_rewards(-1, (1, 2, 0), "3", True, 4)
