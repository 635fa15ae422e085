"""Stratified bootstrap intervals and performance profiles with ``rliable.library``'s API.

``from rljax.stats.rliable import library as rly, metrics`` replaces ``from rliable import
library as rly, metrics``: :func:`get_interval_estimates`, :func:`create_performance_profile`,
:class:`StratifiedBootstrap`, :class:`StratifiedIndependentBootstrap` and the profile
helpers take rliable 1.2.0's arguments and return its types (point estimates as ``func``
returns them, intervals as ``[2, ...]`` float64 arrays: row 0 lower, row 1 upper bounds).
arch is not needed.

**Resampling** (rliable's stratified scheme). A score array ``x`` of shape ``S = (N, M,
...)`` (runs, tasks, any further axes such as checkpoints) is resampled as
``x[runs, tasks, ...]`` with ``runs`` uniform in ``[0, N)`` of shape ``S`` (every task and
every further index draws its own runs, as in rliable) and ``tasks`` the identity, or, with
``task_bootstrap``, one uniform draw in ``[0, M)`` per task. A 1-D array ``[N]`` is an
i.i.d. bootstrap of its items. :class:`StratifiedBootstrap` applies one index to all its
inputs (paired data); :class:`StratifiedIndependentBootstrap` draws each input's runs
independently (probability of improvement of X over Y, different run counts).

**Two back ends, one set of indices.** A ``func`` that JAX can trace (``jnp`` code, or
:mod:`rljax.stats.rliable.metrics` called on JAX arrays) is ``jax.vmap``-ed over resamples
in chunks under ``jax.jit`` (rljax's bootstrap machinery, :func:`rljax.stats.bootstrap.map_chunks`);
any other ``func`` (numpy, scipy: what rliable users write) runs on the host, one call per
resample, like rliable. ``backend="auto"`` (default) uses JAX when ``func`` traces
(``jax.eval_shape``) *and* the traced ``func`` reproduces ``func``'s numpy point estimate
on the data (to float32 rounding), else the host; ``"jax"`` / ``"numpy"`` force one. Pass
``backend="numpy"`` for numpy code whose answer depends on the data through a function
that quietly accepts tracers (``np.array_equal`` returns False on them). Both back
ends draw the *same* indices from the same key, so they differ only by float32 rounding
of the JAX path (replicates are computed in JAX's default dtype; point estimates are
always ``func`` on the original numpy data, as in rliable).

**Keys.** rliable ignores its ``random_state`` (it draws from ``numpy.random``'s global
generator). Here every bootstrap is a pure function of a JAX key, chosen by the first of:

1. ``key=`` (a ``jax.random.key``): used; the same key gives bitwise the same intervals.
   Passing ``random_state`` or ``seed`` as well is an error.
2. ``random_state=`` / ``seed=`` (a ``numpy.random.RandomState``, ``Generator`` or int):
   one 31-bit seed is drawn from it (an int is the seed), so it *is* honoured.
3. neither: one seed is drawn from ``numpy.random``'s global generator, so
   ``np.random.seed(s)`` before the call reproduces it, as rliable users expect.

:func:`get_interval_estimates` gives algorithm ``name`` the key
``fold_in(key, crc32(name))``, so adding an algorithm does not move the others' intervals.
A bootstrap object advances its key on every call (``bootstrap``, ``apply``,
``conf_int``); ``reset()`` rewinds it.

**Intervals** (``alpha = (1 - size) / 2``; ``q(p)`` the ``p``-quantile of the replicates,
``numpy.percentile``): ``percentile`` ``[q(alpha), q(1 - alpha)]``; ``basic`` ``[2 t -
q(1 - alpha), 2 t - q(alpha)]``; ``bc`` (= ``debiased``, ``bias-corrected``) and ``bca``
``[q(a1), q(a2)]``, ``a_i = Phi(z0 + (z0 + z_i) / (1 - a (z0 + z_i)))``, ``z0 =
Phi^-1(#{t* < t} / R)``, ``a = 0`` for ``bc``; ``norm`` (= ``var``, ``cov``) ``t +/-
Phi^-1(1 - alpha) sd(t*)``. These are arch 7.2's definitions (what rliable calls), with
three corrections, each a case where arch/rliable is wrong:

* BCa acceleration ``a = sum u^3 / (6 (sum u^2)^1.5)``, ``u_i = mean(t_(.)) - t_(i)``, is
  computed *per output* of ``func``. arch centres ``u`` on the mean over *all* outputs of a
  multi-metric ``func`` (``jk_params.mean()``), so ``lambda x: [iqm(x), mean(x), ...]``
  gets every metric's acceleration wrong.
* For independent samples (the pair form) the acceleration is the several-sample jackknife
  (each sample left out on its own; Davison & Hinkley 1997, eq. 5.24), defined for
  different run counts too. arch leaves item ``i`` out of every sample at once, and refuses
  different lengths.
* Where BCa/BC is undefined (all replicates on one side of ``t``, zero jackknife variance)
  that output's bounds are NaN with a ``RuntimeWarning``; arch raises for the whole call.

``studentized`` (a nested bootstrap) is not implemented. ``task_bootstrap`` is honoured in
the pair form (one task draw shared by the inputs); rliable silently ignores it there.

Source: Agarwal et al., "Deep RL at the Edge of the Statistical Precipice", NeurIPS 2021
(App. A: stratified bootstrap); Efron & Tibshirani, "An Introduction to the Bootstrap",
1993, Ch. 13-14; Davison & Hinkley, "Bootstrap Methods and their Application", 1997.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from scipy import stats as sps

from rljax.stats._validation import check_key, check_reps
from rljax.stats.bootstrap import chunk_plan, jackknife_acceleration, resample_indices
from rljax.stats.intervals import algorithm_key

Float = float | np.float32 | np.float64

METHODS = ("percentile", "basic", "bc", "debiased", "bias-corrected", "bca", "norm", "var",
           "cov")
"""The ``method`` values accepted (arch's names; ``studentized`` is not implemented)."""
BACKENDS = ("auto", "jax", "numpy")
TAILS = ("two", "lower", "upper")
_RESERVED = ("key", "random_state", "seed", "task_bootstrap", "backend")


# ----------------------------------------------------------------------------- checks


def _check_choice(value: Any, name: str, allowed: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, allowed))}, got {value!r}")
    return value


