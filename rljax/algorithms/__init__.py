"""Policy-gradient algorithms as optax-style transforms (factories -> RLTransform)."""

from rljax.algorithms.base import AsOptaxState, RLTransform, as_optax
from rljax.algorithms.reinforce import EpisodeBatch, ReinforceState, reinforce

__all__ = ["RLTransform", "AsOptaxState", "as_optax", "reinforce", "EpisodeBatch", "ReinforceState"]
