"""Verifiable arithmetic tasks: prompts drawn from a key, rewards computed by programs.

Everything here that runs in training is pure JAX on int32 token arrays (the ids of
:class:`rljax.tokenizer.CharTokenizer`), so sampling prompts, decoding with a tiny
transformer and scoring the completions are one jitted, vmapped program. Beside each
traced function sits a slow, obvious Python reference on strings
(:func:`render_problem`, :func:`reference_rewards`) that the tests compare against.

Levels (index, name: prompt text -> correct completion text):

=====  ==========  ======================================================  ===================
level  name        operands                                                example
=====  ==========  ======================================================  ===================
0      add1        ``a, b`` in 0..9                                        ``3+4=`` -> ``7``
1      addsub2     ``a, b`` in 0..99, ``+`` or ``-`` equally likely        ``52-71=`` -> ``-19``
2      addsub3     ``a, b`` in 0..999, ``+`` or ``-`` equally likely       ``512+309=`` -> ``821``
3      mul         ``a`` in 2..9, ``b`` in 2..99                           ``7*23=`` -> ``161``
4      equation    ``a`` in 1..9, ``x`` in -9..9, ``b`` in -9..9 \\ {0},   ``3x+4=19;`` ->
                   ``c = a x + b``; solve ``a x + b = c`` for ``x``        ``3x=15;x=5``
=====  ==========  ======================================================  ===================

**Train / eval split.** Each problem of a level with at least ``min_split_problems``
(default 1000) distinct problems is assigned once and for all to the training or the
evaluation side by a fixed 32-bit hash of ``(level, problem index)``
(:func:`problem_hash`, MurmurHash3's finaliser; a numpy twin beside it): with the default
``eval_fraction`` 0.2 levels 1, 2 and 4 are split (3 987, 399 995 and 610 eval problems).
Training draws (``ArithmeticTask.sample``'s default ``split="train"``) never return an
eval problem; ``split="eval"`` returns only eval problems. Levels 0 (100 problems) and 3
(784) are too small to split honestly and are not split: every one of their problems is
a training problem, so an evaluation on them measures *training* accuracy
(``ArithmeticTask.is_held_out`` is False there, ``training_only_levels`` lists them).

In equations the coefficient 1 is written ``x`` (``x-4=-7;`` -> ``x=-3``) and steps are
separated by ``;``. Layout (as everywhere in rljax): a prompt is ``[BOS, chars]``
left-padded with PAD, a completion ``[chars, EOS]`` right-padded with PAD.

**Rewards** (:meth:`ArithmeticTask.rewards`). The completion is read left to right and
ends at the first EOS (*terminated*) or at the first position whose mask is 0 (*not*
terminated: the sampler ran out of tokens); tokens after that are ignored, whatever
their mask. A completion that is not terminated scores accuracy 0, format 0, process 0
and all-zero ``step_correct`` -- never an exception. Any token other than the alphabet's
characters (PAD, BOS, an id out of range) inside the text makes it malformed.

* Arithmetic levels (0-3). The required form is an *integer*: an optional ``-``, then
  1-6 digits without leading zeros (``0`` itself is fine, ``-0`` is malformed), then EOS.
  ``format = 1[form ok]``, ``accuracy = 1[form ok and value == answer]``. The answer is
  one step: ``num_steps = 1``, ``step_correct[0] = process = accuracy``.
* Equation level (4). The text is ``;``-separated steps; ``num_steps`` is the number of
  pieces (``count(';') + 1``, or 0 for an empty text). A step is ``lhs=rhs`` with exactly
  one ``=``; each side is a non-empty sequence of *terms*, each an optional sign (the
  first term of a side may omit it, every later term needs ``+`` or ``-``), an optional
  coefficient of 1-4 digits (leading zeros allowed here), and optionally ``x``; a term
  has digits or ``x`` or both (``3x``, ``-x``, ``12``, ``x`` are terms; ``3x4``, ``xx``,
  ``+-3``, ``3*x`` are not).
  A step is *valid* if it parses. Written as ``A x = B`` with
  ``A = xcoef(lhs) - xcoef(rhs)`` and ``B = const(rhs) - const(lhs)``, it *keeps the
  solution set* iff ``A != 0`` and ``A x* = B``.

  - ``step_correct[i] = 1[step i is valid and keeps the solution set]`` for
    ``i < max_steps`` (0 beyond ``num_steps``).
  - ``format = 1[terminated, every step valid (no empty steps), num_steps <= max_steps,
    and the last step is exactly x=<integer>]`` (integer form as above, and at most 4
    digits since the step must parse).
  - ``accuracy = 1[format and that integer == x*]`` (judged on the final answer alone:
    ``3x=16;x=5`` is accurate, and its ``process`` of 1/2 flags the wrong step).
  - ``process = #{steps valid and keeping the solution set} / max(num_steps, 1)``
    (counted over all steps, also those beyond ``max_steps``; 0 if not terminated).

The equation ``process`` reward is the step-level verification of Lightman et al. (2023),
"Let's Verify Step by Step" (arXiv:2305.20050), made exact: instead of a learned process
reward model judging each step, a program checks that each written step is a well-formed
linear equation with the same unique solution as the problem.

Implementation: one ``lax.scan`` over the completion's tokens with a small integer state
machine (the current term's sign, digits and ``x``; per-step sums ``A`` and ``B``; ``=``
count; step index; validity flags; and an automaton for the integer / ``x=<integer>``
answer form), vmapped over the batch.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from rljax.config import ConfigError
from rljax.tokenizer import ARITHMETIC_ALPHABET, BOS_ID, EOS_ID, NUM_SPECIAL, PAD_ID
from rljax.types import Array, PRNGKey

LEVEL_NAMES = ("add1", "addsub2", "addsub3", "mul", "equation")
"""Names of the five difficulty levels, indexed by level id (``Problems.level``)."""
NUM_LEVELS = len(LEVEL_NAMES)
EQUATION_LEVEL = 4
REWARD_KEYS = ("accuracy", "format", "process")

# Widest prompt [BOS, chars] and solution [chars, EOS] of each level, in tokens:
# "9+9=" / "18", "99+99=" / "198", "999+999=" / "1998", "9*99=" / "891",
# "9x-9=-90;" / "9x=-81;x=-9".
WIDEST_PROMPT_TOKENS = (5, 7, 9, 6, 10)
WIDEST_SOLUTION_TOKENS = (3, 4, 5, 4, 12)

# Inclusive operand ranges per level: first operand a, second b (x for equations), and
# the third column: op for arithmetic (0 '+', 1 '-', 2 '*'); for equations an index
# 0..17 into b in -9..9 without 0.
_FIRST_RANGE = ((0, 9), (0, 99), (0, 999), (2, 9), (1, 9))
_SECOND_RANGE = ((0, 9), (0, 99), (0, 999), (2, 99), (-9, 9))
_THIRD_RANGE = ((0, 0), (0, 1), (0, 1), (2, 2), (0, 17))

_OPS = "+-*"
_MAX_INT_DIGITS = 6  # the integer answer form
_MAX_COEF_DIGITS = 4  # a term's coefficient
_INT_WIDTH = 5  # buffer for one rendered integer: sign + 4 digits (|v| <= 1998)


def _char_id(char: str) -> int:
    return NUM_SPECIAL + ARITHMETIC_ALPHABET.index(char)


DIGIT0 = _char_id("0")
PLUS, MINUS, TIMES = _char_id("+"), _char_id("-"), _char_id("*")
EQUALS, X, SEMICOLON = _char_id("="), _char_id("x"), _char_id(";")


@struct.dataclass
class Problems:
    """A batch of ``N`` problems.

    Attributes:
      prompt: int32 ``[N, Lp]`` tokens ``[BOS, chars]`` left-padded with PAD.
      prompt_mask: int32 ``[N, Lp]``, 1 on BOS and the characters.
      level: int32 ``[N]`` level index (``LEVEL_NAMES``).
      operands: int32 ``[N, 3]``: ``(a, b, op)`` for arithmetic (op 0 ``+``, 1 ``-``,
        2 ``*``); ``(a, x, b)`` for equations ``a x + b = c``.
      answer: int32 ``[N]``: the result, or ``x`` for equations.
      solution: int32 ``[N, Ls]`` the correct completion ``[chars, EOS]`` right-padded.
      solution_mask: int32 ``[N, Ls]``, 1 on the characters and the EOS.
    """

    prompt: Array
    prompt_mask: Array
    level: Array
    operands: Array
    answer: Array
    solution: Array
    solution_mask: Array


@struct.dataclass
class Rewards:
    """Verdicts on ``N`` completions (definitions in the module docstring).

    Attributes:
      accuracy: float32 ``[N]`` in {0, 1}: the final answer is exactly right.
      format: float32 ``[N]`` in {0, 1}: the answer appears in the required form.
      process: float32 ``[N]`` in [0, 1]: fraction of written steps that are valid and
        keep the solution set (equations); equals ``accuracy`` on arithmetic levels.
      step_correct: float32 ``[N, S]`` per-step verdicts, 0 beyond ``num_steps``.
      num_steps: int32 ``[N]`` steps written (1 on arithmetic levels).
    """

    accuracy: Array
    format: Array
    process: Array
    step_correct: Array
    num_steps: Array


# --------------------------------------------------------------------------------------
# Slow references on strings.
# --------------------------------------------------------------------------------------

_INTEGER_RE = re.compile(r"0|-?[1-9][0-9]{0,5}")
_TERM = r"(?:[0-9]{1,4}x?|x)"
_SIDE_RE = re.compile(rf"[+-]?{_TERM}(?:[+-]{_TERM})*")
_TERM_RE = re.compile(r"([+-]?)([0-9]*)(x?)")


def _check_level(level: int) -> None:
    if not (isinstance(level, int | np.integer) and 0 <= level < NUM_LEVELS):
        raise ValueError(f"level: must be an integer in 0..{NUM_LEVELS - 1}, got {level!r}")


def problem_answer(level: int, operands: Sequence[int]) -> int:
    """The answer of one problem (Python): ``a op b``, or ``x`` for equations."""
    _check_level(level)
    a, b, op = (int(v) for v in operands)
    if level == EQUATION_LEVEL:
        return b
    return (a + b, a - b, a * b)[op]


def render_problem(level: int, operands: Sequence[int]) -> tuple[str, str]:
    """Slow reference: ``(prompt text, solution text)`` of one problem.

    Args:
      level: the level index, 0..4.
      operands: ``(a, b, op)`` for arithmetic, ``(a, x, b)`` for equations.

    Returns:
      e.g. ``("52-71=", "-19")`` or ``("3x+4=19;", "3x=15;x=5")`` (no BOS / EOS).
    """
    _check_level(level)
    a, second, third = (int(v) for v in operands)
    if level != EQUATION_LEVEL:
        return f"{a}{_OPS[third]}{second}=", str(problem_answer(level, operands))
    x, b = second, third
    coefficient = "" if a == 1 else str(a)
    prompt = f"{coefficient}x{b:+d}={a * x + b};"
    solution = f"x={x}" if a == 1 else f"{a}x={a * x};x={x}"
    return prompt, solution


def completion_text(tokens: Sequence[int] | np.ndarray, mask: Sequence[int] | np.ndarray
                    ) -> tuple[str, bool]:
    """Slow reference: one completion's ``(text, terminated)`` as the rewards read it.

    Reading stops at the first EOS (terminated) or the first position with mask 0 (not
    terminated). PAD is written ``_``, BOS ``^`` and any other non-alphabet id ``?``: all
    three are outside the alphabet, so :func:`reference_rewards` finds them malformed.
    """
    chars = []
    for token, keep in zip(np.asarray(tokens).tolist(), np.asarray(mask).tolist(),
                           strict=True):
        if not keep:
            return "".join(chars), False
        if token == EOS_ID:
            return "".join(chars), True
        if NUM_SPECIAL <= token < NUM_SPECIAL + len(ARITHMETIC_ALPHABET):
            chars.append(ARITHMETIC_ALPHABET[token - NUM_SPECIAL])
        else:
            chars.append({PAD_ID: "_", BOS_ID: "^"}.get(token, "?"))
    return "".join(chars), False


def _parse_side(side: str) -> tuple[int, int] | None:
    """``(x coefficient, constant)`` of a linear expression, or None if malformed."""
    if not _SIDE_RE.fullmatch(side):
        return None
    xcoef = const = 0
    for sign, digits, has_x in _TERM_RE.findall(side):
        if not (digits or has_x):
            continue  # findall's empty match at the end
        value = (-1 if sign == "-" else 1) * (int(digits) if digits else 1)
        if has_x:
            xcoef += value
        else:
            const += value
    return xcoef, const


def _parse_step(step: str) -> tuple[int, int] | None:
    """``(A, B)`` of a step ``lhs=rhs`` read as ``A x = B``, or None if malformed."""
    sides = step.split("=")
    if len(sides) != 2:
        return None
    lhs, rhs = _parse_side(sides[0]), _parse_side(sides[1])
    if lhs is None or rhs is None:
        return None
    return lhs[0] - rhs[0], rhs[1] - lhs[1]


def reference_rewards(level: int, operands: Sequence[int], completion_text: str,
                      terminated: bool, max_steps: int) -> dict:
    """Slow reference of :meth:`ArithmeticTask.rewards` for one completion (strings).

    Args:
      level: the level index, 0..4.
      operands: ``(a, b, op)`` or ``(a, x, b)``, as in :class:`Problems`.
      completion_text: the text before the first EOS; characters outside the alphabet
        (see :func:`completion_text`) are malformed.
      terminated: whether an EOS ended the text.
      max_steps: S.

    Returns:
      ``{"accuracy", "format", "process": float, "step_correct": list of S floats,
      "num_steps": int}``.
    """
    answer = problem_answer(level, operands)
    text = completion_text
    if level != EQUATION_LEVEL:
        form = terminated and _INTEGER_RE.fullmatch(text) is not None
        accuracy = float(form and int(text) == answer)
        return {"accuracy": accuracy, "format": float(form), "process": accuracy,
                "step_correct": [accuracy] + [0.0] * (max_steps - 1), "num_steps": 1}
    steps = text.split(";") if text else []
    parsed = [_parse_step(step) for step in steps]
    keeps = [p is not None and p[0] != 0 and p[0] * answer == p[1] for p in parsed]
    last = steps[-1] if steps else ""
    final = (last.startswith("x=") and _INTEGER_RE.fullmatch(last[2:]) is not None
             and parsed[-1] is not None)
    form = (terminated and bool(steps) and all(p is not None for p in parsed)
            and len(steps) <= max_steps and final)
    accuracy = form and int(last[2:]) == answer
    process = sum(keeps) / max(len(steps), 1) if terminated else 0.0
    step_correct = [float(k and terminated) for k in keeps[:max_steps]]
    step_correct += [0.0] * (max_steps - len(step_correct))
    return {"accuracy": float(accuracy), "format": float(form), "process": float(process),
            "step_correct": step_correct, "num_steps": len(steps)}


# --------------------------------------------------------------------------------------
# Rendering in JAX.
# --------------------------------------------------------------------------------------


def _render_int(value: Array, force_sign: bool | Array = False) -> tuple[Array, Array]:
    """An int32 scalar (``|value| < 10^4``) as ``(tokens [5], length)``, left-aligned:
    ``-`` if negative (``+`` if non-negative and ``force_sign``), then the digits."""
    magnitude = jnp.abs(value)
    num_digits = 1 + sum((magnitude >= 10 ** k).astype(jnp.int32)
                         for k in range(1, _INT_WIDTH - 1))
    sign_length = ((value < 0) | force_sign).astype(jnp.int32)
    sign_token = jnp.where(value < 0, MINUS, PLUS)
    position = jnp.arange(_INT_WIDTH) - sign_length  # index among the digits
    power = jnp.clip(num_digits - 1 - position, 0, _INT_WIDTH - 2)
    digits = DIGIT0 + (magnitude // (10 ** power)) % 10
    tokens = jnp.where(position < 0, sign_token, digits)
    return tokens.astype(jnp.int32), sign_length + num_digits


def _char(token: int, include: bool | Array = True) -> tuple[Array, Array]:
    """One token as a piece of length 1 (0 when not ``include``)."""
    return jnp.full((1,), token, jnp.int32), jnp.asarray(include, jnp.int32)


def _concatenate(pieces: Sequence[tuple[Array, Array]]) -> tuple[Array, Array]:
    """Pieces ``(tokens [w_i], length_i)`` placed one after another: ``(tokens [sum w_i],
    total length)``, PAD after the total length."""
    width = sum(tokens.shape[0] for tokens, _ in pieces)
    position = jnp.arange(width)
    out = jnp.full((width,), PAD_ID, jnp.int32)
    offset = jnp.int32(0)
    for tokens, length in pieces:
        index = position - offset
        inside = (index >= 0) & (index < length)
        out = jnp.where(inside, tokens[jnp.clip(index, 0, tokens.shape[0] - 1)], out)
        offset = offset + length
    return out, offset


def _render_one(level: Array, operands: Array, answer: Array
                ) -> tuple[Array, Array, Array, Array]:
    """One problem's ``(prompt buffer, prompt length, solution buffer, solution length)``;
    the prompt buffer starts with BOS and the solution buffer ends with EOS."""
    is_equation = level == EQUATION_LEVEL
    a, second, third = operands[0], operands[1], operands[2]
    show_coefficient = ~is_equation | (a != 1)
    op_token = jnp.asarray([PLUS, MINUS, TIMES], jnp.int32)[jnp.clip(third, 0, 2)]
    prompt = _concatenate([
        _char(BOS_ID),
        _masked(_render_int(a), show_coefficient),
        _char(jnp.where(is_equation, X, op_token)),
        _render_int(jnp.where(is_equation, third, second), force_sign=is_equation),
        _char(EQUALS),
        _masked(_render_int(a * second + third), is_equation),
        _char(SEMICOLON, is_equation),
    ])
    first_step = is_equation & (a != 1)
    solution = _concatenate([
        _masked(_render_int(a), first_step),
        _char(X, first_step),
        _char(EQUALS, first_step),
        _masked(_render_int(a * second), first_step),
        _char(SEMICOLON, first_step),
        _char(X, is_equation),
        _char(EQUALS, is_equation),
        _render_int(answer),
        _char(EOS_ID),
    ])
    return (*prompt, *solution)


def _masked(piece: tuple[Array, Array], include: Array) -> tuple[Array, Array]:
    tokens, length = piece
    return tokens, jnp.where(include, length, 0)


def _left_pad(buffer: Array, length: Array, width: int) -> tuple[Array, Array]:
    """The first ``length`` tokens of ``buffer`` right-aligned in ``width`` columns."""
    index = jnp.arange(width) - (width - length)
    inside = index >= 0
    tokens = jnp.where(inside, buffer[jnp.clip(index, 0, buffer.shape[0] - 1)], PAD_ID)
    return tokens.astype(jnp.int32), inside.astype(jnp.int32)


def _right_pad(buffer: Array, length: Array, width: int) -> tuple[Array, Array]:
    """The first ``length`` tokens of ``buffer`` left-aligned in ``width`` columns."""
    index = jnp.arange(width)
    inside = index < length
    tokens = jnp.where(inside, buffer[jnp.clip(index, 0, buffer.shape[0] - 1)], PAD_ID)
    return tokens.astype(jnp.int32), inside.astype(jnp.int32)


# --------------------------------------------------------------------------------------
# The reward program: a state machine scanned over the completion's tokens.
# --------------------------------------------------------------------------------------

# Term automaton phases (equations).
_SIDE_START, _AFTER_SIGN, _IN_DIGITS, _AFTER_X = 0, 1, 2, 3
# Answer-form automaton phases: equation steps start at _NEED_X, arithmetic at _INT_START.
_NEED_X, _NEED_EQUALS, _INT_START, _AFTER_MINUS, _ZERO, _DIGITS, _FAILED = range(7)


class _ScanState(NamedTuple):
    active: Array  # bool: still reading (no EOS yet, mask still 1)
    terminated: Array  # bool: an EOS ended the text
    num_chars: Array  # int32 characters read (';' included)
    num_separators: Array  # int32 ';' read (equations)
    phase: Array  # int32 term automaton phase
    side: Array  # int32 0 lhs, 1 rhs
    num_equals: Array  # int32 '=' in this step
    sign: Array  # int32 +-1 of the current term
    num_digits: Array  # int32 digits of the current term's coefficient
    coefficient: Array  # int32 the current term's coefficient
    slope: Array  # int32 A of this step so far
    offset: Array  # int32 B of this step so far
    step_error: Array  # bool: this step is malformed
    any_step_error: Array  # bool: some closed step was malformed
    num_closed: Array  # int32 steps closed (by ';' or EOS)
    num_good: Array  # int32 steps valid and keeping the solution set
    step_correct: Array  # float32 [S]
    form_phase: Array  # int32 answer-form automaton phase
    form_negative: Array  # bool
    form_digits: Array  # int32
    form_value: Array  # int32 magnitude
    last_valid: Array  # bool: the last closed step parsed
    last_form: Array  # bool: the last closed step (or the text) has the answer form
    last_value: Array  # int32 its integer


def _scan_completion(tokens: Array, mask: Array, is_equation: Array, answer: Array,
                     max_steps: int) -> _ScanState:
    """Run the reward state machine over one completion ``tokens [T]``, ``mask [T]``."""
    zero, false = jnp.int32(0), jnp.bool_(False)
    form_start = jnp.where(is_equation, _NEED_X, _INT_START).astype(jnp.int32)
    init = _ScanState(
        active=jnp.bool_(True), terminated=false, num_chars=zero, num_separators=zero,
        phase=zero, side=zero, num_equals=zero, sign=jnp.int32(1), num_digits=zero,
        coefficient=zero, slope=zero, offset=zero, step_error=false, any_step_error=false,
        num_closed=zero, num_good=zero, step_correct=jnp.zeros(max_steps, jnp.float32),
        form_phase=form_start, form_negative=false, form_digits=zero, form_value=zero,
        last_valid=false, last_form=false, last_value=zero)

    def transition(s: _ScanState, inputs: tuple[Array, Array]):
        token, keep = inputs
        live = s.active & (keep != 0)
        is_eos = live & (token == EOS_ID)
        is_char = live & (token != EOS_ID)
        is_digit = (token >= DIGIT0) & (token <= DIGIT0 + 9)
        digit = token - DIGIT0
        is_x, is_equals = token == X, token == EQUALS
        is_sign = (token == PLUS) | (token == MINUS)
        separator = is_char & is_equation & (token == SEMICOLON)
        closes_step = is_eos | separator
        text_char = is_char & ~separator  # a character inside a step

        # Term automaton: the value of the term that a sign, '=' or step end closes.
        phase = s.phase
        in_term = (phase == _IN_DIGITS) | (phase == _AFTER_X)
        term = s.sign * jnp.where(s.num_digits > 0, s.coefficient, 1)
        side_sign = jnp.where(s.side == 0, 1, -1)
        slope = s.slope + jnp.where(in_term & (phase == _AFTER_X), side_sign * term, 0)
        offset = s.offset - jnp.where(in_term & (phase == _IN_DIGITS), side_sign * term, 0)

        digit_ok = is_digit & ((phase <= _AFTER_SIGN) | (
            (phase == _IN_DIGITS) & (s.num_digits < _MAX_COEF_DIGITS)))
        x_ok = is_x & (phase <= _IN_DIGITS)
        sign_ok = is_sign & (phase != _AFTER_SIGN)
        equals_ok = is_equals & in_term & (s.num_equals == 0)
        char_ok = digit_ok | x_ok | sign_ok | equals_ok
        moves = text_char & char_ok
        closes_term = moves & (sign_ok | equals_ok) & in_term
        new_phase = jnp.select(
            [digit_ok, x_ok, sign_ok], [_IN_DIGITS, _AFTER_X, _AFTER_SIGN], _SIDE_START)
        continues = phase == _IN_DIGITS
        new_digits = jnp.select(
            [digit_ok, x_ok], [jnp.where(continues, s.num_digits + 1, 1),
                               jnp.where(continues, s.num_digits, 0)], 0)
        new_coefficient = jnp.select(
            [digit_ok, x_ok], [jnp.where(continues, 10 * s.coefficient + digit, digit),
                               jnp.where(continues, s.coefficient, 0)], 0)
        new_sign = jnp.select([sign_ok & (token == MINUS), digit_ok | x_ok],
                              [-1, s.sign], 1)

        stepped = s._replace(
            phase=jnp.where(moves, new_phase, phase),
            side=jnp.where(moves & equals_ok, 1, s.side),
            num_equals=s.num_equals + (moves & equals_ok),
            sign=jnp.where(moves, new_sign, s.sign),
            num_digits=jnp.where(moves, new_digits, s.num_digits),
            coefficient=jnp.where(moves, new_coefficient, s.coefficient),
            slope=jnp.where(closes_term, slope, s.slope),
            offset=jnp.where(closes_term, offset, s.offset),
            step_error=s.step_error | (text_char & ~char_ok),
        )

        # Answer-form automaton: "x=" (equations) then an integer without leading zeros.
        form_phase = s.form_phase
        nonzero = is_digit & (digit > 0)
        new_form = jnp.select(
            [form_phase == _NEED_X, form_phase == _NEED_EQUALS, form_phase == _INT_START,
             form_phase == _AFTER_MINUS, form_phase == _DIGITS],
            [jnp.where(is_x, _NEED_EQUALS, _FAILED),
             jnp.where(is_equals, _INT_START, _FAILED),
             jnp.select([token == MINUS, is_digit & ~nonzero, nonzero],
                        [_AFTER_MINUS, _ZERO, _DIGITS], _FAILED),
             jnp.where(nonzero, _DIGITS, _FAILED),
             jnp.where(is_digit, _DIGITS, _FAILED)],
            _FAILED)
        first_digit = (form_phase == _INT_START) | (form_phase == _AFTER_MINUS)
        more_digits = (form_phase == _DIGITS) & is_digit
        stepped = stepped._replace(
            form_phase=jnp.where(text_char, new_form, form_phase),
            form_negative=s.form_negative | (text_char & (form_phase == _INT_START)
                                             & (token == MINUS)),
            form_digits=jnp.where(text_char & first_digit & is_digit, 1,
                                  s.form_digits + (text_char & more_digits)),
            form_value=jnp.select(
                [text_char & first_digit & is_digit,
                 text_char & more_digits & (s.form_digits < _MAX_INT_DIGITS)],
                [digit, 10 * s.form_value + digit], s.form_value),
            num_chars=s.num_chars + is_char,
            num_separators=s.num_separators + separator,
        )

        # Step end (';' or EOS): verdict on the step, then a fresh step.
        valid = in_term & (s.num_equals == 1) & ~s.step_error
        keeps = valid & (slope != 0) & (slope * answer == offset)
        form = (((form_phase == _ZERO) | (form_phase == _DIGITS))
                & (s.form_digits <= _MAX_INT_DIGITS))
        value = jnp.where(s.form_negative, -s.form_value, s.form_value)
        record = closes_step & (jnp.arange(max_steps) == s.num_closed)
        closed = _ScanState(
            active=s.active & ~is_eos, terminated=s.terminated | is_eos,
            num_chars=stepped.num_chars, num_separators=stepped.num_separators,
            phase=zero, side=zero, num_equals=zero, sign=jnp.int32(1), num_digits=zero,
            coefficient=zero, slope=zero, offset=zero, step_error=false,
            any_step_error=s.any_step_error | ~valid, num_closed=s.num_closed + 1,
            num_good=s.num_good + keeps,
            step_correct=jnp.where(record, keeps.astype(jnp.float32), s.step_correct),
            form_phase=form_start, form_negative=false, form_digits=zero, form_value=zero,
            last_valid=valid, last_form=form, last_value=value)
        stepped = stepped._replace(active=s.active & (keep != 0))
        new = jax.tree.map(lambda c, o: jnp.where(closes_step, c, o), closed, stepped)
        return new, None

    final, _ = jax.lax.scan(transition, init, (tokens, mask))
    return final


def _verify_one(tokens: Array, mask: Array, level: Array, answer: Array, max_steps: int):
    """One completion's ``(accuracy, format, process, step_correct [S], num_steps)``."""
    is_equation = level == EQUATION_LEVEL
    s = _scan_completion(tokens, mask, is_equation, answer, max_steps)
    terminated = s.terminated
    # Arithmetic: the whole text is one integer.
    arithmetic_format = terminated & s.last_form
    arithmetic_accuracy = arithmetic_format & (s.last_value == answer)
    # Equations.
    num_steps = s.num_separators + (s.num_chars > 0)
    equation_format = (terminated & ~s.any_step_error & (num_steps <= max_steps)
                       & s.last_valid & s.last_form)
    equation_accuracy = equation_format & (s.last_value == answer)
    equation_process = jnp.where(
        terminated, s.num_good / jnp.maximum(num_steps, 1), 0.0).astype(jnp.float32)

    accuracy = jnp.where(is_equation, equation_accuracy, arithmetic_accuracy)
    form = jnp.where(is_equation, equation_format, arithmetic_format)
    process = jnp.where(is_equation, equation_process, arithmetic_accuracy)
    first = jnp.arange(max_steps) == 0
    step_correct = jnp.where(
        is_equation, s.step_correct * terminated,
        jnp.where(first, arithmetic_accuracy, False).astype(jnp.float32))
    return (accuracy.astype(jnp.float32), form.astype(jnp.float32),
            process.astype(jnp.float32), step_correct.astype(jnp.float32),
            jnp.where(is_equation, num_steps, 1).astype(jnp.int32))