def _check_size(size: Any, name: str = "confidence_interval_size") -> float:
    try:
        value = float(size)
    except (TypeError, ValueError):
        value = float("nan")
    if not 0.0 < value < 1.0:
        raise ValueError(f"{name} must be a number strictly between 0 and 1, got {size!r}")
    return value


def _as_array(value: Any, what: str) -> np.ndarray:
    """A score array as numpy (any numeric dtype, rank >= 1, at least one run)."""
    try:
        array = np.asarray(value)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{what} must be a numeric array, got {type(value).__name__}") from err
    if not (np.issubdtype(array.dtype, np.number) or array.dtype == np.bool_):
        raise ValueError(f"{what} must be a numeric array [num_runs, num_tasks, ...], got "
                         f"dtype {array.dtype}")
    if array.ndim < 1 or array.shape[0] < 1 or 0 in array.shape:
        raise ValueError(f"{what} must have rank >= 1 [num_runs, ...] with at least one run "
                         f"and one task, got shape {array.shape}")
    return array


def resolve_key(key: Any = None, random_state: Any = None, seed: Any = None) -> jax.Array:
    """The JAX key a bootstrap uses: ``key``, else a seed drawn from ``random_state``/``seed``,
    else a seed drawn from ``numpy.random``'s global generator (see the module docstring).

    Raises:
      ValueError: ``key`` together with ``random_state``/``seed``, or an unusable value.
    """
    if key is not None:
        if random_state is not None or seed is not None:
            raise ValueError("pass either key or random_state/seed, not both (key wins "
                             "nothing: it is ambiguous)")
        return check_key(key)
    if random_state is not None and seed is not None:
        raise ValueError("pass either random_state or seed, not both")
    source = random_state if random_state is not None else seed
    top = 2**31 - 1
    if source is None:
        return jax.random.key(int(np.random.randint(0, top)))
    if isinstance(source, np.random.RandomState):
        return jax.random.key(int(source.randint(0, top)))
    if isinstance(source, np.random.Generator):
        return jax.random.key(int(source.integers(0, top)))
    if isinstance(source, (int, np.integer)) and not isinstance(source, bool):
        return jax.random.key(int(source) & 0x7FFFFFFF)
    raise ValueError("random_state/seed must be a numpy RandomState, Generator or int, got "
                     f"{type(source).__name__}")


# ----------------------------------------------------------------------------- indices


def _strata(shape: tuple[int, ...], lead: int) -> list:
    """Identity index arrays for axes 1.. of ``shape``, with ``lead`` leading unit axes."""
    nd = len(shape)
    return [jnp.arange(shape[d], dtype=jnp.int32).reshape(
        (1,) * (lead + d) + (shape[d],) + (1,) * (nd - d - 1)) for d in range(1, nd)]


def _draw_one(key: jax.Array, shapes, task_bootstrap: bool):
    keys = jax.random.split(key, len(shapes) + 1)
    tasks = None
    if task_bootstrap:
        num_tasks = shapes[0][1]
        tasks = resample_indices(keys[-1], num_tasks, (1, num_tasks))
    groups = []
    for g, shape in enumerate(shapes):
        runs = resample_indices(keys[g], shape[0], shape)
        rest = _strata(shape, 0)
        if tasks is not None:
            rest[0] = tasks.reshape((1, shape[1]) + (1,) * (len(shape) - 2))
        groups.append((runs, *rest))
    return tuple(groups)


