"""Text tasks through a real tokenizer (rljax.envs.text_tasks, rljax.envs.text_problems,
rljax.text_tokenizer): the numeric verifier, the disjoint split, tokenization and padding,
rewards under jit and vmap against the host verifier, chat templates, one-line errors,
the shipped BPE's reproducibility, the trainer's special ids and checkpoint check, and a
BPE task trained end to end at tiny size (the one compiled trainer of this file)."""

from __future__ import annotations

import dataclasses
import json
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rljax.envs.arithmetic import reference_rewards
from rljax.envs.text_problems import (
    arithmetic_text_task,
    bpe_corpus,
    word_problem_task,
    word_problems,
)
from rljax.envs.text_tasks import (
    TextProblem,
    TokenizedTask,
    gsm8k_answer,
    is_eval_text,
    numeric_verifier,
)
from rljax.policies.hf_checkpoint import save_hf_tokenizer
from rljax.text_tokenizer import (
    BPE_VOCAB_SIZE,
    HFTokenizer,
    bpe_directory,
    load_bpe_tokenizer,
    load_hf_tokenizer,
    train_bpe,
)
from rljax.tokenizer import CharTokenizer

BPE = load_bpe_tokenizer()


def small_task(**settings) -> TokenizedTask:
    """Word problems of levels 1 and 2, 150 per level (host side, cached)."""
    return word_problem_task(None, settings.pop("levels", (1, 2)),
                             bank_size=settings.pop("bank_size", 150), **settings)


def one_line(error) -> str:
    message = str(error.value)
    assert "\n" not in message, message
    return message


# ----------------------------------------------------------------------------- verifier

@pytest.mark.parametrize("text, value", [
    ("7+5=12. #### 12", 12), ("#### -3", -3), ("####12", 12), ("#### 1,234\n", 1234),
    ("#### 5. #### 7", 7), ("3+4=7. #### 7  ", 7), ("#### 12 apples", None), ("12", None),
    ("#### ", None), ("#### 12.5", None), ("#### x", None), ("", None),
])
def test_gsm8k_answer_reads_the_final_answer_line(text, value):
    assert gsm8k_answer(text) == value


def test_the_numeric_verifier_on_hand_cases():
    problem = TextProblem("q", "3+9=12. #### 12", 12, 1)
    cases = [("3+9=12. #### 12", True, 1, 1), ("3+9=13. #### 12", True, 1, 1),
             ("#### 13", True, 0, 1), ("12", True, 0, 0), ("#### 12", False, 0, 0),
             ("#### 12<|pad|>", True, 0, 0)]
    for text, terminated, accuracy, form in cases:
        verdict = numeric_verifier(problem, text, terminated, 3)
        assert (verdict["accuracy"], verdict["format"], verdict["process"]) == (
            accuracy, form, accuracy), text
        assert verdict["step_correct"] == [accuracy, 0.0, 0.0] and verdict["num_steps"] == 1


# ----------------------------------------------------------------------------- problems

def test_word_problems_are_deterministic_distinct_and_correct():
    for level in (1, 2, 3):
        problems = word_problems(level, 100, seed=3)
        assert problems == word_problems(level, 100, seed=3)
        assert len({p.question for p in problems}) == 100
        for p in problems:
            steps = p.solution.split(" #### ")[0].split(". ")
            assert len(steps) == level and gsm8k_answer(p.solution) == p.answer >= 1
            value = None
            for step in steps:  # each step is right and starts from the previous result
                lhs, rhs = step.rstrip(".").split("=")
                assert eval(lhs) == int(rhs)  # noqa: S307 (digits and one operator)
                assert value is None or lhs.startswith(str(value))
                value = int(rhs)
            assert value == p.answer


# ----------------------------------------------------------------------------- the split