# --------------------------------------------------------------------------------------
# The train / eval split: a fixed hash of each problem.
# --------------------------------------------------------------------------------------

SPLITS = ("train", "eval", "all")
"""``ArithmeticTask.sample``'s ``split``: the training side, the held-out side, or every
problem (the draw of rljax <= 0.x, without any exclusion)."""
MIN_SPLIT_PROBLEMS = 1000
"""Default ``ArithmeticTask.min_split_problems``: a level with fewer distinct problems is
not split (at the default ``eval_fraction`` 0.2 its eval side would hold under 200
problems, a handful of near-duplicates of the training side such as ``3+4`` / ``4+3``)."""

_SPANS = tuple(tuple(high - low + 1 for low, high in (f, s, t))
               for f, s, t in zip(_FIRST_RANGE, _SECOND_RANGE, _THIRD_RANGE, strict=True))
LEVEL_SIZES = tuple(f * s * t for f, s, t in _SPANS)
"""Distinct problems per level: 100, 20 000, 2 000 000, 784, 3 078."""

_HASH_LEVEL = 0x9E3779B9  # 2^32 / golden ratio: spreads the level over the word
_HASH_MUL1, _HASH_MUL2 = 0x85EBCA6B, 0xC2B2AE35  # MurmurHash3's fmix32 constants
_MISS_PROBABILITY = 1e-9  # chance that all of a draw's candidates fall on the wrong side