def draw_indices(key: jax.Array, start, chunk: int, shapes: tuple[tuple[int, ...], ...],
                 task_bootstrap: bool) -> tuple[tuple[jax.Array, ...], ...]:
    """Index tuples of resamples ``start .. start + chunk - 1``, one tuple per group.

    Resample ``r`` uses the key ``fold_in(key, r)`` alone, so its indices do not depend on
    how resamples are chunked (the host and JAX back ends chunk differently). Group ``g``
    of shape ``S = (N, M, ...)`` gets ``(runs [chunk, *S], tasks, ...)`` with ``runs``
    uniform in ``[0, N)`` and the other entries identity ``arange``s ``[chunk, 1, ..., M,
    ..., 1]``, except ``tasks`` uniform in ``[0, M)`` with ``task_bootstrap`` (one task draw
    per resample shared by all groups). ``x[idx]`` for an array of shape ``S + T`` is the
    resampled ``[chunk, *S, *T]``. Traceable; ``chunk``, ``shapes`` and
    ``task_bootstrap`` are static.
    """
    keys = jax.vmap(lambda i: jax.random.fold_in(key, i))(
        jnp.asarray(start, jnp.uint32) + jnp.arange(chunk, dtype=jnp.uint32))
    return jax.vmap(lambda k: _draw_one(k, shapes, task_bootstrap))(keys)


_draw_jit = jax.jit(draw_indices, static_argnames=("chunk", "shapes", "task_bootstrap"))
HOST_BLOCK = 64  # resamples drawn per call on the host path (one compile per data shape)


def _row(group: tuple[np.ndarray, ...], b: int) -> tuple[np.ndarray, ...]:
    """Replicate ``b``'s numpy index tuple (rliable's ``(runs, *strata)`` layout)."""
    return tuple(a[b] for a in group)


# ----------------------------------------------------------------------------- back ends


def _flat_float(out: Any) -> jax.Array:
    out = jnp.asarray(out)
    if not jnp.issubdtype(out.dtype, jnp.floating):
        out = out.astype(jnp.result_type(float))
    return out.reshape(-1)


def _call(func, n_pos, names, extra, arrays):
    return func(*arrays[:n_pos], **dict(zip(names, arrays[n_pos:], strict=True)), **extra)


def _traceable(func, arrays, n_pos, names, extra) -> Exception | None:
    """None if ``func`` traces with JAX on arrays of these shapes, else the error."""
    specs = [jax.ShapeDtypeStruct(a.shape, jax.dtypes.canonicalize_dtype(a.dtype))
             for a in arrays]
    try:
        out = jax.eval_shape(lambda *a: _flat_float(_call(func, n_pos, names, extra, a)),
                             *specs)
    except Exception as err:  # numpy/scipy code on a tracer fails in many ways
        return err
    if not isinstance(out, jax.ShapeDtypeStruct):
        return TypeError(f"func returned {type(out).__name__}, not one array")
    return None


@functools.partial(jax.jit, static_argnames=("func", "n_pos", "names", "extra", "groups",
                                             "shapes", "task_bootstrap", "reps"))
def _jax_replicates(func, arrays, key, *, n_pos, names, extra, groups, shapes, task_bootstrap,
                    reps):
    extra = dict(extra)
    num_chunks, chunk = _plan(reps, shapes)

    def one_chunk(c):
        idx = draw_indices(key, c * chunk, chunk, shapes, task_bootstrap)
        resampled = [a[idx[g]] for a, g in zip(arrays, groups, strict=True)]
        return jax.vmap(lambda *r: _flat_float(_call(func, n_pos, names, extra, r)))(*resampled)

    out = jax.lax.map(one_chunk, jnp.arange(num_chunks, dtype=jnp.uint32))
    return out.reshape((num_chunks * chunk,) + out.shape[2:])[:reps]


@functools.partial(jax.jit, static_argnames=("func", "n_pos", "names", "extra"))
def _jax_point(func, arrays, *, n_pos, names, extra):
    return _flat_float(_call(func, n_pos, names, dict(extra), arrays))


def _agrees(jax_point: np.ndarray, base: np.ndarray) -> bool:
    """Whether ``func`` traced by JAX reproduces its numpy point estimate (float32 slack)."""
    if jax_point.shape != base.shape:
        return False
    scale = 1e-5 * (1.0 + float(np.nanmax(np.abs(base), initial=0.0)))
    return bool(np.allclose(jax_point, base, rtol=1e-4, atol=scale, equal_nan=True))


def _plan(reps: int, shapes) -> tuple[int, int]:
    draws = sum(int(np.prod(s)) for s in shapes)
    chunk, num_chunks = chunk_plan(reps, draws)
    return num_chunks, chunk


def _host_index_chunks(key, reps, shapes, task_bootstrap) -> Iterator[tuple]:
    """Yields replicate index groups (numpy), the same draws as the JAX back end."""
    for start in range(0, reps, HOST_BLOCK):
        idx = jax.device_get(_draw_jit(key, start, chunk=HOST_BLOCK, shapes=shapes,
                                       task_bootstrap=task_bootstrap))
        for b in range(min(HOST_BLOCK, reps - start)):
            yield tuple(_row(group, b) for group in idx)


