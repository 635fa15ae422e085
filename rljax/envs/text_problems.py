"""The text tasks' problems: GSM8K-style word problems and the arithmetic levels as text.

Both generators are deterministic functions of ``(level, count, seed)`` on the host and
give distinct questions (:class:`~rljax.envs.text_tasks.TextProblem`); the factories
:func:`word_problem_task` and :func:`arithmetic_text_task` tokenize them into a
:class:`~rljax.envs.text_tasks.TokenizedTask` with the shipped BPE
(:func:`~rljax.text_tokenizer.load_bpe_tokenizer`) or any tokenizer directory.

**Word problems** (:func:`word_problems`), small integers in GSM8K's style; the level is
the number of arithmetic steps (1-3). A person starts with a count of objects (``Ava has
7 apples.``, or ``Ava has 3 boxes with 4 apples in each.``, itself a ``*`` step), then
buys / finds / is given 2-9 more (``+``), gives away / loses / sells 2-9 (``-``, never
below 1), or sees the count double or triple (``*``, from at most 20); the question asks
for the final count. The solution writes each step as ``a op b = c.`` and ends with GSM8K's answer
line::

    Ava has 7 apples. Ava buys 5 more apples. Ava gives 3 apples to Ben.
    How many apples does Ava have now?
    -> 7+5=12. 12-3=9. #### 9

The verifier is :func:`~rljax.envs.text_tasks.numeric_verifier` (the ``#### n`` line).

**Arithmetic as text** (:func:`arithmetic_text_problems`): the five levels of
:mod:`rljax.envs.arithmetic` rendered by its :func:`~rljax.envs.arithmetic.render_problem`
(``52-71=`` -> ``-19``, ``3x+4=19;`` -> ``3x=15;x=5``), scored by its string reference
:func:`~rljax.envs.arithmetic.reference_rewards` on the decoded text (the equations'
step-level process reward included), so a BPE-tokenized completion scores what the same
text scores under the character tokenizer. The split is the text tasks' (a hash of the
question), not :class:`~rljax.envs.arithmetic.ArithmeticTask`'s, and every level is split
(levels 0 and 3 too, on their 100 and 784 problems).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator

import numpy as np

from rljax.envs.arithmetic import (
    LEVEL_SIZES,
    NUM_LEVELS,
    all_problems,
    problem_answer,
    reference_rewards,
    render_problem,
)
from rljax.envs.text_tasks import TextProblem, TokenizedTask, numeric_verifier
from rljax.text_tokenizer import HFTokenizer, load_bpe_tokenizer, load_hf_tokenizer

WORD_PROBLEM_LEVELS = (1, 2, 3)
"""The word problems' levels: the number of arithmetic steps."""
BANK_SIZE = 2000
"""Default problems per level of a task's bank (fewer where a level has fewer)."""

NAMES = ("Ava", "Ben", "Cal", "Dina", "Eli", "Fay", "Gus", "Ivy", "Jon", "Kim", "Leo", "Mia",
         "Ned", "Omar", "Pia", "Raj", "Sam", "Tess")
"""The people of the word problems."""
OBJECTS = ("apples", "books", "cards", "coins", "eggs", "pens", "shells", "stamps",
           "marbles", "stickers")
"""The counted objects (plural)."""
CONTAINERS = ("bags", "boxes", "jars", "packs")
"""The containers of the ``groups`` opening."""
_ADD = ("{name} buys {n} more {obj}.", "{name} finds {n} more {obj}.",
        "{other} gives {name} {n} {obj}.")
_SUB = ("{name} gives {n} {obj} to {other}.", "{name} loses {n} {obj}.",
        "{name} sells {n} {obj}.")
_MUL = {2: "The number of {obj} {name} has doubles.",
        3: "The number of {obj} {name} has triples."}
_QUESTION = "How many {obj} does {name} have now?"
_MAX_MULTIPLIED = 20  # a count is doubled or tripled only up to this


def _step(a: int, op: str, b: int) -> tuple[int, str]:
    value = {"+": a + b, "-": a - b, "*": a * b}[op]
    return value, f"{a}{op}{b}={value}."


def _word_problem(rng: np.random.Generator, level: int) -> TextProblem:
    """One word problem of ``level`` steps drawn from ``rng`` (module docstring)."""
    name, other = (str(v) for v in rng.choice(NAMES, size=2, replace=False))
    obj = str(rng.choice(OBJECTS))
    sentences, steps = [], []
    if rng.random() < 0.25:  # the groups opening is the first step
        groups, each = int(rng.integers(2, 6)), int(rng.integers(2, 10))
        container = str(rng.choice(CONTAINERS))
        sentences.append(f"{name} has {groups} {container} with {each} {obj} in each.")
        count, text = _step(groups, "*", each)
        steps.append(text)
    else:
        count = int(rng.integers(2, 21))
        sentences.append(f"{name} has {count} {obj}.")
    while len(steps) < level:
        ops = ["+", "-"] + (["*"] if count <= _MAX_MULTIPLIED else [])
        op = str(rng.choice(ops)) if count > 2 else "+"
        if op == "+":
            n = int(rng.integers(2, 10))
            template = _ADD[int(rng.integers(len(_ADD)))]
        elif op == "-":
            n = int(rng.integers(2, min(9, count - 1) + 1))
            template = _SUB[int(rng.integers(len(_SUB)))]
        else:
            n = int(rng.integers(2, 4))
            template = _MUL[n]
        sentences.append(template.format(name=name, other=other, obj=obj, n=n))
        count, text = _step(count, op, n)
        steps.append(text)
    sentences.append(_QUESTION.format(name=name, obj=obj))
    return TextProblem(question=" ".join(sentences), solution=" ".join(steps)
                       + f" #### {count}", answer=count, level=level)


