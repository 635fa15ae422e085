"""Pure-functional environments with the gymnax-shaped API (see ``base``)."""

from rljax.envs.base import Environment, EnvParams, EnvState
from rljax.envs.chain import REWARD_MODES, ChainMDP, ChainParams, ChainState

__all__ = [
    "Environment",
    "EnvParams",
    "EnvState",
    "ChainMDP",
    "ChainParams",
    "ChainState",
    "REWARD_MODES",
]