# ----------------------------------------------------------------------------- intervals


def _interval(results, base, bias_ref, method, size, tail, acceleration) -> np.ndarray:
    """``[2, P]`` bounds from replicates ``[R, P]`` (see the module docstring)."""
    num = results.shape[1]
    alpha = (1.0 - size) / 2.0 if tail == "two" else 1.0 - size
    probs = np.array([[alpha, 1.0 - alpha]] * num)
    zq = sps.norm.ppf(probs)
    if method in ("norm", "var", "cov"):
        errors = results - results.mean(axis=0)
        std = np.sqrt(np.mean(errors**2, axis=0))
        lower, upper = base + zq[:, 0] * std, base + zq[:, 1] * std
    else:
        if method in ("bc", "debiased", "bias-corrected", "bca"):
            frac = (results < bias_ref).mean(axis=0)
            acc = np.broadcast_to(np.asarray(acceleration, np.float64), (num,))
            with np.errstate(divide="ignore", invalid="ignore"):
                z0 = sps.norm.ppf(frac)[:, None]
                probs = sps.norm.cdf(z0 + (z0 + zq) / (1.0 - acc[:, None] * (z0 + zq)))
            bad = (frac <= 0.0) | (frac >= 1.0) | np.isnan(acc)
            if bad.any():
                warnings.warn(
                    f"{method} is undefined for output(s) {np.flatnonzero(bad).tolist()} (all "
                    "replicates on one side of the point estimate, NaN, or zero jackknife "
                    "variance): their bounds are NaN. Use method='percentile'.",
                    RuntimeWarning, stacklevel=4)
                probs[bad] = np.nan
        lower = np.full(num, np.nan)
        upper = np.full(num, np.nan)
        for i in range(num):
            if not np.isnan(probs[i]).any():
                lower[i], upper[i] = np.percentile(results[:, i], list(100.0 * probs[i]))
        if method == "basic":
            lower, upper = 2.0 * base - upper, 2.0 * base - lower
    if tail == "lower":
        upper = np.full(num, np.inf)
    elif tail == "upper":
        lower = np.full(num, -np.inf)
    return np.vstack((lower, upper))


# ----------------------------------------------------------------------------- bootstraps


