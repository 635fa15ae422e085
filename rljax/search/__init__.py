"""Search over learned or exact models.

``rljax.search`` is a drop-in for mctx 0.0.71 (``import rljax.search as mctx``): every
public name of mctx (``muzero_policy``, ``gumbel_muzero_policy``,
``stochastic_muzero_policy``, ``search``, the action-selection rules, ``RootFnOutput``,
``RecurrentFnOutput``, ``DecisionRecurrentFnOutput``, ``ChanceRecurrentFnOutput``,
``PolicyOutput``, ``Tree``, the Q-transforms and the type aliases) with mctx's arguments,
defaults and results, plus rljax's extensions (interior invalid actions, terminal states,
``get_subtree`` for reusing the tree between moves), and verifier-based search:
``sample_candidates`` with ``best_of_n`` / ``majority_vote`` / ``weighted_vote``, and
step-level ``beam_search``.

Modules follow mctx's: ``base`` (structures, types), ``action_selection``, ``loop`` (mctx's
``search.py``; not ``search``, which the function ``search`` would shadow), ``policies``,
``qtransforms``, ``seq_halving``, ``tree``, ``stochastic_muzero``.
"""

from rljax.search.action_selection import (
    GumbelMuZeroExtraData,
    gumbel_muzero_interior_action_selection,
    gumbel_muzero_root_action_selection,
    masked_argmax,
    muzero_action_selection,
)
from rljax.search.base import (
    InteriorActionSelectionFn,
    LoopFn,
    PolicyOutput,
    RecurrentFn,
    RecurrentFnOutput,
    RecurrentState,
    RootActionSelectionFn,
    RootFnOutput,
)
from rljax.search.beam import beam_search, process_verifier_score
from rljax.search.best_of_n import (
    Candidates,
    best_of_n,
    majority_vote,
    sample_candidates,
    weighted_vote,
)
from rljax.search.lm_search import (
    final_answer_key,
    majority_vote_index,
    prm_beam_search,
    sample_and_vote,
    step_scores,
)
from rljax.search.loop import search
from rljax.search.policies import gumbel_muzero_policy, muzero_policy
from rljax.search.qtransforms import (
    qtransform_by_min_max,
    qtransform_by_parent_and_siblings,
    qtransform_completed_by_mix_value,
)
from rljax.search.tree import SearchSummary, Tree, get_subtree, reuse_subtree

# isort: split
# stochastic_muzero imports the names above from this package, so it comes last.
from rljax.search.stochastic_muzero import (
    ChanceRecurrentFnOutput,
    DecisionRecurrentFnOutput,
    StochasticRecurrentState,
    stochastic_muzero_policy,
)

__version__ = "0.0.71"
"""The mctx release whose public API and results this module reproduces (mctx's own
``__version__``), so version checks in mctx users' code keep passing. rljax's own
version is ``rljax.__version__``."""

__all__ = [
    "__version__",
    # verifier-based search
    "Candidates",
    "beam_search",
    "best_of_n",
    "majority_vote",
    "process_verifier_score",
    "sample_candidates",
    "weighted_vote",
    # verifier-based search on a language model
    "final_answer_key",
    "majority_vote_index",
    "prm_beam_search",
    "sample_and_vote",
    "step_scores",
    # mctx 0.0.71's public names
    "ChanceRecurrentFnOutput",
    "DecisionRecurrentFnOutput",
    "GumbelMuZeroExtraData",
    "InteriorActionSelectionFn",
    "LoopFn",
    "PolicyOutput",
    "RecurrentFn",
    "RecurrentFnOutput",
    "RecurrentState",
    "RootActionSelectionFn",
    "RootFnOutput",
    "Tree",
    "gumbel_muzero_interior_action_selection",
    "gumbel_muzero_policy",
    "gumbel_muzero_root_action_selection",
    "muzero_action_selection",
    "muzero_policy",
    "qtransform_by_min_max",
    "qtransform_by_parent_and_siblings",
    "qtransform_completed_by_mix_value",
    "search",
    "stochastic_muzero_policy",
    # rljax's extensions
    "SearchSummary",
    "StochasticRecurrentState",
    "get_subtree",
    "masked_argmax",
    "reuse_subtree",
]
