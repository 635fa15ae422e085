"""Subword tokenizers from ``tokenizer.json`` files, and the small BPE rljax ships.

:class:`HFTokenizer` wraps a ``tokenizers.Tokenizer`` (any Hugging Face ``tokenizer.json``:
Qwen2.5's, Llama's, or one trained here) with rljax's encode / decode and its special ids;
:func:`load_hf_tokenizer` reads one from a directory, with the special tokens and the chat
template of its ``tokenizer_config.json``. It lives below ``envs`` and ``policies`` because
both use it: the text tasks (:mod:`rljax.envs.text_tasks`) tokenize their prompts with it,
the checkpoint code (:mod:`rljax.policies.hf_checkpoint`) saves and checks it.

**The shipped BPE** (:func:`load_bpe_tokenizer`, package data under ``rljax/data/bpe/``):
byte-level BPE of at most :data:`BPE_VOCAB_SIZE` ids (431) trained by :func:`train_bpe` on the text
tasks' generated text (``scripts/train_bpe.py`` regenerates it bitwise), with
Qwen2's pre-tokenizer (digits one by one, a space joined to the word after it) so it
behaves like the tokenizers users point at, only small enough for tests and CPU
studies. Its special tokens are :data:`BPE_SPECIAL_TOKENS`: ``<|pad|>`` 0, ``<|bos|>`` 1,
``<|eos|>`` 2, the ids of :class:`~rljax.tokenizer.CharTokenizer`, so the trainers'
defaults hold.

**Chat templates.** A ``chat_template`` (a Jinja string, as Hugging Face stores it in
``tokenizer_config.json`` or ``chat_template.jinja``) is rendered by
:meth:`HFTokenizer.apply_chat_template` the way ``transformers`` renders it: a sandboxed
Jinja environment with ``trim_blocks`` / ``lstrip_blocks``, ``messages``,
``add_generation_prompt`` and the special tokens' strings (``bos_token``, ``eos_token``,
``pad_token``) as variables, ``raise_exception`` and the ``tojson`` filter.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

TOKENIZER_FILE = "tokenizer.json"
"""The ``tokenizers`` file of a tokenizer directory."""
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
"""Special tokens (``bos_token``, ``eos_token``, ``pad_token``) and ``chat_template``."""
SPECIAL_TOKENS_MAP_FILE = "special_tokens_map.json"
"""Special tokens, read before ``tokenizer_config.json`` (which wins)."""
CHAT_TEMPLATE_FILE = "chat_template.jinja"
"""A chat template in its own file (newer ``transformers`` writes it there)."""

BPE_SPECIAL_TOKENS = ("<|pad|>", "<|bos|>", "<|eos|>")
"""The shipped BPE's special tokens, ids 0, 1, 2 (PAD, BOS, EOS as in
:mod:`rljax.tokenizer`)."""
BPE_VOCAB_SIZE = 512
"""The shipped BPE's id budget: 3 special tokens, 256 bytes, up to 253 merges (it uses 431
ids: on the templated corpus every pair that occurs twice is merged by then)."""
QWEN2_PRETOKENIZE_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+")
"""Qwen2's pre-tokenizer split (each digit alone; a space joins the word after it)."""


def _read_json(path: Path) -> Any:
    if not path.is_file():
        raise FileNotFoundError(f"{path}: missing")
    try:
        with open(path, encoding="utf-8") as file:
            return json.load(file)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{path}: not valid JSON ({error})") from None