class _Stratified:
    """Shared machinery of the two bootstraps (arch's ``IIDBootstrap`` interface)."""

    _independent = False
    _name = "Stratified Bootstrap"

    def __init__(self, *args, random_state=None, task_bootstrap: bool = False, key=None,
                 seed=None, **kwargs) -> None:
        if not args and not kwargs:
            raise ValueError(f"{type(self).__name__} needs at least one score array")
        self._args = [_as_array(a, f"args[{i}]") for i, a in enumerate(args)]
        self._kwargs = {k: _as_array(v, f"kwargs[{k!r}]") for k, v in kwargs.items()}
        arrays = self._args + list(self._kwargs.values())
        self._task_bootstrap = bool(task_bootstrap)
        if self._independent:
            self._shapes = tuple(a.shape for a in arrays)
        else:
            self._shapes = (arrays[0].shape,)
            for name, a in zip(self._names_all(), arrays, strict=True):
                if a.shape[:len(self._shapes[0])] != self._shapes[0]:
                    raise ValueError(
                        f"{name} must start with the first input's shape {self._shapes[0]} "
                        f"(resampled with the same index), got {a.shape}")
        if self._task_bootstrap:
            tasks = {s[1] if len(s) > 1 else None for s in self._shapes}
            if None in tasks or len(tasks) > 1:
                raise ValueError("task_bootstrap=True needs inputs of rank >= 2 with the same "
                                 f"number of tasks (axis 1), got shapes {list(self._shapes)}")
        self._num_items = arrays[0].shape[0]
        self._key = resolve_key(key, random_state, seed)
        self._calls = 0
        self._results: np.ndarray | None = None
        self._last = None
        for name in self._kwargs:
            if name in _RESERVED or getattr(self, name, None) is not None:
                raise ValueError(f"{name} is a reserved name; pass that input positionally or "
                                 "under another name")
        self.reset()

    # -- data and indices

    def _names_all(self) -> list[str]:
        return [f"args[{i}]" for i in range(len(self._args))] + [
            f"kwargs[{k!r}]" for k in self._kwargs]

    def _arrays(self) -> list[np.ndarray]:
        return self._args + list(self._kwargs.values())

    def _groups(self) -> tuple[int, ...]:
        count = len(self._args) + len(self._kwargs)
        return tuple(range(count)) if self._independent else (0,) * count

    def _resample_with(self, idx_groups) -> tuple[tuple, dict]:
        arrays = self._arrays()
        out = [a[idx_groups[g]] for a, g in zip(arrays, self._groups(), strict=True)]
        self.pos_data = tuple(out[:len(self._args)])
        self.kw_data = dict(zip(self._kwargs, out[len(self._args):], strict=True))
        for name, value in self.kw_data.items():
            setattr(self, name, value)
        self.data = (self.pos_data, self.kw_data)
        self._index = self._format_index(idx_groups)
        return self.data

    def _format_index(self, idx_groups):
        return idx_groups[0]

    def _next_key(self) -> jax.Array:
        key = jax.random.fold_in(self._key, self._calls)
        self._calls += 1
        return key

    @property
    def index(self):
        """The index of the current resample (``x[index]`` is the resampled ``x``)."""
        return self._index

    def reset(self, use_seed: bool = True) -> None:
        """Back to the original data and the first key of the stream."""
        del use_seed
        full = tuple((np.arange(s[0]).reshape((s[0],) + (1,) * (len(s) - 1)),
                      *[np.asarray(a) for a in _strata(s, 0)]) for s in self._shapes)
        self._calls = 0
        self._resample_with(full)
        self._index = self._identity_index()

    def _identity_index(self):
        return np.arange(self._num_items)

    def update_indices(self):
        """Draws the index of one fresh resample (advances the key stream)."""
        idx = next(_host_index_chunks(self._next_key(), 1, self._shapes,
                                      self._task_bootstrap))
        return self._format_index(idx)

    def bootstrap(self, reps: int) -> Iterator[tuple[tuple, dict]]:
        """Yields ``(pos_data, kw_data)`` for ``reps`` resamples (``self.index`` follows)."""
        reps = check_reps(reps)
        for idx in _host_index_chunks(self._next_key(), reps, self._shapes,
                                      self._task_bootstrap):
            yield self._resample_with(idx)

    # -- replicates

    def _replicates(self, func, reps, extra_kwargs, backend):
        """``(results [R, P] float64, base [P], bias reference [P], output shape)``."""
        if not callable(func):
            raise ValueError(f"func must be callable, got {type(func).__name__}")
        reps = check_reps(reps)
        backend = _check_choice(backend, "backend", BACKENDS)
        extra = dict(extra_kwargs or {})
        if any(k in self._kwargs for k in extra):
            raise ValueError("extra_kwargs contains keys used for variable names in the "
                             "bootstrap")
        arrays = self._arrays()
        names = tuple(self._kwargs)
        n_pos = len(self._args)
        base_raw = np.asarray(_call(func, n_pos, names, extra, arrays))
        shape = base_raw.shape if base_raw.ndim else (1,)
        base = base_raw.astype(np.float64).reshape(-1)
        key = self._next_key()
        use_jax = backend == "jax"
        if backend != "numpy":
            error = _traceable(func, arrays, n_pos, names, extra)
            if error is not None and backend == "jax":
                raise ValueError(f"backend='jax' needs a JAX-traceable func; tracing failed: "
                                 f"{type(error).__name__}: {str(error).splitlines()[0]}")
            use_jax = error is None
        if use_jax:
            # extra values may be unhashable arrays: bind them (one compile per call then).
            bound = functools.partial(func, **extra) if extra else func
            static = dict(n_pos=n_pos, names=names, extra=())
            jarrays = tuple(jnp.asarray(a) for a in arrays)
            bias_ref = np.asarray(_jax_point(bound, jarrays, **static), np.float64)
            if backend == "auto" and not _agrees(bias_ref, base):
                # numpy code can trace yet freeze a data-dependent answer (np.array_equal
                # returns False on tracers): trust JAX only where it reproduces the point.
                use_jax = False
        if use_jax:
            results = np.asarray(_jax_replicates(
                bound, jarrays, key, groups=self._groups(), shapes=self._shapes,
                task_bootstrap=self._task_bootstrap, reps=reps, **static), np.float64)
        else:
            rows = []
            for idx in _host_index_chunks(key, reps, self._shapes, self._task_bootstrap):
                resampled = [a[idx[g]] for a, g in zip(arrays, self._groups(), strict=True)]
                rows.append(np.asarray(_call(func, n_pos, names, extra, resampled),
                                       np.float64).reshape(-1))
            results = np.stack(rows)
            bias_ref = base
        if results.shape[1] != base.size:
            raise ValueError(f"func must return the same shape on every resample, got "
                             f"{base.size} and {results.shape[1]} values")
        self._results = results
        return results, base, bias_ref, shape

    def _acceleration(self, func, extra_kwargs) -> np.ndarray:
        """Per-output BCa acceleration from leave-one-run-out values (module docstring)."""
        arrays = self._arrays()
        names = tuple(self._kwargs)
        n_pos = len(self._args)
        extra = dict(extra_kwargs or {})

        def value(arrs):
            return np.asarray(_call(func, n_pos, names, extra, arrs), np.float64).reshape(-1)

        if self._independent:
            groups = []
            for k, a in enumerate(arrays):
                if a.shape[0] < 2:
                    raise ValueError(f"method='bca' needs at least 2 runs in every input, "
                                     f"got shape {a.shape}")
                groups.append(np.stack([
                    value([np.delete(b, i, axis=0) if j == k else b for j, b in
                           enumerate(arrays)]) for i in range(a.shape[0])]))
            return jackknife_acceleration(groups)
        if self._num_items < 2:
            raise ValueError(f"method='bca' needs at least 2 runs, got {self._num_items}")
        jack = np.stack([value([np.delete(b, i, axis=0) for b in arrays])
                         for i in range(self._num_items)])
        return jackknife_acceleration([jack])

    def apply(self, func: Callable[..., Any], reps: int = 1000,
              extra_kwargs: dict | None = None, *, backend: str = "auto") -> np.ndarray:
        """Replicates ``[reps, P]`` of ``func`` (its output flattened) over resamples."""
        return self._replicates(func, reps, extra_kwargs, backend)[0]

    def cov(self, func: Callable[..., Any], reps: int = 1000, recenter: bool = True,
            extra_kwargs: dict | None = None, *, backend: str = "auto") -> np.ndarray:
        """Bootstrap covariance ``[P, P]`` of ``func`` (centred on the replicates' mean, or on
        the point estimate when ``recenter`` is False)."""
        results, base, _, _ = self._replicates(func, reps, extra_kwargs, backend)
        errors = results - (results.mean(axis=0) if recenter else base)
        return errors.T @ errors / results.shape[0]

    def var(self, func: Callable[..., Any], reps: int = 1000, recenter: bool = True,
            extra_kwargs: dict | None = None, *, backend: str = "auto") -> np.ndarray:
        """Bootstrap variance ``[P]`` of ``func`` (see :meth:`cov`)."""
        return np.diag(self.cov(func, reps, recenter, extra_kwargs, backend=backend)).copy()

    def conf_int(self, func: Callable[..., Any], reps: int = 1000, method: str = "basic",
                 size: float = 0.95, tail: str = "two", extra_kwargs: dict | None = None,
                 reuse: bool = False, sampling: str = "nonparametric", *,
                 backend: str = "auto") -> np.ndarray:
        """Confidence interval of ``func`` from ``reps`` stratified resamples.

        Args:
          func: ``func(*args, **kwargs) -> scalar or [P]`` (numpy or jnp; see the module
            docstring for the two back ends).
          reps: number of resamples ``R``.
          method: one of :data:`METHODS` (formulas in the module docstring).
          size: coverage, strictly between 0 and 1.
          tail: ``"two"``, ``"lower"`` (upper bounds ``inf``) or ``"upper"`` (lower
            bounds ``-inf``).
          extra_kwargs: fixed keyword arguments for ``func`` (not resampled).
          reuse: reuse the last replicates if ``func`` and ``reps`` are the same.
          sampling: only ``"nonparametric"``.
          backend: ``"auto"``, ``"jax"`` or ``"numpy"``.

        Returns:
          ``[2, P]`` float64 (``[2, 1]`` for a scalar ``func``): lower bounds, upper bounds.
        """
        method = _check_choice(method, "method", METHODS)
        size = _check_size(size, "size")
        tail = _check_choice(tail, "tail", TAILS)
        _check_choice(sampling, "sampling", ("nonparametric",))
        if reuse and self._last is not None and self._last[0] is func and \
                self._last[1] == reps:
            results, base, bias_ref, shape = self._last[2]
        else:
            stored = self._replicates(func, reps, extra_kwargs, backend)
            self._last = (func, reps, stored)
            results, base, bias_ref, shape = stored
        acceleration = 0.0
        if method == "bca":
            acceleration = self._acceleration(func, extra_kwargs)
        bounds = _interval(results, base, bias_ref, method, size, tail, acceleration)
        return bounds.reshape((2,) + shape)


