"""Search over learned or exact models.

``rljax.search`` is call-compatible with mctx 0.0.71 (``import rljax.search as mctx``):
``muzero_policy``, ``gumbel_muzero_policy``, ``RootFnOutput``, ``RecurrentFnOutput``,
``PolicyOutput``, ``Tree`` and the Q-transforms, plus rljax's extensions (interior invalid
actions, terminal states, ``get_subtree`` for reusing the tree between moves), and
verifier-based search: ``sample_candidates`` with ``best_of_n`` / ``majority_vote`` /
``weighted_vote``, and step-level ``beam_search``.
"""

from rljax.search.beam import beam_search, process_verifier_score
from rljax.search.best_of_n import (
    Candidates,
    best_of_n,
    majority_vote,
    sample_candidates,
    weighted_vote,
)
from rljax.search.mcts import (
    GumbelMuZeroExtraData,
    PolicyOutput,
    RecurrentFn,
    RecurrentFnOutput,
    RootFnOutput,
    gumbel_muzero_interior_action_selection,
    gumbel_muzero_policy,
    gumbel_muzero_root_action_selection,
    masked_argmax,
    muzero_action_selection,
    muzero_policy,
    search,
)
from rljax.search.qtransforms import (
    qtransform_by_min_max,
    qtransform_by_parent_and_siblings,
    qtransform_completed_by_mix_value,
)
from rljax.search.tree import SearchSummary, Tree, get_subtree, reuse_subtree

__all__ = [
    "Candidates",
    "beam_search",
    "best_of_n",
    "majority_vote",
    "process_verifier_score",
    "sample_candidates",
    "weighted_vote",
    "GumbelMuZeroExtraData",
    "PolicyOutput",
    "RecurrentFn",
    "RecurrentFnOutput",
    "RootFnOutput",
    "SearchSummary",
    "Tree",
    "get_subtree",
    "gumbel_muzero_interior_action_selection",
    "gumbel_muzero_policy",
    "gumbel_muzero_root_action_selection",
    "masked_argmax",
    "muzero_action_selection",
    "muzero_policy",
    "qtransform_by_min_max",
    "qtransform_by_parent_and_siblings",
    "qtransform_completed_by_mix_value",
    "reuse_subtree",
    "search",
]
