"""The LM trainer's configs: composed pieces of at most 30 fields, each field declared
once (with the docs' tables rendered from the declarations), studies that extend them
without re-declaring a field, and the task as an argument."""

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path

import jax
import numpy as np
import pytest

from rljax.config import ConfigError, declared_fields, fields_markdown, with_defaults
from rljax.envs.arithmetic import ArithmeticTask, parse_levels
from rljax.training.lm import LMTrainConfig, arithmetic_task, make_lm_trainer
from rljax.training.lm_config import (
    LMArchitectureConfig,
    LMDecoderConfig,
    LMGRPOConfig,
    LMPPOConfig,
    config_from,
)

CONFIGS = (LMTrainConfig, LMGRPOConfig, LMPPOConfig, LMDecoderConfig, LMArchitectureConfig)
DOCS = Path(__file__).resolve().parents[1] / "docs" / "lm.md"
TABLES = (LMTrainConfig, LMGRPOConfig, LMPPOConfig, LMDecoderConfig)


@pytest.mark.parametrize("cls", CONFIGS, ids=lambda c: c.__name__)
def test_each_config_is_small_and_every_field_is_declared_once(cls):
    fields = dataclasses.fields(cls)
    assert len(fields) <= 30, f"{cls.__name__} has {len(fields)} fields"
    assert [f.name for f in declared_fields(cls)] == [f.name for f in fields]
    cls().validate()  # the defaults are valid


@pytest.mark.parametrize("cls", CONFIGS, ids=lambda c: c.__name__)
def test_fields_markdown_renders_a_row_per_field(cls):
    rows = fields_markdown(cls).splitlines()
    names = [f.name for f in dataclasses.fields(cls)]
    assert rows[:2] == ["| field | type | default | kind | allowed | what it sets |",
                        "|---|---|---|---|---|---|"]
    assert len(rows) == 2 + len(names)
    for row, name in zip(rows[2:], names, strict=True):
        assert row.startswith(f"| `{name}` | ")


@pytest.mark.parametrize("cls", TABLES, ids=lambda c: c.__name__)
def test_docs_tables_are_the_declarations(cls):
    """docs/lm.md pastes each config's table: a field added, renamed or re-documented
    without re-pasting ``rljax.config.fields_markdown(cls)`` fails here."""
    text = DOCS.read_text()
    name = f"rljax.training.{cls.__name__}"
    begin, end = f"<!-- fields:{name} -->\n", f"\n<!-- /fields:{name} -->"
    assert text.count(begin) == 1 and text.count(end) == 1, f"docs/lm.md has no {name} table"
    pasted = text[text.index(begin) + len(begin): text.index(end)]
    assert pasted == fields_markdown(cls), (
        f"docs/lm.md's {name} table is stale; run python scripts/render_config_tables.py")


def test_the_pieces_share_no_field():
    pieces = (LMTrainConfig, LMGRPOConfig, LMPPOConfig, LMDecoderConfig)
    seen: dict[str, str] = {}
    for cls in pieces:
        for f in dataclasses.fields(cls):
            assert f.name not in seen, f"{f.name} is in {seen.get(f.name)} and {cls.__name__}"
            seen[f.name] = cls.__name__


@pytest.mark.parametrize("module", ["lm_grpo", "lm_variants"])
def test_studies_extend_the_trainer_configs_without_redeclaring(module):
    """A study's Config declares only its own knobs: every trainer field it has comes,
    declaration and all, from the trainer's config (``with_defaults`` may change a
    default, keeping the declaration)."""
    import importlib

    study = importlib.import_module(f"experiments.{module}")
    trainer_fields = {f.name: f for cls in (LMTrainConfig, LMGRPOConfig, LMDecoderConfig,
                                            LMArchitectureConfig)
                      for f in dataclasses.fields(cls)}
    own = set(vars(study.Config).get("__annotations__", {}))
    assert not own & set(trainer_fields), own & set(trainer_fields)
    for f in dataclasses.fields(study.Config):
        if f.name in trainer_fields:
            assert f.metadata == trainer_fields[f.name].metadata, f.name
    study.Config().validate()


def test_config_from_and_with_defaults_compose():
    Study = with_defaults(LMTrainConfig, eval_prompts=512)

    @dataclass(frozen=True)
    class Flat(Study, LMGRPOConfig, LMArchitectureConfig):
        """A flat config of three pieces (scalars)."""

    flat = Flat(width=32, advantage="leave_one_out",
                architecture="decoder", num_kv_heads=2)
    assert config_from(LMTrainConfig, flat) == LMTrainConfig(width=32, eval_prompts=512)
    assert config_from(LMGRPOConfig, flat) == LMGRPOConfig(advantage="leave_one_out")
    assert flat.decoder() == LMDecoderConfig(num_kv_heads=2)


def test_parse_levels():
    assert parse_levels("0,1") == (0, 1) and parse_levels(" 4 ,") == (4,)
    with pytest.raises(ConfigError, match=r"^levels: must be comma-separated integers in "
                                          r"0\.\.4, got 'a'$"):
        parse_levels("a")


@dataclass(frozen=True)
class WrappedTask:
    """A task that is not an ArithmeticTask: the methods the trainer calls, delegated
    (problems ``[N, Lp]``, rewards ``[N]``)."""

    inner: ArithmeticTask

    @property
    def levels(self):
        return self.inner.levels

    @property
    def prompt_length(self):
        return self.inner.prompt_length

    @property
    def solution_length(self):
        return self.inner.solution_length

    def validate(self):
        self.inner.validate()

    def sample(self, key, num, level=None, split="train"):
        return self.inner.sample(key, num, level=level, split=split)

    def is_held_out(self, problems):
        return self.inner.is_held_out(problems)

    def rewards(self, problems, completion, completion_mask):
        return self.inner.rewards(problems, completion, completion_mask)

    def combined_reward(self, rewards, weights):
        return self.inner.combined_reward(rewards, weights)


def test_the_task_is_an_argument():
    """Any object with the task's methods trains; the default is the arithmetic task of
    levels 0 and 1 with 8 prompt columns; an object without them is a one-line error."""
    config = LMTrainConfig(width=16, num_layers=1, num_heads=2, sft_steps=0,
                           eval_prompts=8, rl_steps=1, steps_per_chunk=1)
    default = make_lm_trainer(config)
    assert default.task == arithmetic_task(config) == ArithmeticTask(
        levels=(0, 1), prompt_length=8, solution_length=5)
    assert default.policy.config.context_length == 8 + 5
    task = arithmetic_task(config, (1,), 9)
    wrapped = make_lm_trainer(config, task=WrappedTask(task))
    assert wrapped.policy.config.context_length == 9 + 5
    ours, theirs = wrapped.eval_problems(), make_lm_trainer(config, task=task).eval_problems()
    for a, b in zip(jax.tree_util.tree_leaves(ours), jax.tree_util.tree_leaves(theirs),
                    strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    with pytest.raises(ConfigError, match=r"^task: object has no 'levels' \(the LM trainer "
                                          r"needs levels, prompt_length, solution_length, "):
        make_lm_trainer(config, task=object())
    with pytest.raises(ValueError, match=r"^max_new_tokens: must be >= the task's "
                                         r"solution_length=6"):
        make_lm_trainer(config, task=dataclasses.replace(task, solution_length=6))
    with pytest.raises(ValueError, match=re.escape("levels: each must be an integer")):
        make_lm_trainer(config, task=arithmetic_task(config, (7,)))