def _eval_threshold(eval_fraction: float) -> int:
    """Hashes below this uint32 value are on the eval side."""
    return min(int(round(eval_fraction * 2.0**32)), 2**32 - 1)


def problem_index(level: Array, operands: Array) -> Array:
    """A problem's index among its level's ``LEVEL_SIZES[level]`` problems (jnp).

    ``index = ((a - a_low) * span_2 + (second - second_low)) * span_3 + third_index``,
    where ``third_index`` is ``op - op_low`` on arithmetic levels and, on equations, the
    position of ``b`` in ``-9..-1, 1..9``.

    Args:
      level: int32 ``[...]`` level indices.
      operands: int32 ``[..., 3]`` as in :class:`Problems`.

    Returns:
      int32 ``[...]`` in ``0 .. LEVEL_SIZES[level] - 1``.
    """
    level = jnp.asarray(level, jnp.int32)
    operands = jnp.asarray(operands, jnp.int32)
    lows = jnp.asarray([[r[0] for r in _FIRST_RANGE], [r[0] for r in _SECOND_RANGE],
                        [r[0] for r in _THIRD_RANGE]], jnp.int32)[:, level]
    spans = jnp.asarray(_SPANS, jnp.int32)[level]
    a, second, third = operands[..., 0], operands[..., 1], operands[..., 2]
    equation_third = jnp.where(third < 0, third + 9, third + 8)
    third_index = jnp.where(level == EQUATION_LEVEL, equation_third, third - lows[2])
    return (((a - lows[0]) * spans[..., 1] + (second - lows[1])) * spans[..., 2]
            + third_index).astype(jnp.int32)


