"""What goes into and comes out of a generator: sampling settings and completions."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal, Optional

from gigpo.config import RolloutConfig

FinishReason = Literal["stop", "length"]
_ROLLOUT = RolloutConfig()


@dataclass(frozen=True)
class SamplingSettings:
    """How to sample. temperature=0 is greedy. Defaults: rollout's (gigpo.config), but no stop strings.

    `seed` makes a call reproducible where the backend allows: vLLM seeds request i with `seed + i`
    (the same prompt list and seed give the same samples on any batch split); HF seeds the whole
    batched call (the same call gives the same samples).
    """

    temperature: float = _ROLLOUT.temperature
    top_p: float = _ROLLOUT.top_p
    max_new_tokens: int = _ROLLOUT.max_new_tokens
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    """Token ids that end a completion like EOS does (kept in the output, finish reason "stop")."""
    n: int = 1
    seed: Optional[int] = None
    logprobs: bool = True
    """Return each sampled token's log-prob (Completion.logprobs). False: the generator computes none (vLLM
    then skips a full-vocabulary log-softmax and a Python object per token) and Completion.logprobs is None."""

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"temperature={self.temperature} must be >= 0 (0 is greedy)")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p={self.top_p} must be in (0, 1]")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens={self.max_new_tokens} must be >= 1")
        if self.n < 1:
            raise ValueError(f"n={self.n} must be >= 1")
        if isinstance(self.stop, (str, list)):
            object.__setattr__(self, "stop", (self.stop,) if isinstance(self.stop, str) else tuple(self.stop))
        object.__setattr__(self, "stop_token_ids", tuple(int(t) for t in self.stop_token_ids))

    def to_json(self) -> dict:
        return {"temperature": self.temperature, "top_p": self.top_p, "max_new_tokens": self.max_new_tokens,
                "stop": list(self.stop), "stop_token_ids": list(self.stop_token_ids), "n": self.n, "seed": self.seed,
                "logprobs": self.logprobs}

    @classmethod
    def from_json(cls, data: dict) -> "SamplingSettings":
        return cls(**{**data, "stop": tuple(data.get("stop", ())), "stop_token_ids": tuple(data.get("stop_token_ids", ()))})


@dataclass
class Completion:
    """One sampled continuation of prompt `prompt_index`.

    `logprobs[t]` is log p(token_ids[t] | prompt, token_ids[:t]) under the model's own distribution
    (raw logits: no temperature or top-p applied), the quantity the trainer recomputes; None when the
    sampling settings asked for none (SamplingSettings.logprobs), never a placeholder number.
    """

    prompt_index: int
    token_ids: list[int]
    text: str
    logprobs: Optional[list[float]]
    finish_reason: FinishReason
    weight_version: int

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> "Completion":
        return cls(**data)
