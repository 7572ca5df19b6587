"""A complete gigpo environment: guess a secret number from 1 to 9, told "too low" or "too high"."""
from typing import Any, Optional

from gigpo.envs import AgentEnv, EnvPool, register_env


class GuessNumberEnv(AgentEnv):
    task = "Guess the secret number from 1 to 9."

    def _reset(self, options: Optional[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
        self.secret, self.low, self.high = int(self.np_random.integers(1, 10)), 1, 9  # same seed, same game
        return "No guess yet.", {}

    def _step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        guess = int(action)
        verdict = "too low" if guess < self.secret else "too high" if guess > self.secret else "correct"
        self._won = verdict == "correct"
        self.low = max(self.low, guess + 1) if guess < self.secret else self.low
        self.high = min(self.high, guess - 1) if guess > self.secret else self.high
        return f"{guess} is {verdict}.", 10.0 if self._won else -0.1, self._won, {}

    def admissible_actions(self) -> list[str]:
        return [str(n) for n in range(1, 10)]

    def anchor(self) -> str:  # "5 is too low." means different states: group by what is known instead
        return f"between {self.low} and {self.high}"

    def expert_action(self) -> str:
        return str((self.low + self.high) // 2)


register_env("examples/GuessNumber-v0", GuessNumberEnv)
if __name__ == "__main__":  # worker processes are spawned: keep the pool behind this guard
    with EnvPool("examples/GuessNumber-v0", max_steps=9, workers=2) as pool:
        pool.reset(seeds=[0, 1], group_size=2)
        while pool.live_episodes():
            pool.step({i: f"<action>{a}</action>" for i, a in pool.expert_actions().items()})
        for view in pool.episodes:
            print(view.episode_idx, view.group_idx, view.step, view.won, view.anchor, view.observation)
