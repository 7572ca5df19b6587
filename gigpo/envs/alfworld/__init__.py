"""ALFWorld on the real TextWorld engine: agent env, offline task generator, fixed expert, evaluation.

Importing this package registers `gigpo/ALFWorld-v0` with Gymnasium (`gym.make(ENV_ID,
data_path=...)`); pool workers need no import, the spec carries the entry point.
"""
from gigpo.envs.registry import register_env

ENV_ID = "gigpo/ALFWorld-v0"
register_env(ENV_ID, "gigpo.envs.alfworld.env:ALFWorldEnv")

__all__ = ["ENV_ID"]