def problem_hash(level: Array, index: Array) -> Array:
    """A fixed 32-bit hash of ``(level, index)`` (jnp; runs under jit and vmap).

    ``h = fmix32((index * 8 + level) ^ (level * 0x9E3779B9))`` in uint32 arithmetic, with
    MurmurHash3's finaliser ``fmix32(h)``: ``h ^= h >> 16; h *= 0x85EBCA6B; h ^= h >> 13;
    h *= 0xC2B2AE35; h ^= h >> 16`` (Appleby, MurmurHash3, public domain). Its numpy twin
    is :func:`problem_hash_numpy`.

    Args:
      level: int ``[...]`` level indices.
      index: int ``[...]`` from :func:`problem_index`.

    Returns:
      uint32 ``[...]``.
    """
    level = jnp.asarray(level).astype(jnp.uint32)
    h = (jnp.asarray(index).astype(jnp.uint32) * jnp.uint32(8) + level) ^ (
        level * jnp.uint32(_HASH_LEVEL))
    h = h ^ (h >> 16)
    h = h * jnp.uint32(_HASH_MUL1)
    h = h ^ (h >> 13)
    h = h * jnp.uint32(_HASH_MUL2)
    return h ^ (h >> 16)


def problem_hash_numpy(level, index) -> np.ndarray:
    """The numpy twin of :func:`problem_hash` (same formula, uint32 wrap-around)."""
    level = np.asarray(level).astype(np.uint32)
    h = (np.asarray(index).astype(np.uint32) * np.uint32(8) + level) ^ (
        level * np.uint32(_HASH_LEVEL))
    h = h ^ (h >> np.uint32(16))
    h = h * np.uint32(_HASH_MUL1)
    h = h ^ (h >> np.uint32(13))
    h = h * np.uint32(_HASH_MUL2)
    return (h ^ (h >> np.uint32(16))).astype(np.uint32)