def _distinct(draw, count: int) -> list[TextProblem]:
    """The first ``count`` distinct questions among the draws of ``draw()`` (at most
    ``50 count`` draws)."""
    seen: dict[str, TextProblem] = {}
    for _ in range(50 * count):
        if len(seen) == count:
            break
        problem = draw()
        seen.setdefault(problem.question, problem)
    return list(seen.values())


def word_problems(level: int, count: int = BANK_SIZE, seed: int = 0) -> list[TextProblem]:
    """``count`` distinct word problems of ``level`` steps (module docstring), a fixed
    function of ``(level, count, seed)`` (numpy's PCG64 seeded with ``(seed, level)``):
    Python scalars and strings, no arrays.

    Raises:
      ValueError: ``level`` not in :data:`WORD_PROBLEM_LEVELS` (one line).
    """
    if level not in WORD_PROBLEM_LEVELS:
        raise ValueError(f"levels: each must be in {WORD_PROBLEM_LEVELS} (steps), got "
                         f"{level!r}")
    rng = np.random.default_rng([seed, level])
    return _distinct(lambda: _word_problem(rng, level), count)


def arithmetic_text_problems(level: int, count: int = BANK_SIZE, seed: int = 0
                             ) -> list[TextProblem]:
    """``min(count, LEVEL_SIZES[level])`` distinct problems of an arithmetic level as
    text (:func:`~rljax.envs.arithmetic.render_problem`), drawn without replacement by
    numpy's PCG64 seeded with ``(seed, level)``; ``data`` holds the operands.

    Raises:
      ValueError: ``level`` not in 0..4 (one line).
    """
    if not (isinstance(level, int) and 0 <= level < NUM_LEVELS):
        raise ValueError(f"levels: each must be an arithmetic level in 0..{NUM_LEVELS - 1}, "
                         f"got {level!r}")
    rng = np.random.default_rng([seed, level])
    rows = rng.choice(LEVEL_SIZES[level], size=min(count, LEVEL_SIZES[level]), replace=False)
    problems = []
    for operands in all_problems(level)[rows].tolist():
        question, solution = render_problem(level, operands)
        problems.append(TextProblem(question=question, solution=solution,
                                    answer=problem_answer(level, operands), level=level,
                                    data=tuple(operands)))
    return problems


def arithmetic_verifier(problem: TextProblem, text: str, terminated: bool,
                        max_steps: int) -> dict:
    """:func:`~rljax.envs.arithmetic.reference_rewards` of the decoded text: the
    arithmetic task's rewards (format, accuracy, the equations' step-level process)."""
    return reference_rewards(problem.level, problem.data, text, terminated, max_steps)


def bpe_corpus(seed: int = 0) -> Iterator[str]:
    """The text the shipped BPE is trained on (``scripts/train_bpe.py``): 2000 word
    problems of each level (question, then solution) and 500 problems of each arithmetic
    level (prompt, then solution), in a fixed order."""
    for level in WORD_PROBLEM_LEVELS:
        for p in word_problems(level, 2000, seed):
            yield p.question
            yield p.solution
    for level in range(NUM_LEVELS):
        for p in arithmetic_text_problems(level, 500, seed):
            yield p.question
            yield p.solution


def _tokenizer(tokenizer: HFTokenizer | str | os.PathLike | None) -> HFTokenizer:
    if tokenizer is None:
        return load_bpe_tokenizer()
    if isinstance(tokenizer, HFTokenizer):
        return tokenizer
    if not isinstance(tokenizer, str | os.PathLike):
        raise ValueError(f"tokenizer: must be None (the shipped BPE), an HFTokenizer or a "
                         f"directory with a tokenizer.json, got {type(tokenizer).__name__}")
    return _load_directory(os.fspath(tokenizer))


@functools.lru_cache(maxsize=4)
def _load_directory(path: str) -> HFTokenizer:
    return load_hf_tokenizer(path)