class HFTokenizer:
    """A ``tokenizers.Tokenizer`` with rljax's encode / decode and the special-token ids.

    ``encode`` gives int32 ids ``[L]`` (numpy) and adds BOS / EOS only when asked (HF's
    post-processor is not applied, so the layout stays explicit as with
    :class:`~rljax.tokenizer.CharTokenizer`); ``decode`` reads ids of any shape, flattened,
    drops PAD and special tokens and stops at the first EOS.

    Compared and hashed by identity (a task or trainer holding one stays hashable).

    Attributes:
      tokenizer: the wrapped ``tokenizers.Tokenizer``.
      bos_id, eos_id, pad_id: the special-token ids, or None where the files name none.
      chat_template: the Jinja chat template, or None (:meth:`apply_chat_template`).
    """

    def __init__(self, tokenizer: Any, *, bos_id: int | None = None,
                 eos_id: int | None = None, pad_id: int | None = None,
                 chat_template: str | None = None):
        self.tokenizer = tokenizer
        self.bos_id = bos_id
        self.eos_id = eos_id
        self.pad_id = pad_id
        self.chat_template = chat_template

    def __repr__(self) -> str:
        return (f"HFTokenizer(vocab_size={self.vocab_size}, bos_id={self.bos_id}, "
                f"eos_id={self.eos_id}, pad_id={self.pad_id}, "
                f"chat_template={self.chat_template is not None}, "
                f"sha256={self.fingerprint})")

    @property
    def vocab_size(self) -> int:
        """The number of ids, added (special) tokens included: ids lie in ``[0, vocab_size)``."""
        return self.tokenizer.get_vocab_size(with_added_tokens=True)

    @functools.cached_property
    def fingerprint(self) -> str:
        """The first 16 hex digits of the SHA-256 of the tokenizer's JSON, its special ids
        and its chat template: equal fingerprints, the same tokenizer."""
        record = json.dumps([self.tokenizer.to_str(), self.bos_id, self.eos_id, self.pad_id,
                             self.chat_template])
        return hashlib.sha256(record.encode("utf-8")).hexdigest()[:16]

    def token(self, token_id: int | None) -> str | None:
        """The token string of ``token_id`` (None for None)."""
        return None if token_id is None else self.tokenizer.id_to_token(token_id)

    def encode(self, text: str, *, add_bos: bool = False, add_eos: bool = False) -> np.ndarray:
        """``text`` -> int32 ids ``[L]``, with BOS first / EOS last when asked.

        Raises:
          ValueError: the text cannot be encoded, or BOS / EOS is asked for but unknown.
        """
        try:
            ids = list(self.tokenizer.encode(text, add_special_tokens=False).ids)
        except Exception as error:  # tokenizers raises plain Exception
            raise ValueError(f"tokenizer: cannot encode {text!r}: "
                             f"{str(error).splitlines()[0]}") from None
        for wanted, token_id, name in ((add_bos, self.bos_id, "bos"),
                                       (add_eos, self.eos_id, "eos")):
            if wanted and token_id is None:
                raise ValueError(f"tokenizer: add_{name}=True but the tokenizer has no "
                                 f"{name}_token")
        if add_bos:
            ids.insert(0, self.bos_id)
        if add_eos:
            ids.append(self.eos_id)
        return np.asarray(ids, np.int32)

    def decode(self, ids: Sequence[int] | np.ndarray) -> str:
        """Ids (any shape, e.g. ``[L]``, read flattened) -> text, up to the first EOS.

        Raises:
          ValueError: an id outside ``[0, vocab_size)``.
        """
        kept = []
        for token in np.asarray(ids).reshape(-1).tolist():
            if not 0 <= token < self.vocab_size:
                raise ValueError(f"tokenizer: id {token} outside [0, {self.vocab_size})")
            if token == self.eos_id:
                break
            if token not in (self.pad_id, self.bos_id):
                kept.append(token)
        return self.tokenizer.decode(kept, skip_special_tokens=True)

    def apply_chat_template(self, messages: Sequence[Mapping[str, str]], *,
                            add_generation_prompt: bool = True) -> str:
        """Render ``messages`` (``[{"role": "user", "content": text}, ...]``) through the
        chat template, as ``transformers``' ``apply_chat_template(..., tokenize=False)``
        does (module docstring); the text still has to be encoded.

        Raises:
          ValueError: no chat template, or it fails to render (one line).
        """
        if self.chat_template is None:
            raise ValueError("chat_template: the tokenizer has none")
        try:
            return _compiled_template(self.chat_template).render(
                messages=list(messages), add_generation_prompt=add_generation_prompt,
                bos_token=self.token(self.bos_id) or "", eos_token=self.token(self.eos_id) or "",
                pad_token=self.token(self.pad_id) or "")
        except Exception as error:  # jinja2 raises many kinds
            raise ValueError(f"chat_template: cannot render: "
                             f"{(str(error) or type(error).__name__).splitlines()[0]}") from None


@functools.lru_cache(maxsize=16)
def _compiled_template(source: str) -> Any:
    """A chat template compiled as ``transformers`` compiles it (module docstring)."""
    from jinja2.exceptions import TemplateError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise TemplateError(message)

    environment = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                extensions=["jinja2.ext.loopcontrols"])
    environment.filters["tojson"] = lambda value, indent=None: json.dumps(
        value, ensure_ascii=False, indent=indent)
    environment.globals["raise_exception"] = raise_exception
    try:
        return environment.from_string(source)
    except TemplateError as error:
        raise ValueError(f"chat_template: not a valid Jinja template: "
                         f"{str(error).splitlines()[0]}") from None


def _special_token(value: Any) -> str | None:
    """A tokenizer_config special token: a string, an AddedToken dict, or null."""
    if isinstance(value, Mapping):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _chat_template(directory: Path, config: Any) -> str | None:
    """The directory's chat template: ``tokenizer_config.json``'s ``chat_template`` (a
    string, or HF's list of named templates: the one named ``default``), else
    ``chat_template.jinja``, else None."""
    template = config.get("chat_template") if isinstance(config, Mapping) else None
    if isinstance(template, list):
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, Mapping)}
        template = named.get("default")
        if template is None:
            raise ValueError(f"{directory / TOKENIZER_CONFIG_FILE}: chat_template lists "
                             f"{sorted(map(str, named))} but no 'default' template")
    if template is not None and not isinstance(template, str):
        raise ValueError(f"{directory / TOKENIZER_CONFIG_FILE}: chat_template must be a "
                         f"string, got {type(template).__name__}")
    if template is None and (directory / CHAT_TEMPLATE_FILE).is_file():
        template = (directory / CHAT_TEMPLATE_FILE).read_text(encoding="utf-8")
    return template