def all_problems(level: int) -> np.ndarray:
    """Every problem of ``level`` (numpy): int32 ``[LEVEL_SIZES[level], 3]`` operands in
    index order (row ``i`` has :func:`problem_index` ``i``)."""
    _check_level(level)
    axes = [np.arange(low, high + 1) for low, high in
            (_FIRST_RANGE[level], _SECOND_RANGE[level], _THIRD_RANGE[level])]
    a, second, third = (g.reshape(-1) for g in np.meshgrid(*axes, indexing="ij"))
    if level == EQUATION_LEVEL:
        third = third - 9 + (third >= 9)  # 0..17 -> -9..-1, 1..9
    return np.stack([a, second, third], axis=1).astype(np.int32)


def eval_split_mask_numpy(level: int, eval_fraction: float = 0.2) -> np.ndarray:
    """bool ``[LEVEL_SIZES[level]]``: which of the level's problems (index order) hash to
    the eval side, whether or not the level is large enough to be split."""
    _check_level(level)
    hashes = problem_hash_numpy(np.full(LEVEL_SIZES[level], level), np.arange(
        LEVEL_SIZES[level]))
    return hashes < np.uint32(_eval_threshold(eval_fraction))


def _num_candidates(reject_probability: float) -> int:
    """Candidates K so that all K land on the wrong side with probability <= 1e-9."""
    if reject_probability <= 0.0:
        return 1
    return max(1, math.ceil(math.log(_MISS_PROBABILITY) / math.log(reject_probability)))


