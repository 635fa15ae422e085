"""Pure-functional environments with the gymnax-shaped API (see ``base``)."""

from rljax.envs.bandit import BanditParams, BanditState, KAnswerBandit
from rljax.envs.base import Environment, EnvParams, EnvState
from rljax.envs.chain import REWARD_MODES, ChainMDP, ChainParams, ChainState
from rljax.envs.classic import CartPole, CartPoleParams, CartPoleState

__all__ = [
    "KAnswerBandit",
    "BanditParams",
    "BanditState",
    "Environment",
    "EnvParams",
    "EnvState",
    "ChainMDP",
    "ChainParams",
    "ChainState",
    "REWARD_MODES",
    "CartPole", "CartPoleParams", "CartPoleState",
]
