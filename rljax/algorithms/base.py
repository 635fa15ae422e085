"""The RLTransform contract: optax's shape, for policy gradients.

Every transform gives its gradients and exposes the loss they come from::

    rl = reinforce(policy.apply, baseline=ema_baseline())
    rl_state = rl.init(params)

    # the transform's own update ...
    grads, rl_state, metrics = rl.update(params, rl_state, batch, key)

    # ... is the gradient of its loss (optax's own idiom: jax.grad, then any optimizer)
    grads, (rl_state, metrics) = jax.grad(rl.loss, has_aux=True)(params, rl_state, batch, key)

    updates, opt_state = opt.update(grads, opt_state, params)
    params = optax.apply_updates(params, updates)

The transform only produces gradients (of a loss to *minimise*); any optax optimizer
applies them, and any optax wrapper (``optax.MultiSteps``, ``optax.apply_if_finite``,
``optax.inject_hyperparams``) wraps that optimizer unchanged, because the gradient is
computed before the optimizer sees it. :func:`as_optax` puts a transform at the head of
an ``optax.chain`` instead; it computes the gradient inside the chain, so it refuses to be
wrapped or preceded (see its docstring).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any, NamedTuple

import jax
import optax

from rljax.types import Array, Grads, Metrics, Params, RLState


class LossAux(NamedTuple):
    """The auxiliary output of :attr:`RLTransform.loss`: ``(rl_state, metrics)``.

    Attributes:
      rl_state: the transform's new state (what ``update`` returns as its second value),
        with the structure and leaf shapes ``init`` gives.
      metrics: ``{name: float32 []}``, the metrics ``update`` returns; ``metrics["loss"]``
        is the loss itself.
    """

    rl_state: RLState
    metrics: Metrics


def _missing_loss(*args: Any, **kwargs: Any) -> tuple[Array, LossAux]:
    """The default :attr:`RLTransform.loss` of a transform built as
    ``RLTransform(init, update)``: refuses with a one-line error."""
    del args, kwargs
    raise ValueError("RLTransform.loss: this transform was built without a loss "
                     "(RLTransform(init, update)); build it with loss=fn, fn(params, rl_state, "
                     "batch, key, **extra) -> (loss, LossAux(rl_state, metrics))")


class RLTransform(NamedTuple):
    """A policy-gradient transform: ``init``, ``update`` and the ``loss`` behind it.

    * ``init(params) -> rl_state``.
    * ``update(params, rl_state, batch, key, **extra) -> (grads, rl_state, metrics)``.
    * ``loss(params, rl_state, batch, key, **extra) -> (loss, LossAux(rl_state,
      metrics))``: the scalar ``[]`` whose gradient ``update`` returns, and
      :class:`LossAux` with the same new state and metrics. For the built-in factories
      (:func:`~rljax.algorithms.reinforce`, :func:`~rljax.algorithms.ppo`,
      :func:`~rljax.algorithms.grpo`) ``update`` *is*
      ``jax.grad(loss, has_aux=True)`` (:func:`update_from_loss`): the two give the same
      grads, state and metrics in every bit (both eager, or both under ``jax.jit``).
      ``jax.grad(lambda p: rl.loss(p, s, b, k)[0])(params)`` drops the aux, so under
      ``jax.jit`` XLA compiles a smaller program: the same grads to float32 rounding
      (measured up to 3e-7 relative on a PPO minibatch), not bitwise.

    All three are pure and jit/vmap-able. Shapes: ``grads`` has the structure and leaf
    shapes of ``params``; ``metrics`` maps names to float32 scalars ``[]``; ``batch`` is
    the algorithm's batch struct (e.g. :class:`EpisodeBatch` ``[G, T]``,
    :class:`GroupBatch` ``[P, G, T]``) and ``key`` a typed key ``[]`` (or ``None`` where
    the update draws nothing).

    ``RLTransform(init, update)`` (positional or keyword, as before ``loss`` existed)
    still builds a transform; its ``loss`` then raises a one-line ``ValueError``.
    """

    init: Callable[[Params], RLState]
    update: Callable[..., tuple[Grads, RLState, Metrics]]
    loss: Callable[..., tuple[Array, LossAux]] = _missing_loss


def update_from_loss(
    loss: Callable[..., tuple[Array, LossAux]],
) -> Callable[..., tuple[Grads, RLState, Metrics]]:
    """The ``update`` of a transform whose loss is ``loss``: its gradient in ``params``.

    ``update(params, rl_state, batch, key=None, **extra) -> (grads, rl_state, metrics)``
    with ``grads, (rl_state, metrics) = jax.grad(loss, has_aux=True)(params, rl_state,
    batch, key, **extra)``; only ``params`` is differentiated.

    Args:
      loss: ``(params, rl_state, batch, key, **extra) -> (loss [], LossAux)``.

    Returns:
      The ``update`` function of :class:`RLTransform`; ``grads`` has the structure and
      leaf shapes of ``params``.
    """

    def update(params: Params, rl_state: RLState, batch: Any, key=None, **extra: Any):
        grads, aux = jax.grad(loss, has_aux=True)(params, rl_state, batch, key, **extra)
        return grads, aux.rl_state, aux.metrics

    return update


class AsOptaxState(NamedTuple):
    """State of :func:`as_optax`: the wrapped transform's state, ``rl_state``, with the
    leaf shapes its ``init`` gives (e.g. ``[]`` for an EMA baseline's value)."""

    rl_state: Any


class _AsOptaxUpdates:
    """The one value :func:`as_optax`'s ``update`` accepts as ``updates``.

    A pytree with no leaves, so it passes through ``jax.jit``, ``jax.vmap`` and
    ``optax.chain`` (unflattening gives back this very object) and costs nothing.
    """

    _instance: _AsOptaxUpdates | None = None

    def __new__(cls) -> _AsOptaxUpdates:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "rljax.algorithms.AS_OPTAX_UPDATES"


AS_OPTAX_UPDATES = _AsOptaxUpdates()
"""The ``updates`` argument of :func:`as_optax`'s ``update`` (it computes the gradient
itself): a pytree with no leaves (no shapes), identical after ``jax.jit`` / ``jax.vmap``."""
jax.tree_util.register_pytree_node(
    _AsOptaxUpdates, lambda _: ((), None), lambda _aux, _children: AS_OPTAX_UPDATES)

# optax's own combinators that hand a member the ``updates`` they received, unchanged
# (matched against each optax frame's ``co_qualname``); every other optax frame between
# ``as_optax`` and the caller is a wrapper that would act on updates as_optax ignores.
_PASS_THROUGH = ("chain.<locals>", "named_chain.<locals>", "inject_hyperparams.<locals>",
                 "with_extra_args_support.<locals>")
_IDIOM = ("compute the gradient first, grads, aux = jax.grad(rl.loss, has_aux=True)"
          "(params, rl_state, batch, key), and give grads to the optax optimizer or wrapper")


def _optax_frames(frame: FrameType | None) -> Iterator[tuple[FrameType, str]]:
    """``(frame, qualname)`` of every frame of the optax package from ``frame`` outwards."""
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if module == "optax" or module.startswith("optax."):
            code = frame.f_code
            yield frame, getattr(code, "co_qualname", code.co_name)
        frame = frame.f_back


def _check_callers(frame: FrameType | None) -> None:
    """Refuse, at trace time, an ``as_optax`` that runs inside an optax wrapper or after
    another member of an ``optax.chain`` (see :func:`as_optax`)."""
    for optax_frame, qualname in _optax_frames(frame):
        if not qualname.startswith(_PASS_THROUGH):
            raise ValueError(
                f"as_optax: cannot run inside optax's {qualname.split('.<locals>')[0]} (as_optax "
                f"computes the gradient itself and ignores the updates flowing into it, so the "
                f"wrapper would act on nothing); {_IDIOM}")
        # the member an optax.chain is running must be its first one
        if qualname == "chain.<locals>.update_fn":
            members = optax_frame.f_locals.get("update_fns")
        elif qualname == "chain.<locals>.init_fn.<locals>.<genexpr>":
            outer = optax_frame.f_back
            members = None if outer is None else outer.f_locals.get("init_fns")
        else:
            continue
        running = optax_frame.f_locals.get("fn")
        if members and running is not None and running is not members[0]:
            raise ValueError(
                f"as_optax: must be the first member of its optax.chain (it ignores the updates "
                f"flowing into it, so the transformations ahead of it would act on nothing); "
                f"{_IDIOM}, then chain them")


def as_optax(rl: RLTransform) -> optax.GradientTransformationExtraArgs:
    """Wrap an RL transform as an optax transformation, for the head of ``optax.chain``.

    The transform computes the gradient itself, so nothing may flow into it: ``update``
    takes :data:`AS_OPTAX_UPDATES` as its ``updates`` and returns the transform's
    gradients. ``params`` and ``batch`` are required, ``key`` is optional (extra args of
    ``GradientTransformationExtraArgs``)::

        tx = optax.chain(as_optax(rl), optax.clip_by_global_norm(0.5), optax.adam(3e-4))
        opt_state = tx.init(params)
        updates, opt_state = tx.update(AS_OPTAX_UPDATES, opt_state, params, batch=batch,
                                       key=key)

    The updates out have the structure and leaf shapes of ``params``; ``batch`` and
    ``key`` are shaped as :class:`RLTransform` ``update`` takes them.

    Where ``as_optax`` cannot be right, it refuses with a one-line ``ValueError`` that
    points to ``jax.grad(rl.loss, has_aux=True)``, the idiom that works everywhere:

    * inside an optax wrapper (``optax.MultiSteps``, ``optax.apply_if_finite``,
      ``optax.masked``, ...): the wrapper acts on the incoming updates (accumulates them,
      checks them for NaN) before it calls its inner transformation, but here the
      gradient exists only *inside* that call, so MultiSteps would step on the last
      batch alone and apply_if_finite would never see a NaN;
    * after other members of an ``optax.chain``: they would transform nothing;
    * with any other ``updates`` than :data:`AS_OPTAX_UPDATES` (e.g. the former idiom
      ``tx.update(params, state, params, batch=...)``, or a transformation ahead that
      rebuilt the sentinel).

    Detection, at trace time (``init`` and ``update``, so under ``jax.jit`` it costs
    nothing per step): (1) identity, ``updates is AS_OPTAX_UPDATES``; (2) the Python call
    stack: every frame of the optax package between the caller and ``as_optax`` must
    belong to a combinator that hands its ``updates`` on unchanged (``optax.chain``,
    ``named_chain``, ``inject_hyperparams``, ``with_extra_args_support``), and in each
    ``optax.chain`` the running member must be the first. The wrappers pass the sentinel
    on unchanged (it has no leaves, so they see nothing to accumulate or check), which is
    why (1) alone cannot catch them; a wrapper is caught already by ``tx.init``, which it
    calls on its inner transformation. Wrappers from outside optax are not recognised by
    (2); use ``rl.loss`` there.

    Args:
      rl: the transform; its ``update`` gives the gradients.

    Returns:
      ``GradientTransformationExtraArgs`` with state :class:`AsOptaxState`.
    """

    def init_fn(params):
        _check_callers(sys._getframe(1))
        return AsOptaxState(rl.init(params))

    def update_fn(updates, state, params=None, *, batch=None, key=None, **extra):
        _check_callers(sys._getframe(1))
        if updates is not AS_OPTAX_UPDATES:
            raise ValueError(
                f"as_optax: updates must be rljax.algorithms.AS_OPTAX_UPDATES (as_optax computes "
                f"the gradient itself), got {type(updates).__name__}; call tx.update("
                f"AS_OPTAX_UPDATES, opt_state, params, batch=batch, key=key), or {_IDIOM}")
        if params is None or batch is None:
            raise ValueError("as_optax: update needs params=... and batch=...")
        grads, rl_state, _ = rl.update(params, state.rl_state, batch, key, **extra)
        return grads, AsOptaxState(rl_state)

    return optax.GradientTransformationExtraArgs(init_fn, update_fn)
