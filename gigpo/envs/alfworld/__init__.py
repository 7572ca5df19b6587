"""ALFWorld on the real TextWorld engine: agent env, offline task generator, fixed expert, evaluation.

Importing this package registers `gigpo/ALFWorld-v0` with Gymnasium (`gym.make(ENV_ID,
data_path=...)`); pool workers need no import, the spec carries the entry point.
"""
from pathlib import Path

from gigpo.envs.registry import register_env

ENV_ID = "gigpo/ALFWorld-v0"
#: Six generated tasks per split, one of each type (`gigpo envs alfworld-generate --n 6 --seed 0
#: --split {train,valid_unseen}`): a data_path for demos and tests that must not wait for generation.
SAMPLE_TASKS_DIR = Path(__file__).parent / "sample_tasks"
register_env(ENV_ID, "gigpo.envs.alfworld.env:ALFWorldEnv")

__all__ = ["ENV_ID", "SAMPLE_TASKS_DIR"]