@functools.lru_cache(maxsize=8)
def _cached_task(kind: str, tokenizer: HFTokenizer, levels: tuple[int, ...],
                 bank_size: int, seed: int, settings: tuple) -> TokenizedTask:
    if kind == "word-problems":
        problems = [p for level in dict.fromkeys(levels) for p in
                    word_problems(level, bank_size, seed)]
        verifier = numeric_verifier
    else:
        problems = [p for level in dict.fromkeys(levels) for p in
                    arithmetic_text_problems(level, bank_size, seed)]
        verifier = arithmetic_verifier
    return TokenizedTask(name=kind, problems=tuple(problems), verifier=verifier,
                         tokenizer=tokenizer, levels=levels, **dict(settings))


def _check_build(levels, bank_size, seed) -> tuple[int, ...]:
    if not isinstance(levels, tuple | list) or not levels:
        raise ValueError(f"levels: must be a non-empty tuple of levels, got {levels!r}")
    if isinstance(bank_size, bool) or not isinstance(bank_size, int) or bank_size < 1:
        raise ValueError(f"bank_size: must be an integer >= 1, got {bank_size!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed: must be an integer >= 0, got {seed!r}")
    return tuple(int(v) if isinstance(v, np.integer) else v for v in levels)


def word_problem_task(tokenizer: HFTokenizer | str | os.PathLike | None = None,
                      levels: tuple[int, ...] = (1, 2), *, bank_size: int = BANK_SIZE,
                      seed: int = 0, prompt_length: int | None = None,
                      solution_length: int | None = None, eval_fraction: float = 0.2,
                      chat: bool = True) -> TokenizedTask:
    """The word problems (module docstring) tokenized for the LM trainer.

    Host side, cached: the same arguments give the same task object (so trainers built
    twice share compiled programs).

    Args:
      tokenizer: None (the shipped BPE), an :class:`~rljax.text_tokenizer.HFTokenizer`, or
        a directory with a ``tokenizer.json`` (a checkpoint's; its chat template, if any,
        is applied with ``chat``).
      levels: steps per problem, entries of :data:`WORD_PROBLEM_LEVELS`.
      bank_size: distinct problems generated per level (the bank).
      seed: the generator's seed.
      prompt_length, solution_length: ``Lp``, ``Ls`` columns (None: the bank's widest).
      eval_fraction: the held-out share of questions.
      chat: apply the tokenizer's chat template when it has one.

    Returns:
      a :class:`~rljax.envs.text_tasks.TokenizedTask` whose ``sample`` gives prompts
      ``[N, Lp]`` and solutions ``[N, Ls]`` (int32).

    Raises:
      ValueError: one line naming the first bad argument (e.g. ``levels``,
        ``prompt_length`` too short for the bank, ``tokenizer`` without EOS).
    """
    levels = _check_build(levels, bank_size, seed)
    for level in levels:
        if level not in WORD_PROBLEM_LEVELS:
            raise ValueError(f"levels: each must be in {WORD_PROBLEM_LEVELS} (steps), got "
                             f"{level!r} in {levels!r}")
    settings = (("prompt_length", prompt_length), ("solution_length", solution_length),
                ("eval_fraction", eval_fraction), ("chat", chat))
    return _cached_task("word-problems", _tokenizer(tokenizer), levels, bank_size, seed,
                        settings)


def arithmetic_text_task(tokenizer: HFTokenizer | str | os.PathLike | None = None,
                         levels: tuple[int, ...] = (0, 1), *, bank_size: int = BANK_SIZE,
                         seed: int = 0, prompt_length: int | None = None,
                         solution_length: int | None = None, eval_fraction: float = 0.2,
                         max_steps: int = 4, chat: bool = True) -> TokenizedTask:
    """The arithmetic levels as text (module docstring) tokenized for the LM trainer,
    scored by :func:`arithmetic_verifier`.

    Host side, cached like :func:`word_problem_task`; the arguments are its own, with
    ``levels`` in 0..4 and ``max_steps`` the ``S`` of the equations' step verdicts.

    Returns:
      a :class:`~rljax.envs.text_tasks.TokenizedTask` (prompts ``[N, Lp]``, solutions
      ``[N, Ls]``, ``Rewards.step_correct [N, max_steps]``).

    Raises:
      ValueError: one line naming the first bad argument.
    """
    levels = _check_build(levels, bank_size, seed)
    for level in levels:
        if not (isinstance(level, int) and 0 <= level < NUM_LEVELS):
            raise ValueError(f"levels: each must be an arithmetic level in "
                             f"0..{NUM_LEVELS - 1}, got {level!r} in {levels!r}")
    settings = (("prompt_length", prompt_length), ("solution_length", solution_length),
                ("eval_fraction", eval_fraction), ("max_steps", max_steps), ("chat", chat))
    return _cached_task("arithmetic-text", _tokenizer(tokenizer), levels, bank_size, seed,
                        settings)


__all__ = [
    "BANK_SIZE",
    "CONTAINERS",
    "NAMES",
    "OBJECTS",
    "WORD_PROBLEM_LEVELS",
    "arithmetic_text_problems",
    "arithmetic_text_task",
    "arithmetic_verifier",
    "bpe_corpus",
    "word_problem_task",
    "word_problems",
]
