"""Gymnasium-native text environments for LLM agents, and the grouped parallel env pool."""
from gigpo.envs.base import AgentEnv, parse_tagged_action, text_space

__all__ = ["AgentEnv", "parse_tagged_action", "text_space"]