def test_the_split_is_by_question_text_and_disjoint():
    task = small_task()
    train = {p.question for p in task.split_problems("train")}
    held = {p.question for p in task.split_problems("eval")}
    assert not train & held and all(is_eval_text(q, 0.2) for q in held)
    assert not any(is_eval_text(q, 0.2) for q in train)
    assert 0.1 < len(held) / (len(held) + len(train)) < 0.3
    # the side is a function of the text: level 0's 100 problems, in two orders
    sides = [{p.question for p in arithmetic_text_task(levels=(0,), bank_size=100, seed=seed)
              .split_problems("eval")} for seed in (0, 1)]
    assert sides[0] == sides[1] and 5 < len(sides[0]) < 40
    # draws inside jit stay on their side, and is_held_out says which
    draw = jax.jit(lambda key, split: task.sample(key, 64, split=split), static_argnums=1)
    for split, on_eval in (("train", False), ("eval", True)):
        problems = draw(jax.random.key(0), split)
        assert np.all(np.asarray(jax.jit(task.is_held_out)(problems)) == on_eval)
        questions = {task.problem(r).question for r in np.asarray(problems.operands[:, 0])}
        assert questions <= (held if on_eval else train)


# ----------------------------------------------------------------------------- tokenizing

def test_prompts_and_solutions_round_trip_left_and_right_padded():
    task = small_task()
    problems = jax.jit(lambda key: task.sample(key, 32, split="all"))(jax.random.key(1))
    prompt, prompt_mask = np.asarray(problems.prompt), np.asarray(problems.prompt_mask)
    solution, solution_mask = np.asarray(problems.solution), np.asarray(problems.solution_mask)
    assert prompt.shape == (32, task.prompt_length) and solution.shape == (
        32, task.solution_length)
    assert task.prompt_length == 32 and task.solution_length == 22  # the bank's widest
    for n, row in enumerate(np.asarray(problems.operands[:, 0])):
        problem = task.problem(row)
        width = int(prompt_mask[n].sum())
        assert prompt_mask[n].tolist() == [0] * (task.prompt_length - width) + [1] * width
        assert prompt[n, -width] == BPE.bos_id and np.all(prompt[n, :-width] == BPE.pad_id)
        assert BPE.decode(prompt[n]) == problem.question
        length = int(solution_mask[n].sum())
        assert solution_mask[n].tolist() == [1] * length + [0] * (task.solution_length - length)
        assert solution[n, length - 1] == BPE.eos_id
        assert BPE.decode(solution[n]) == problem.solution
        assert int(problems.answer[n]) == problem.answer == gsm8k_answer(problem.solution)
        assert int(problems.level[n]) == problem.level
    # the arithmetic levels as text, and any text through the byte-level BPE
    for text in ("3x+4=19;", "3x=15;x=5", "52-71=", "Zoë's café: 3.5 €!\n"):
        assert BPE.decode(BPE.encode(text)) == text
    arithmetic = arithmetic_text_task(levels=(4,), bank_size=40)
    for p in arithmetic.split_problems("all"):
        assert BPE.decode(BPE.encode(p.question)) == p.question


# ----------------------------------------------------------------------------- rewards

