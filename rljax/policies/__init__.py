"""Policies as pure ``init(key, obs) -> params`` / ``apply(params, obs) -> logits`` pairs."""

from rljax.policies.decoder import Decoder, DecoderConfig
from rljax.policies.distributions import (
    ActionDistribution,
    categorical,
    check_supports,
    diagonal_gaussian,
)
from rljax.policies.equation import (
    encode_observation,
    equation_actor_critic,
    heuristic_value,
    masked_policy,
    uniform_prior,
)
from rljax.policies.hf_checkpoint import (
    load_hf_checkpoint,
    load_hf_tokenizer,
    save_hf_checkpoint,
)
from rljax.policies.lm import Completion, KVCache, LMConfig, TinyLM
from rljax.policies.lora import (
    LoRAConfig,
    init_lora,
    load_peft_adapters,
    merge_lora,
    save_peft_adapters,
)
from rljax.policies.mlp import (
    ActorCritic,
    actor_critic_for,
    mlp_actor,
    mlp_actor_critic,
    mlp_gaussian_actor_critic,
    sequential_init,
)
from rljax.policies.qnetwork import QMLP, QNetwork, epsilon_greedy, mlp_q_network
from rljax.policies.recurrent import RecurrentActorCritic, gru_actor_critic
from rljax.policies.sac_networks import SACNetworks, mlp_sac_networks
from rljax.policies.sampling import (
    MASKED_LOGIT,
    categorical_from_uniform,
    categorical_log_prob,
    masked_logits,
    sample_categorical,
    sample_masked,
    sampling_logits,
)
from rljax.policies.tabular import Policy, tabular_softmax

__all__ = [
    "LoRAConfig",
    "init_lora",
    "merge_lora",
    "save_peft_adapters",
    "load_peft_adapters",
    "Policy",
    "tabular_softmax",
    "ActorCritic",
    "mlp_actor",
    "mlp_actor_critic",
    "mlp_gaussian_actor_critic",
    "actor_critic_for",
    "ActionDistribution",
    "categorical",
    "diagonal_gaussian",
    "check_supports",
    "sequential_init",
    "RecurrentActorCritic",
    "gru_actor_critic",
    "QNetwork",
    "QMLP",
    "mlp_q_network",
    "SACNetworks",
    "mlp_sac_networks",
    "epsilon_greedy",
    "equation_actor_critic",
    "encode_observation",
    "heuristic_value",
    "uniform_prior",
    "masked_policy",
    "sample_categorical",
    "categorical_from_uniform",
    "categorical_log_prob",
    "masked_logits",
    "sampling_logits",
    "sample_masked",
    "MASKED_LOGIT",
    "LMConfig",
    "TinyLM",
    "Completion",
    "KVCache",
    "DecoderConfig",
    "Decoder",
    # Hugging Face-layout checkpoints and tokenizers
    "load_hf_checkpoint",
    "save_hf_checkpoint",
    "load_hf_tokenizer",
]
