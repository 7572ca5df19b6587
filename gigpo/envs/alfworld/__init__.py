"""ALFWorld on the real TextWorld engine: agent env, offline task generator, fixed expert, evaluation.

Importing this package registers `gigpo/ALFWorld-v0` with Gymnasium.
"""
from gymnasium.envs.registration import register, registry

ENV_ID = "gigpo/ALFWorld-v0"

if ENV_ID not in registry:
    register(id=ENV_ID, entry_point="gigpo.envs.alfworld.env:ALFWorldEnv")

__all__ = ["ENV_ID"]
