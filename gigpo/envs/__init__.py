"""Gymnasium-native text environments for LLM agents, and the grouped parallel env pool.

Importing this package registers the built-in environments (`gymnasium.make("gigpo/Sokoban-v0")`).
"""
from gigpo.envs.base import AgentEnv, parse_tagged_action, text_space
from gigpo.envs.pool import EnvPool, EpisodeView, PoolStats
from gigpo.envs.registry import BUILTIN_ENVS, register_builtin_envs, register_env

register_builtin_envs()

__all__ = ["AgentEnv", "BUILTIN_ENVS", "EnvPool", "EpisodeView", "PoolStats", "parse_tagged_action", "register_env", "text_space"]
