"""DeepSpeed engines, PPO-clip losses and the training loop."""
