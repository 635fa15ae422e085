"""Policies as pure ``init(key, obs) -> params`` / ``apply(params, obs) -> logits`` pairs."""

from rljax.policies.mlp import ActorCritic, mlp_actor, mlp_actor_critic, sequential_init
from rljax.policies.sampling import (
    categorical_from_uniform,
    categorical_log_prob,
    sample_categorical,
)
from rljax.policies.tabular import Policy, tabular_softmax

__all__ = [
    "ActorCritic", "mlp_actor", "mlp_actor_critic", "sequential_init",
    "Policy",
    "tabular_softmax",
    "sample_categorical",
    "categorical_from_uniform",
    "categorical_log_prob",
]