class StratifiedBootstrap(_Stratified):
    """Stratified bootstrap of paired score arrays ``[N, M, ...]`` (rliable's class).

    Every input is indexed with the same resample index ``(runs [N, M, ...], tasks [1, M,
    ...], ...)`` (see the module docstring), so ``x[bs.index]`` is the resampled ``x``;
    keyword inputs must start with the first input's shape and are also attributes
    (``bs.y``). A 1-D input ``[N]`` is an i.i.d. bootstrap of its items (rliable raises).

    Args:
      *args: score arrays ``[N, M, ...]`` (the first one's shape sets the strata).
      random_state: numpy ``RandomState``/``Generator``/int a seed is drawn from (honoured,
        unlike rliable; see the module docstring for how it combines with ``key``).
      task_bootstrap: also resample tasks (axis 1; needs rank >= 2).
      key: a JAX key; the same key gives bitwise the same resamples.
      seed: like ``random_state`` (arch's newer name).
      **kwargs: keyword score arrays, resampled with the same index.

    Example: ``StratifiedBootstrap(x, key=key).conf_int(fn, reps=2000,
    method="percentile")``.
    """

    def __init__(self, *args, random_state=None, task_bootstrap: bool = False, key=None,
                 seed=None, **kwargs) -> None:
        super().__init__(*args, random_state=random_state, task_bootstrap=task_bootstrap,
                         key=key, seed=seed, **kwargs)

    def __repr__(self) -> str:
        return (f"{self._name}(no. pos. inputs: {len(self._args)}, no. keyword inputs: "
                f"{len(self._kwargs)}, task_bootstrap={self._task_bootstrap})")