def completions(task: TokenizedTask, problems, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Completions [N, width] of hand-written kinds, cycling over the problems: the
    solution, a wrong answer, no answer line, unterminated (a mask 0 before the EOS ends
    the reading), an id outside the tokenizer, and the solution with a stray PAD inside."""
    tokens = np.zeros((len(problems), width), np.int32)
    mask = np.zeros_like(tokens)
    for n, p in enumerate(problems):
        kind = n % 6
        text = {1: f"#### {p.answer + 1}", 2: p.solution.split(" ####")[0]}.get(kind, p.solution)
        ids = list(BPE.encode(text)) + [BPE.eos_id]
        if kind == 4:
            ids[1] = BPE.vocab_size + 3
        if kind == 5:
            ids.insert(2, BPE.pad_id)
        ids = ids[:width]
        tokens[n, :len(ids)] = ids
        mask[n, :len(ids)] = 1
        if kind == 3:
            mask[n, len(ids) - 3] = 0
    return tokens, mask


def reference(task: TokenizedTask, problem: TextProblem, tokens, mask) -> dict:
    """The verdict from the host by the obvious route: cut at EOS or mask 0, decode."""
    kept = []
    for token, keep in zip(tokens.tolist(), mask.tolist(), strict=True):
        if not keep or token == BPE.eos_id:
            break
        kept.append(token)
    terminated = bool(keep) and token == BPE.eos_id
    if any(t >= BPE.vocab_size for t in kept):
        return {"accuracy": 0.0, "format": 0.0, "process": 0.0}
    text = BPE.tokenizer.decode(kept, skip_special_tokens=False)
    return task.verifier(problem, text, terminated, task.max_steps)


def test_rewards_under_jit_and_vmap_equal_the_host_verifier():
    tasks = (small_task(), arithmetic_text_task(levels=(1, 4), bank_size=60))
    for task in tasks:
        problems = jax.jit(lambda key, t=task: t.sample(key, 12))(jax.random.key(2))
        host = [task.problem(r) for r in np.asarray(problems.operands[:, 0])]
        tokens, mask = completions(task, host, 24)
        seeds = np.stack([tokens, np.roll(tokens, 1, axis=0)]), np.stack([mask, mask])
        jitted = jax.jit(task.rewards)(problems, tokens, mask)
        # a batch axis on the completions only, then on the problems only
        vmapped = jax.jit(jax.vmap(task.rewards, in_axes=(None, 0, 0)))(problems, *seeds)
        shifted = jax.tree_util.tree_map(lambda x: jnp.stack([x, jnp.roll(x, 1, axis=0)]),
                                         problems)
        on_problems = jax.jit(jax.vmap(task.rewards, in_axes=(0, None, None)))(
            shifted, tokens, mask)
        cases = [(jitted, None, host, tokens, mask), (vmapped, 1, host, seeds[0][1], mask),
                 (on_problems, 1, host[-1:] + host[:-1], tokens, mask)]
        for got, index, problems_host, t, m in cases:
            want = [reference(task, p, t[n], m[n]) for n, p in enumerate(problems_host)]
            for name in ("accuracy", "format", "process"):
                column = np.asarray([w[name] for w in want], np.float32)
                value = np.asarray(getattr(got, name))
                np.testing.assert_array_equal(value if index is None else value[index], column)
        assert vmapped.step_correct.shape == on_problems.step_correct.shape == (
            2, 12, task.max_steps)
        assert np.asarray(jitted.accuracy)[::6].all() and not np.asarray(jitted.accuracy)[
            1::6].any()
    # the arithmetic text task's rewards are the arithmetic reference's on the same text
    task = tasks[1]
    row = next(r for r in range(120) if task.problem(r).level == 4)
    a, x, b = task.problem(row).data
    for text in (f"{a}x={a * x};x={x}", f"{a}x={a * x + 1};x={x}", f"x={x}", f"x={x + 1}",
                 f"{a}x={a * x};", f"x = {x}", f"{a}x={a * x};x={x}<|pad|>"):
        ids = np.asarray([*BPE.encode(text), BPE.eos_id], np.int32)[None]
        got = task.host_rewards(ids, np.ones_like(ids), np.asarray([row], np.int32))
        want = reference_rewards(4, (a, x, b), text, True, task.max_steps)
        assert [float(v[0]) for v in got[:3]] == [want["accuracy"], want["format"],
                                                  want["process"]], text
        assert got[3][0].tolist() == want["step_correct"] and got[4][0] == want["num_steps"]


# ----------------------------------------------------------------------------- chat

TEMPLATE = ("{{ bos_token }}{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n"
            "{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}")


def test_a_chat_template_renders_the_prompts(tmp_path):
    shutil.copy(bpe_directory() / "tokenizer.json", tmp_path / "tokenizer.json")
    config = json.loads((bpe_directory() / "tokenizer_config.json").read_text())
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({**config,
                                                                "chat_template": TEMPLATE}))
    tokenizer = load_hf_tokenizer(tmp_path)
    assert tokenizer.chat_template == TEMPLATE
    messages = [{"role": "user", "content": "Hi?"}]
    assert tokenizer.apply_chat_template(messages) == "<|bos|>user: Hi?\nassistant:"
    assert tokenizer.apply_chat_template(messages, add_generation_prompt=False) == (
        "<|bos|>user: Hi?\n")
    task = word_problem_task(tmp_path, (1,), bank_size=40)
    plain = word_problem_task(tmp_path, (1,), bank_size=40, chat=False)
    assert word_problem_task(str(tmp_path), (1,), bank_size=40) is task  # cached by path
    assert task.prompt_length > plain.prompt_length == small_task(levels=(1,)).prompt_length
    problems = task.sample(jax.random.key(0), 4)
    for n, row in enumerate(np.asarray(problems.operands[:, 0])):
        ids = np.asarray(problems.prompt[n])[np.asarray(problems.prompt_mask[n]) == 1]
        assert ids[0] == tokenizer.bos_id and tokenizer.bos_id not in ids[1:]  # BOS once
        question = task.problem(row).question
        assert tokenizer.tokenizer.decode(ids.tolist(), skip_special_tokens=False) == (
            f"<|bos|>user: {question}\nassistant:")
    # it travels with save_hf_tokenizer; HF's other two forms load; a failing template is
    # one line
    save_hf_tokenizer(tmp_path / "copy", tokenizer)
    assert load_hf_tokenizer(tmp_path / "copy").chat_template == TEMPLATE
    forms = {"named": {"chat_template": [{"name": "tool_use", "template": "x"},
                                         {"name": "default", "template": TEMPLATE}]},
             "file": {}, "unnamed": {"chat_template": [{"name": "tool_use", "template": "x"}]}}
    for name, extra in forms.items():
        (tmp_path / name).mkdir()
        shutil.copy(bpe_directory() / "tokenizer.json", tmp_path / name / "tokenizer.json")
        (tmp_path / name / "tokenizer_config.json").write_text(json.dumps({**config, **extra}))
    (tmp_path / "file" / "chat_template.jinja").write_text(TEMPLATE)
    assert load_hf_tokenizer(tmp_path / "named").chat_template == TEMPLATE
    assert load_hf_tokenizer(tmp_path / "file").chat_template == TEMPLATE
    with pytest.raises(ValueError) as error:
        load_hf_tokenizer(tmp_path / "unnamed")
    assert one_line(error).startswith(str(tmp_path / "unnamed" / "tokenizer_config.json"))
    broken = HFTokenizer(BPE.tokenizer, eos_id=2, chat_template="{{ raise_exception('no') }}")
    with pytest.raises(ValueError) as error:
        broken.apply_chat_template(messages)
    assert one_line(error).startswith("chat_template: cannot render: no")


# ----------------------------------------------------------------------------- errors

def test_bad_inputs_are_one_line_errors_naming_the_field():
    no_eos = HFTokenizer(BPE.tokenizer, bos_id=1, pad_id=0)
    cases = [
        (lambda: small_task(levels=(4,)), "levels"),
        (lambda: small_task(levels=()), "levels"),
        (lambda: arithmetic_text_task(levels=(5,)), "levels"),
        (lambda: small_task(prompt_length=20), "prompt_length"),
        (lambda: small_task(solution_length=5), "solution_length"),
        (lambda: small_task(eval_fraction=0.0), "eval_fraction"),
        (lambda: small_task(bank_size=0), "bank_size"),
        (lambda: word_problem_task(no_eos, (1,), bank_size=20), "tokenizer"),
        (lambda: word_problem_task(CharTokenizer(), (1,), bank_size=20), "tokenizer"),
        (lambda: small_task().sample(jax.random.key(0), 4, split="test"), "split"),
        (lambda: small_task().sample(jax.random.key(0), 0), "num"),
        (lambda: small_task().combined_reward(None, {"style": 1.0}), "weights"),
        (lambda: train_bpe(["a"], 100), "vocab_size"),
    ]
    for make, field in cases:
        with pytest.raises(ValueError) as error:
            make()
        assert one_line(error).startswith(f"{field}:"), (field, str(error.value))
    with pytest.raises(ValueError) as error:
        small_task(prompt_length=20)
    assert "32" in one_line(error)  # the bank's widest prompt


# ----------------------------------------------------------------------------- the BPE

def test_the_shipped_bpe_is_what_its_script_trains(tmp_path):
    """Re-training on the generated corpus reproduces the shipped files bitwise (after a
    generator change, run scripts/train_bpe.py)."""
    trained = train_bpe(bpe_corpus())
    save_hf_tokenizer(tmp_path, trained)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        assert (tmp_path / name).read_bytes() == (bpe_directory() / name).read_bytes(), name
    assert (BPE.pad_id, BPE.bos_id, BPE.eos_id) == (0, 1, 2)
    assert 259 < BPE.vocab_size <= BPE_VOCAB_SIZE
    assert load_bpe_tokenizer() is BPE


# ----------------------------------------------------------------------------- trainer

class _Recorded(Exception):
    pass


@dataclasses.dataclass(frozen=True)
class RecordingPolicy:
    """Records generate's keywords and stops (nothing compiles)."""

    calls: list

    def generate(self, *args, **kwargs):
        self.calls.append(kwargs)
        raise _Recorded


def test_the_trainer_uses_the_task_tokenizers_ids(tmp_path):
    from rljax.training.lm import (
        LMDecoderConfig,
        LMTrainConfig,
        is_truncated,
        make_lm_trainer,
        task_special_ids,
    )

    odd = HFTokenizer(BPE.tokenizer, bos_id=1, eos_id=5, pad_id=7)  # any special ids
    task = word_problem_task(odd, (1,), bank_size=40)
    config = LMTrainConfig(max_new_tokens=task.solution_length, width=8, num_layers=1,
                           num_heads=1, eval_prompts=2)
    trainer = make_lm_trainer(config, task=task)
    assert trainer.policy.config.vocab_size == BPE.vocab_size
    assert task_special_ids(task) == (5, 7)
    calls = []
    recording = dataclasses.replace(trainer, policy=RecordingPolicy(calls))
    problems = task.sample(jax.random.key(0), 2)
    for call in (lambda: recording.evaluate_per_prompt(None, problems),
                 lambda: recording.sample_completions(None, problems, jax.random.key(0)),
                 lambda: recording.sampled_correct(None, problems, jax.random.key(0), 2)):
        with pytest.raises(_Recorded):
            call()
    assert [(c["stop_ids"], c["pad_id"]) for c in calls] == [((5,), 7)] * 3
    tokens = jnp.asarray([[3, 2, 0], [3, 5, 7]])
    mask = jnp.ones_like(tokens)
    assert is_truncated(tokens, mask, 5).tolist() == [True, False]
    # a checkpoint must carry the task's tokenizer
    from rljax.policies.decoder import Decoder, DecoderConfig
    from rljax.policies.hf_checkpoint import save_hf_checkpoint

    small = DecoderConfig(vocab_size=BPE.vocab_size + 5, hidden_size=8, intermediate_size=16,
                          num_hidden_layers=1, num_attention_heads=1, num_key_value_heads=1,
                          max_position_embeddings=64)
    params = jax.jit(Decoder(small).init)(jax.random.key(0))
    word = small_task(levels=(1,))
    context = dataclasses.replace(config, max_new_tokens=word.solution_length)
    for name, tokenizer in (("bpe", BPE), ("char", CharTokenizer()), ("none", None)):
        save_hf_checkpoint(tmp_path / name, small, params, tokenizer=tokenizer)
    if (tmp_path / "none" / "tokenizer.json").exists():
        (tmp_path / "none" / "tokenizer.json").unlink()
    built = make_lm_trainer(context, decoder=LMDecoderConfig(checkpoint=str(tmp_path / "bpe")),
                            task=word)  # a padded embedding (V + 5) is fine
    assert built.policy.config.vocab_size == BPE.vocab_size + 5
    for name in ("char", "none"):
        with pytest.raises(ValueError) as error:
            make_lm_trainer(context, decoder=LMDecoderConfig(checkpoint=str(tmp_path / name)),
                            task=word)
        assert one_line(error).startswith(str(tmp_path / name / "tokenizer.json"))


def test_a_bpe_task_trains_end_to_end_at_tiny_size():
    from rljax.training.lm import LMTrainConfig, make_lm_trainer

    task = small_task(levels=(1,), bank_size=60)
    config = LMTrainConfig(max_new_tokens=task.solution_length, sft_steps=2, sft_batch=4,
                           rl_steps=1, steps_per_chunk=1, prompts_per_step=2, group_size=2,
                           eval_prompts=4, width=16, num_layers=1, num_heads=1,
                           reward_format=1.0)
    trainer = make_lm_trainer(config, task=task)
    state = jax.jit(trainer.init)(jax.random.key(0))
    state, logs = jax.jit(trainer.advance)(state)
    final = jax.jit(trainer.finish)(state)
    assert int(state.step) == 1
    for name in ("loss", "reward", "accuracy", "format", "length", "entropy", "kl",
                 "eval_accuracy", "eval_held_out_accuracy"):
        assert np.all(np.isfinite(np.asarray(logs[name]))), name
    assert np.asarray(final["eval_correct"]).shape == (4,)
    assert np.isfinite(float(final["eval_accuracy"])) and int(final["nonfinite_step"]) == -1
    assert np.all(np.asarray(trainer.eval_held_out()))  # every text-task level is split