@functools.lru_cache(maxsize=64)
def _first_on_side(level: int, eval_fraction: float, eval_side: bool) -> tuple[int, ...]:
    """The operands of the level's lowest-index problem on the given side (numpy; the
    fallback of a draw whose candidates all missed), or None if that side is empty."""
    threshold = np.uint32(_eval_threshold(eval_fraction))
    size = LEVEL_SIZES[level]
    for stop in (min(size, 4096), size):
        hashes = problem_hash_numpy(np.full(stop, level), np.arange(stop))
        hits = np.flatnonzero((hashes < threshold) == eval_side)
        if hits.size:
            return tuple(int(v) for v in all_problems(level)[hits[0]])
    return None


# --------------------------------------------------------------------------------------
# The task.
# --------------------------------------------------------------------------------------


def check_eval_fraction(fraction: Any) -> None:
    """A task's held-out share: a number in ``[0.01, 0.99]`` (one-line ``ValueError``
    naming ``eval_fraction`` otherwise)."""
    if (not isinstance(fraction, int | float) or isinstance(fraction, bool)
            or not 0.01 <= fraction <= 0.99):
        raise ValueError(f"eval_fraction: must be a number in [0.01, 0.99], got "
                         f"{fraction!r}")


def _is_int(value) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


@dataclass(frozen=True)
class ArithmeticTask:
    """Verifiable arithmetic: sample problems, score completions (module docstring).

    Shapes: :meth:`sample` gives :class:`Problems` with int32 prompts ``[N, Lp]`` and
    solutions ``[N, Ls]``; :meth:`rewards` scores completions ``[N, T]`` into
    :class:`Rewards` of float32 ``[N]`` (and ``step_correct [N, S]``).

    Attributes:
      levels: the levels to draw from, uniformly over the tuple's entries (a repeated
        level is drawn proportionally more often).
      prompt_length: Lp, prompt tokens including BOS; at least the widest prompt of the
        chosen levels (``WIDEST_PROMPT_TOKENS``).
      solution_length: Ls, solution tokens including EOS; at least the widest solution of
        the chosen levels (``WIDEST_SOLUTION_TOKENS``).
      max_steps: S, the most ``;``-separated steps an equation completion may write (and
        the width of ``Rewards.step_correct``); at least 2 when level 4 is drawn.
      eval_fraction: the share of each split level's problems held out for evaluation,
        in [0.01, 0.99]: problem ``p`` of level ``l`` is on the eval side iff
        ``problem_hash(l, problem_index(p)) < eval_fraction * 2^32``
        (:func:`problem_hash`), a fixed function of the problem, the same for every key,
        seed and run.
      min_split_problems: levels with fewer distinct problems (``LEVEL_SIZES``) are not
        split: every problem of such a level is a training problem, and an ``"eval"``
        draw of it is *training* accuracy (:meth:`is_held_out` is False there; with the
        defaults, levels 0 (100 problems) and 3 (784) are not split).

    Split. ``sample(..., split="train")`` (the default, used by the trainers) never
    returns an eval-side problem; ``split="eval"`` returns only eval-side problems of
    split levels (and any problem of an unsplit level); ``split="all"`` ignores the split.
    """

    levels: tuple[int, ...] = (0, 1)
    prompt_length: int = 12
    solution_length: int = 12
    max_steps: int = 4
    eval_fraction: float = 0.2
    min_split_problems: int = MIN_SPLIT_PROBLEMS

    def validate(self) -> None:
        """Raise a one-line ``ValueError`` naming the first bad field."""
        levels = self.levels
        if not isinstance(levels, tuple) or not levels:
            raise ValueError(f"levels: must be a non-empty tuple of level indices, got "
                             f"{levels!r}")
        for level in levels:
            if not _is_int(level) or not 0 <= level < NUM_LEVELS:
                raise ValueError(f"levels: each must be an integer in 0..{NUM_LEVELS - 1}, "
                                 f"got {level!r} in {levels!r}")
        for name, widest in (("prompt_length", WIDEST_PROMPT_TOKENS),
                             ("solution_length", WIDEST_SOLUTION_TOKENS)):
            value = getattr(self, name)
            need = max(widest[level] for level in levels)
            if not _is_int(value) or value < need:
                raise ValueError(f"{name}: must be an integer >= {need} (the widest of levels "
                                 f"{levels}), got {value!r}")
        need_steps = 2 if EQUATION_LEVEL in levels else 1
        if not _is_int(self.max_steps) or self.max_steps < need_steps:
            raise ValueError(f"max_steps: must be an integer >= {need_steps} for levels "
                             f"{levels}, got {self.max_steps!r}")
        fraction = self.eval_fraction
        check_eval_fraction(fraction)
        if not _is_int(self.min_split_problems) or self.min_split_problems < 1:
            raise ValueError(f"min_split_problems: must be an integer >= 1, got "
                             f"{self.min_split_problems!r}")
        for level in range(NUM_LEVELS):
            if self.is_split(level) and None in (
                    _first_on_side(level, float(fraction), True),
                    _first_on_side(level, float(fraction), False)):
                raise ValueError(f"eval_fraction: {fraction!r} leaves one side of level "
                                 f"{level}'s split empty")

    # -- the split ---------------------------------------------------------------------
    def is_split(self, level: int) -> bool:
        """Whether ``level`` (a Python int) has a held-out side: ``LEVEL_SIZES[level] >=
        min_split_problems``."""
        _check_level(level)
        return LEVEL_SIZES[level] >= self.min_split_problems

    @property
    def held_out_levels(self) -> tuple[int, ...]:
        """The entries of ``levels`` that are split (their eval draws are held out)."""
        return tuple(level for level in self.levels if self.is_split(level))

    @property
    def training_only_levels(self) -> tuple[int, ...]:
        """The entries of ``levels`` too small to split (their eval draws are training
        problems: report their accuracy as training accuracy)."""
        return tuple(level for level in self.levels if not self.is_split(level))

    def split_size(self, level: int, split: str) -> int:
        """Distinct problems of ``level`` that ``sample(..., split=split)`` can return
        (numpy count over the whole level)."""
        if split not in SPLITS:
            raise ValueError(f"split: must be one of {SPLITS}, got {split!r}")
        if split == "all" or not self.is_split(level):
            return LEVEL_SIZES[level]
        in_eval = int(eval_split_mask_numpy(level, self.eval_fraction).sum())
        return in_eval if split == "eval" else LEVEL_SIZES[level] - in_eval

    def is_held_out(self, problems: Problems) -> Array:
        """bool ``[N]``: the problem is on the eval side of a split level (traceable).

        False for every problem of a level that is not split, even when it came from an
        ``"eval"`` draw."""
        return self._in_eval_side(problems.level, problems.operands)

    def _in_eval_side(self, level: Array, operands: Array) -> Array:
        split = jnp.asarray([self.is_split(lv) for lv in range(NUM_LEVELS)])
        hashed = problem_hash(level, problem_index(level, operands))
        return split[level] & (hashed < jnp.uint32(_eval_threshold(self.eval_fraction)))

    def sample(self, key: PRNGKey, num: int, level: Array | None = None,
               split: str = "train") -> Problems:
        """Draw ``num`` problems from one side of the split (class docstring).

        All randomness is one ``jax.random.bits`` call of shape ``[num, 1 + 3 K]``: a
        level word, then ``K`` candidate problems (three operand words each, reduced
        modulo their ranges: bias below ``1000 / 2^32``). The draw is the first candidate
        on the requested side (rejection sampling without a loop: branch-free and
        key-deterministic); ``K`` is the smallest count for which all ``K`` miss with
        probability <= 1e-9 (K = 13 for ``"train"``, 93 for ``"eval"`` at
        ``eval_fraction`` 0.2), and in that event the level's lowest-index problem of the
        side is taken, so a ``"train"`` draw is *never* an eval problem. Levels that
        are not split accept every candidate; ``K = 1`` for ``"all"`` or when no
        drawable level is split (then the draw equals the unsplit one).

        Args:
          key: a typed PRNG key.
          num: N (static).
          level: None to draw levels uniformly from ``self.levels``, or int32 ``[N]``
            levels (clipped to 0..4; their prompts and solutions must fit the lengths,
            which :meth:`validate` checks only for ``self.levels``).
          split: ``"train"``, ``"eval"`` or ``"all"`` (``SPLITS``).

        Returns:
          :class:`Problems` with leading axis N.
        """
        self.validate()
        if not _is_int(num) or num < 1:
            raise ValueError(f"num: must be an integer >= 1, got {num!r}")
        if split not in SPLITS:
            raise ValueError(f"split: must be one of {SPLITS}, got {split!r}")
        drawable = self.levels if level is None else range(NUM_LEVELS)
        if split == "all" or not any(self.is_split(lv) for lv in drawable):
            k = 1
        else:
            k = _num_candidates(self.eval_fraction if split == "train"
                                else 1.0 - self.eval_fraction)
        words = jax.random.bits(key, (num, 1 + 3 * k), jnp.uint32)
        if level is None:
            choices = jnp.asarray(self.levels, jnp.int32)
            level = choices[(words[:, 0] % len(self.levels)).astype(jnp.int32)]
        else:
            level = jnp.asarray(level, jnp.int32)
            chex.assert_shape(level, (num,))
            level = jnp.clip(level, 0, NUM_LEVELS - 1)
        ranges = jnp.asarray([_FIRST_RANGE, _SECOND_RANGE, _THIRD_RANGE], jnp.int32)
        low, high = ranges[:, level, 0].T, ranges[:, level, 1].T  # [N, 3]
        span = (high - low + 1).astype(jnp.uint32)
        candidate_words = words[:, 1:].reshape(num, k, 3)
        draws = (candidate_words % span[:, None]).astype(jnp.int32) + low[:, None]
        is_equation = level == EQUATION_LEVEL
        nonzero_b = draws[..., 2] - 9 + (draws[..., 2] >= 9)  # 0..17 -> -9..-1, 1..9
        candidates = jnp.stack([draws[..., 0], draws[..., 1], jnp.where(
            is_equation[:, None], nonzero_b, draws[..., 2])], axis=-1)  # [N, K, 3]
        if k == 1:
            operands = candidates[:, 0]
        else:
            in_eval = self._in_eval_side(jnp.broadcast_to(level[:, None], (num, k)),
                                         candidates)
            unsplit = ~jnp.asarray([self.is_split(lv) for lv in range(NUM_LEVELS)])[level]
            wanted = (in_eval if split == "eval" else ~in_eval) | unsplit[:, None]
            first = jnp.argmax(wanted, axis=1)
            chosen = jnp.take_along_axis(candidates, first[:, None, None], axis=1)[:, 0]
            fallback = jnp.asarray([
                _first_on_side(lv, float(self.eval_fraction), split == "eval")
                if self.is_split(lv) else (0, 0, 0) for lv in range(NUM_LEVELS)],
                jnp.int32)[level]
            operands = jnp.where(jnp.any(wanted, axis=1)[:, None], chosen, fallback)
        operands = operands.astype(jnp.int32)
        a, second, third = operands[:, 0], operands[:, 1], operands[:, 2]
        result = jnp.select([third == 0, third == 1], [a + second, a - second], a * second)
        answer = jnp.where(is_equation, second, result).astype(jnp.int32)

        prompt_buffer, prompt_length, solution_buffer, solution_length = jax.vmap(
            _render_one)(level, operands, answer)
        prompt, prompt_mask = jax.vmap(
            lambda b, n: _left_pad(b, n, self.prompt_length))(prompt_buffer, prompt_length)
        solution, solution_mask = jax.vmap(
            lambda b, n: _right_pad(b, n, self.solution_length))(solution_buffer,
                                                                 solution_length)
        return Problems(prompt=prompt, prompt_mask=prompt_mask, level=level,
                        operands=operands, answer=answer, solution=solution,
                        solution_mask=solution_mask)

    def rewards(self, problems: Problems, completion: Array, completion_mask: Array
                ) -> Rewards:
        """Score completions by program (definitions in the module docstring).

        Args:
          problems: the N problems (only ``level`` and ``answer`` are read).
          completion: int32 ``[N, T]`` tokens ``[chars, EOS]``, anything after the EOS.
          completion_mask: ``[N, T]`` (int or bool), 1 on generated tokens; a 0 before
            any EOS ends the completion unterminated.

        Returns:
          :class:`Rewards` with leading axis N and ``step_correct [N, S]``.
        """
        self.validate()
        chex.assert_rank([completion, completion_mask], 2)
        chex.assert_equal_shape([completion, completion_mask])
        chex.assert_shape([problems.level, problems.answer], (completion.shape[0],))
        accuracy, form, process, step_correct, num_steps = jax.vmap(
            lambda t, m, lv, ans: _verify_one(t, m, lv, ans, self.max_steps))(
                jnp.asarray(completion, jnp.int32), jnp.asarray(completion_mask, jnp.int32),
                problems.level, problems.answer)
        return Rewards(accuracy=accuracy, format=form, process=process,
                       step_correct=step_correct, num_steps=num_steps)

    def combined_reward(self, rewards: Rewards, weights: dict[str, float | Array]) -> Array:
        """``r = sum_k w_k * rewards.k`` over ``k`` in ``weights`` (keys among
        ``"accuracy"``, ``"format"``, ``"process"``; missing keys weigh 0).

        Args:
          rewards: from :meth:`rewards`.
          weights: name -> weight (a float, or a scalar array so sweeps can vmap it).

        Returns:
          float32 ``[N]``.
        """
        return weighted_reward(rewards, weights)