def load_hf_tokenizer(path: str | os.PathLike) -> HFTokenizer:
    """Read ``tokenizer.json`` (and the special tokens and chat template of
    tokenizer_config.json, special_tokens_map.json or chat_template.jinja, when present)
    from a directory -> :class:`HFTokenizer`.

    Encodes text to int32 ids ``[L]``; nothing is downloaded.

    Raises:
      FileNotFoundError: no tokenizer.json (one line naming it).
      ValueError: an unreadable tokenizer.json, a special token it does not contain, or a
        chat template that is not a string.
    """
    from tokenizers import Tokenizer

    directory = Path(path).expanduser()
    file = directory / TOKENIZER_FILE
    if not file.is_file():
        raise FileNotFoundError(f"{file}: missing")
    try:
        tokenizer = Tokenizer.from_file(str(file))
    except Exception as error:  # tokenizers raises plain Exception
        raise ValueError(f"{file}: not a readable tokenizers file "
                         f"({str(error).splitlines()[0]})") from None
    specials: dict[str, Any] = {}
    config: Any = None
    for name in (SPECIAL_TOKENS_MAP_FILE, TOKENIZER_CONFIG_FILE):  # the latter wins
        if (directory / name).is_file():
            content = _read_json(directory / name)
            if isinstance(content, Mapping):
                specials.update({key: (content[key], name) for key in
                                 ("bos_token", "eos_token", "pad_token") if key in content})
            if name == TOKENIZER_CONFIG_FILE:
                config = content
    ids: dict[str, int | None] = {}
    for key in ("bos_token", "eos_token", "pad_token"):
        value, source = specials.get(key, (None, None))
        token = _special_token(value)
        if token is None:
            ids[key] = None
            continue
        token_id = tokenizer.token_to_id(token)
        if token_id is None:
            raise ValueError(f"{directory / source}: {key} {token!r} is not in "
                             f"{TOKENIZER_FILE}")
        ids[key] = token_id
    return HFTokenizer(tokenizer, bos_id=ids["bos_token"], eos_id=ids["eos_token"],
                       pad_id=ids["pad_token"],
                       chat_template=_chat_template(directory, config))


def train_bpe(texts: Iterable[str], vocab_size: int = BPE_VOCAB_SIZE) -> HFTokenizer:
    """Train a byte-level BPE on ``texts`` (host side, deterministic for a given sequence
    of texts): :data:`BPE_SPECIAL_TOKENS` are ids 0-2, the 256 bytes follow, then merges
    (at least two occurrences each) up to ``vocab_size`` ids; Qwen2's pre-tokenizer
    (:data:`QWEN2_PRETOKENIZE_PATTERN`), so any text encodes and decodes back exactly.

    Returns:
      an :class:`HFTokenizer` with ``pad_id, bos_id, eos_id = 0, 1, 2``; ``encode`` gives
      int32 ids ``[L]``.

    Raises:
      ValueError: ``vocab_size`` below the 259 special and byte tokens.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    base = len(BPE_SPECIAL_TOKENS) + 256
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < base:
        raise ValueError(f"vocab_size: must be an integer >= {base} (special tokens and "
                         f"bytes), got {vocab_size!r}")
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PRETOKENIZE_PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2,
                                  special_tokens=list(BPE_SPECIAL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tokenizer.train_from_iterator(list(texts), trainer=trainer)
    return HFTokenizer(tokenizer, pad_id=0, bos_id=1, eos_id=2)


def bpe_directory() -> Path:
    """The shipped BPE's directory (``rljax/data/bpe``: tokenizer.json and
    tokenizer_config.json), a path a checkpoint or a study can name."""
    return Path(__file__).resolve().parent / "data" / "bpe"


@functools.lru_cache(maxsize=1)
def load_bpe_tokenizer() -> HFTokenizer:
    """The shipped BPE (module docstring), read once per process: the same object on
    every call. Encodes text to int32 ids ``[L]``."""
    return load_hf_tokenizer(bpe_directory())


__all__ = [
    "BPE_SPECIAL_TOKENS",
    "BPE_VOCAB_SIZE",
    "CHAT_TEMPLATE_FILE",
    "QWEN2_PRETOKENIZE_PATTERN",
    "SPECIAL_TOKENS_MAP_FILE",
    "TOKENIZER_CONFIG_FILE",
    "TOKENIZER_FILE",
    "HFTokenizer",
    "bpe_directory",
    "load_bpe_tokenizer",
    "load_hf_tokenizer",
    "train_bpe",
]