class StratifiedIndependentBootstrap(_Stratified):
    """Stratified bootstrap where each input's runs are drawn independently (rliable's class).

    For statistics of several score arrays that may have different run counts, such as
    the probability of improvement of X over Y. ``bs.index`` is ``([index per positional
    input], {name: index per keyword input})``.

    Args:
      *args: score arrays ``[N_k, M, ...]`` (1-D ``[N_k]`` allowed).
      random_state: see :class:`StratifiedBootstrap`.
      task_bootstrap: also resample tasks, one draw shared by all inputs (so a task's X
        and Y runs stay together; needs the same ``M``). rliable has no such option.
      key: a JAX key.
      seed: like ``random_state``.
      **kwargs: keyword score arrays.
    """

    _independent = True
    _name = "Stratified Independent Bootstrap"

    def __init__(self, *args, random_state=None, task_bootstrap: bool = False, key=None,
                 seed=None, **kwargs) -> None:
        super().__init__(*args, random_state=random_state, task_bootstrap=task_bootstrap,
                         key=key, seed=seed, **kwargs)

    def _format_index(self, idx_groups):
        n_pos = len(self._args)
        return (list(idx_groups[:n_pos]),
                dict(zip(self._kwargs, idx_groups[n_pos:], strict=True)))

    def _identity_index(self):
        return ([np.arange(a.shape[0]) for a in self._args],
                {k: np.arange(v.shape[0]) for k, v in self._kwargs.items()})

    def __repr__(self) -> str:
        return (f"{self._name}(no. pos. inputs: {len(self._args)}, no. keyword inputs: "
                f"{len(self._kwargs)})")


# ----------------------------------------------------------------------------- API