def weighted_reward(rewards: Rewards, weights: dict[str, float | Array]) -> Array:
    """``r = sum_k w_k * rewards.k`` over ``k`` in ``weights`` (keys among
    :data:`REWARD_KEYS`; a weight is a float or a scalar array): float32 ``[N]``, the
    ``combined_reward`` of every task that scores with :class:`Rewards`.

    Raises:
      ValueError: one line naming an unknown reward key.
    """
    for name in weights:
        if name not in REWARD_KEYS:
            raise ValueError(f"weights: unknown reward {name!r}; allowed: {REWARD_KEYS}")
    total = jnp.zeros_like(rewards.accuracy)
    for name, weight in weights.items():
        total = total + jnp.asarray(weight, jnp.float32) * getattr(rewards, name)
    return total.astype(jnp.float32)


def parse_levels(levels: str) -> tuple[int, ...]:
    """Levels written as text, e.g. a study's ``--set levels=0,1``: ``"0,1"`` -> ``(0, 1)``
    (Python ints; empty entries are skipped, the range is :meth:`ArithmeticTask.validate`'s
    to check); a one-line :class:`~rljax.config.ConfigError` naming ``levels`` otherwise."""
    try:
        return tuple(int(v) for v in levels.split(",") if v.strip())
    except ValueError:
        raise ConfigError(f"levels: must be comma-separated integers in 0..{NUM_LEVELS - 1}, "
                          f"got {levels!r}") from None


__all__ = [
    "LEVEL_NAMES",
    "LEVEL_SIZES",
    "MIN_SPLIT_PROBLEMS",
    "NUM_LEVELS",
    "REWARD_KEYS",
    "SPLITS",
    "WIDEST_PROMPT_TOKENS",
    "WIDEST_SOLUTION_TOKENS",
    "ArithmeticTask",
    "Problems",
    "Rewards",
    "all_problems",
    "completion_text",
    "eval_split_mask_numpy",
    "parse_levels",
    "problem_answer",
    "problem_hash",
    "problem_hash_numpy",
    "problem_index",
    "reference_rewards",
    "render_problem",
]
