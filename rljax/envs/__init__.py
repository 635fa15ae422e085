"""Pure-functional environments with the gymnax-shaped API (see ``base``)."""

from rljax.envs.arithmetic import LEVEL_NAMES, ArithmeticTask, Problems, Rewards
from rljax.envs.bandit import (
    BanditParams,
    BanditState,
    KAnswerBandit,
    PromptBank,
    PromptBankParams,
    PromptBankState,
)
from rljax.envs.base import Environment, EnvParams, EnvState
from rljax.envs.batched import ENV_AXIS, vmap_env
from rljax.envs.brax_adapter import BraxEnv, BraxParams, BraxState, from_brax
from rljax.envs.chain import REWARD_MODES, ChainMDP, ChainParams, ChainState
from rljax.envs.classic import CartPole, CartPoleParams, CartPoleState
from rljax.envs.equation import EquationEnv, EquationParams, EquationState
from rljax.envs.gymnax_adapter import GymnaxEnv, from_gymnax
from rljax.envs.jumanji_adapter import JumanjiEnv, JumanjiParams, JumanjiState, from_jumanji
from rljax.envs.masked import MaskObservation, masked_cartpole
from rljax.envs.registry import (
    BRAX_PREFIX,
    env_flattened,
    env_kind,
    is_brax,
    make_env,
    raw_env,
)
from rljax.envs.spaces import Box, Discrete, Space, as_rljax_space, from_gymnax_space
from rljax.envs.text_problems import (
    WORD_PROBLEM_LEVELS,
    arithmetic_text_problems,
    arithmetic_text_task,
    word_problem_task,
    word_problems,
)
from rljax.envs.text_tasks import (
    TextProblem,
    TokenizedTask,
    Verifier,
    gsm8k_answer,
    is_eval_text,
    numeric_verifier,
)
from rljax.envs.wrappers import (
    ClipAction,
    FlattenObservation,
    LogState,
    LogWrapper,
    NormalizeObservation,
    NormalizeObservationState,
    NormalizeReward,
    NormalizeRewardState,
    RunningMoments,
    TimeLimit,
    TimeLimitState,
    Wrapper,
)

__all__ = [
    "Space",
    "Discrete",
    "Box",
    "as_rljax_space",
    "from_gymnax_space",
    "Environment",
    "EnvParams",
    "EnvState",
    "ChainMDP",
    "ChainParams",
    "ChainState",
    "REWARD_MODES",
    "KAnswerBandit",
    "BanditParams",
    "BanditState",
    "PromptBank",
    "PromptBankParams",
    "PromptBankState",
    "CartPole",
    "CartPoleParams",
    "CartPoleState",
    "EquationEnv",
    "EquationParams",
    "EquationState",
    "GymnaxEnv",
    "from_gymnax",
    "BraxEnv",
    "BraxParams",
    "BraxState",
    "from_brax",
    "JumanjiEnv",
    "JumanjiParams",
    "JumanjiState",
    "from_jumanji",
    "make_env",
    "raw_env",
    "env_kind",
    "env_flattened",
    "is_brax",
    "BRAX_PREFIX",
    "ArithmeticTask",
    "Problems",
    "Rewards",
    "LEVEL_NAMES",
    "TextProblem",
    "TokenizedTask",
    "Verifier",
    "gsm8k_answer",
    "numeric_verifier",
    "is_eval_text",
    "word_problems",
    "word_problem_task",
    "arithmetic_text_problems",
    "arithmetic_text_task",
    "WORD_PROBLEM_LEVELS",
    "MaskObservation",
    "masked_cartpole",
    "ENV_AXIS",
    "vmap_env",
    "Wrapper",
    "TimeLimit",
    "TimeLimitState",
    "FlattenObservation",
    "ClipAction",
    "LogWrapper",
    "LogState",
    "RunningMoments",
    "NormalizeObservation",
    "NormalizeObservationState",
    "NormalizeReward",
    "NormalizeRewardState",
]
