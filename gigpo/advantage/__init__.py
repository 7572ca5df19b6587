"""Advantage estimators: pure functions over flat per-step rows (GiGPO, GRPO, RLOO, PPO-GAE)."""