def get_interval_estimates(
    score_dict: Mapping[str, Any],
    func: Callable[..., Any],
    method: str = "percentile",
    task_bootstrap: bool = False,
    reps: int = 50000,
    confidence_interval_size: Float = 0.95,
    random_state: Any = None,
    *,
    key: jax.Array | None = None,
    backend: str = "auto",
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Point estimates and stratified-bootstrap confidence intervals (rliable's function).

    For each algorithm, ``point = func(scores)`` and ``R = reps`` stratified resamples
    (runs within each task; tasks too with ``task_bootstrap``) give replicates of ``func``;
    the interval follows ``method`` (module docstring).

    Args:
      score_dict: ``{name: scores [N, M, ...]}`` (:class:`StratifiedBootstrap`), or
        ``{name: [x, y, ...]}`` (a list or tuple: :class:`StratifiedIndependentBootstrap`,
        ``func(x, y, ...)``; e.g. ``{"x,y": [x, y]}`` with
        ``metrics.probability_of_improvement``).
      func: ``scores -> scalar or [P]`` (numpy or jnp; a jnp one runs vectorised).
      method: one of :data:`METHODS` (``"percentile"``, ``"basic"``, ``"bc"``, ``"bca"``,
        ...).
      task_bootstrap: also resample tasks (in the list form one draw shared by all inputs).
      reps: number of resamples (rliable's default 50000; a host ``func`` is called that
        many times).
      confidence_interval_size: coverage, strictly between 0 and 1.
      random_state: numpy ``RandomState``/``Generator``/int (honoured; see module docstring).
      key: JAX key (exclusive with ``random_state``); each algorithm folds in its name.
      backend: ``"auto"`` (JAX if ``func`` traces, else host), ``"jax"`` or ``"numpy"``.

    Returns:
      ``(point_estimates, interval_estimates)``: ``{name: func(scores)}`` exactly as
      ``func`` returns it, and ``{name: [2, P] float64}`` (row 0 lower, row 1 upper
      bounds; ``[2, 1]`` for a scalar ``func``). NaN scores give NaN, as in rliable.

    Source: Agarwal et al. 2021, App. A (rliable ``get_interval_estimates``).
    """
    if not isinstance(score_dict, Mapping) or not score_dict:
        raise ValueError("score_dict must be a non-empty mapping {name: scores [N, M, ...]} "
                         "or {name: [x, y, ...]}")
    if not callable(func):
        raise ValueError(f"func must be callable, got {type(func).__name__}")
    _check_choice(method, "method", METHODS)
    check_reps(reps)
    size = _check_size(confidence_interval_size)
    _check_choice(backend, "backend", BACKENDS)
    base_key = resolve_key(key, random_state)
    points, intervals = {}, {}
    for name, scores in score_dict.items():
        algo_key = algorithm_key(base_key, name)
        if isinstance(scores, (list, tuple)):
            if not scores:
                raise ValueError(f"score_dict[{name!r}] is an empty list; the list form needs "
                                 "score arrays [x, y, ...]")
            arrays = [_as_array(s, f"score_dict[{name!r}][{i}]") for i, s in enumerate(scores)]
            bs = StratifiedIndependentBootstrap(*arrays, task_bootstrap=task_bootstrap,
                                                key=algo_key)
            points[name] = func(*arrays)
        else:
            array = _as_array(scores, f"score_dict[{name!r}]")
            bs = StratifiedBootstrap(array, task_bootstrap=task_bootstrap, key=algo_key)
            points[name] = func(array)
        intervals[name] = bs.conf_int(func, reps=reps, size=size, method=method,
                                      backend=backend)
    return points, intervals


def _profile_values(scores, tau_list, average: bool):
    xp = jnp if isinstance(scores, jax.Array) else np
    values = xp.mean(scores, axis=0) if average else scores
    flat = xp.reshape(values, (-1,))
    taus = xp.asarray(np.asarray(tau_list, dtype=np.float64))
    if xp is jnp:
        taus = taus.astype(flat.dtype if jnp.issubdtype(flat.dtype, jnp.floating) else float)
    return xp.mean(flat[:, None] > taus[None, :], axis=0)


def run_score_deviation(scores, tau: Float):
    """Fraction of all run scores above ``tau``: ``(1/(N M)) sum_{n,m} [x[n, m] > tau]``."""
    return _profile_values(scores, [tau], average=False)[0]


def mean_score_deviation(scores, tau: Float):
    """Fraction of tasks whose mean score is above ``tau``: ``(1/M) sum_m [mean_n x > tau]``."""
    return _profile_values(scores, [tau], average=True)[0]


def score_distributions(scores, tau_list):
    """Run-score distribution ``[T]``: :func:`run_score_deviation` at every ``tau``.

    numpy in: rliable's float64 values exactly; JAX in: traceable.
    """
    return _profile_values(scores, tau_list, average=False)


def average_score_distributions(scores, tau_list):
    """Average-score distribution ``[T]``: :func:`mean_score_deviation` at every ``tau``."""
    return _profile_values(scores, tau_list, average=True)


def create_performance_profile(
    score_dict: Mapping[str, Any],
    tau_list,
    use_score_distribution: bool = True,
    custom_profile_func: Callable[..., Any] | None = None,
    method: str = "percentile",
    task_bootstrap: bool = False,
    reps: int = 2000,
    confidence_interval_size: Float = 0.95,
    *,
    key: jax.Array | None = None,
    random_state: Any = None,
    backend: str = "auto",
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Performance profiles ``[T]`` with pointwise stratified-bootstrap bands (rliable's).

    The run-score distribution ``F(tau) = (1/(N M)) sum_{n,m} [x[n, m] > tau]`` (default) or
    the average-score distribution ``(1/M) sum_m [mean_n x[n, m] > tau]``, at every
    ``tau``; bands from :func:`get_interval_estimates` (one bootstrap for all thresholds).
    The default profiles run on the JAX back end (their float32 comparison can differ from
    float64 only for a score within float32 rounding of a threshold).

    Args:
      score_dict: ``{name: scores [N, M, ...]}``.
      tau_list: ``[T]`` thresholds.
      use_score_distribution: run-score (default) or average-score distribution.
      custom_profile_func: ``f(scores, tau_list) -> [T]`` replacing the two above.
      method: one of :data:`METHODS`.
      task_bootstrap: also resample tasks.
      reps: number of resamples.
      confidence_interval_size: band coverage (pointwise).
      key: JAX key (see :func:`get_interval_estimates`).
      random_state: numpy ``RandomState``/``Generator``/int (rliable has no such argument).
      backend: ``"auto"``, ``"jax"`` or ``"numpy"``.

    Returns:
      ``(profiles, profile_cis)``: ``{name: [T] float64}`` and ``{name: [2, T]}``.

    Source: Agarwal et al. 2021, Sec. 4.2 (rliable ``create_performance_profile``).
    """
    taus = np.asarray(tau_list)
    if taus.ndim != 1 or taus.size < 1:
        raise ValueError(f"tau_list must be a non-empty 1-D list of thresholds, got shape "
                         f"{taus.shape}")
    if custom_profile_func is None:
        average = not use_score_distribution

        def profile_function(scores):
            return _profile_values(scores, tau_list, average)
    else:
        if not callable(custom_profile_func):
            raise ValueError("custom_profile_func must be callable f(scores, tau_list), got "
                             f"{type(custom_profile_func).__name__}")

        def profile_function(scores):
            return custom_profile_func(scores, tau_list)

    return get_interval_estimates(score_dict, profile_function, method=method,
                                  task_bootstrap=task_bootstrap, reps=reps,
                                  confidence_interval_size=confidence_interval_size,
                                  random_state=random_state, key=key, backend=backend)


__all__ = [
    "BACKENDS",
    "Float",
    "METHODS",
    "StratifiedBootstrap",
    "StratifiedIndependentBootstrap",
    "average_score_distributions",
    "create_performance_profile",
    "draw_indices",
    "get_interval_estimates",
    "mean_score_deviation",
    "resolve_key",
    "run_score_deviation",
    "score_distributions",
]
