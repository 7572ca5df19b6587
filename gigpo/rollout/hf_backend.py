"""The reference backend: a transformers model in this process, batched with left padding, own decode loop."""
from __future__ import annotations

from typing import Optional

import torch

from gigpo.config import ModelConfig, RolloutConfig
from gigpo.infra.cpu_bf16 import bf16_matmuls
from gigpo.infra.dtypes import torch_dtype
from gigpo.rollout.generator import Generator, check_prompts
from gigpo.rollout.prompt_cache import LayerKV, PromptKVStore
from gigpo.rollout.types import Completion, SamplingSettings


def inverse_cdf_draw(scores: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """(rows,) tokens drawn from softmax(scores), one uniform number in [0, 1) per row.

    Why not `torch.multinomial`: it took 2.2 ms per call on 128 rows x 1,024 tokens on this CPU (a
    random number per vocabulary entry), a fifth of `sokoban_tiny`'s generation time; one number per row
    searched in the cumulative distribution takes 0.1 ms. Tokens of zero probability (-inf scores, as
    top-p leaves them) are never drawn, even when a uniform number times the total rounds up to the total.
    """
    cdf = torch.softmax(scores.double(), dim=-1).cumsum(-1)  # float64: sums over 150k entries stay exact enough
    total = cdf[:, -1:]
    token = torch.searchsorted(cdf, uniforms.to(cdf)[:, None] * total, right=True)  # first entry above u
    # u rounding up to total would run past the end: take the last token of positive probability instead
    return torch.minimum(token, (cdf < total).sum(-1, keepdim=True))[:, 0]


def sampling_warpers(temperature: float, top_p: float) -> list:
    """transformers' own temperature and top-p warpers, applied to the raw logits before the draw."""
    from transformers import TemperatureLogitsWarper, TopPLogitsWarper

    warpers: list = []
    if temperature != 1.0:
        warpers.append(TemperatureLogitsWarper(temperature))
    if top_p < 1.0:
        warpers.append(TopPLogitsWarper(top_p))
    return warpers


_MODEL, _ROLLOUT = ModelConfig(), RolloutConfig()


class HFGenerator(Generator):
    """A transformers model of its own, sampled by our decode loop; weights are copied in on update."""

    rollout_backend = "hf"

    def __init__(self, model_path: str, dtype: str = _MODEL.dtype, max_batch_size: int = _ROLLOUT.max_num_seqs,
                 share_prefill: bool = True, prompt_cache_bytes: int = int(_ROLLOUT.kv_cache_gb * 2**30)) -> None:
        """`max_batch_size` rows per `generate` call (rollout.max_num_seqs): a whole turn in one call where
        the logits budget allows, since each decode step's fixed overhead is paid per call. `share_prefill`:
        each distinct prompt is run through the model once, its KV cache copied to every row that shows
        it (see `_shared_prefill`), and kept for later turns until the rollout ends or the weights change, up to
        `prompt_cache_bytes` (0: within a call only)."""
        super().__init__()
        from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache
        from transformers.cache_utils import DynamicLayer

        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        # on the GPU when there is one: this backend generates in the trainer's process (on CPU here)
        self.device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch_dtype(dtype)).to(self.device).eval()
        self.dtype = dtype
        gen_cfg = self.model.generation_config
        eos = gen_cfg.eos_token_id if gen_cfg.eos_token_id is not None else self.tokenizer.eos_token_id
        self.eos_ids = set(eos if isinstance(eos, list) else [eos])
        self.pad_id = gen_cfg.pad_token_id if gen_cfg.pad_token_id is not None else self.tokenizer.pad_token_id
        if self.pad_id is None:
            self.pad_id = min(self.eos_ids)
        self.vocab_size = self.model.config.vocab_size
        self.max_batch_size = max_batch_size
        # a sliding-window layer keeps only the window's last tokens, so a prompt's cache cannot be cut out of it
        plain = all(type(layer) is DynamicLayer for layer in DynamicCache(config=self.model.config).layers)
        self.share_prefill = share_prefill and plain
        self.prompt_cache = PromptKVStore(prompt_cache_bytes if self.share_prefill else 0)

    @torch.inference_mode()
    def generate(self, prompts: list[list[int]], settings: SamplingSettings) -> list[Completion]:
        check_prompts(prompts, self.vocab_size)
        prompts_per_call = max(1, self.max_batch_size // settings.n)
        out: list[Completion] = []
        with torch.random.fork_rng(devices=[self.device.index] if self.device.type == "cuda" else []), \
                bf16_matmuls(self.dtype):
            if settings.seed is not None:
                torch.manual_seed(settings.seed)
            for start in range(0, len(prompts), prompts_per_call):
                out.extend(self._generate_batch(prompts[start:start + prompts_per_call], start, settings))
        return out

    def _generate_batch(self, prompts: list[list[int]], offset: int, settings: SamplingSettings) -> list[Completion]:
        rows = [p for p in prompts for _ in range(settings.n)]  # prompt-major: row i is prompt i // n
        width = max(len(p) for p in rows)
        input_ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        attention = torch.zeros((len(rows), width), dtype=torch.long)
        for i, ids in enumerate(rows):  # left padding: every prompt ends at the same column
            input_ids[i, width - len(ids):] = torch.tensor(ids)
            attention[i, width - len(ids):] = 1
        input_ids, attention = input_ids.to(self.device), attention.to(self.device)
        cache = self._shared_prefill(rows, input_ids, attention) if self.share_prefill else None
        tokens, logprobs, lengths, stopped = self._decode(input_ids, attention, cache, settings)
        completions = []
        for row, (ids, logps) in enumerate(zip(tokens.tolist(), logprobs.tolist())):
            n = lengths[row]
            completions.append(Completion(
                prompt_index=offset + row // settings.n, token_ids=ids[:n],
                text=self.tokenizer.decode(ids[:n], skip_special_tokens=True),
                logprobs=logps[:n] if settings.logprobs else None,
                finish_reason="stop" if stopped[row] else "length", weight_version=self.version))
        return completions

    def _decode(self, input_ids: torch.Tensor, attention: torch.Tensor, cache, settings: SamplingSettings
                ) -> tuple[torch.Tensor, torch.Tensor, list[int], list[bool]]:
        """Sample up to max_new_tokens per row with a KV cache; a row leaves the batch when it ends.

        Returns (rows, T) tokens and raw log-probs (before temperature and top-p), each row's length and
        whether it ended by an end token or stop string. Why not `generate`: it keeps decoding every row
        until the last one ends (on sokoban_tiny most answers end by token 8 of 12, and a few run to 12),
        and its per-call set-up is paid once per turn; this loop gave the same samples in a quarter less
        rollout CPU (docs/benchmarks.md). Row r's token t uses uniform number [t, r] of a block drawn up
        front, so a row's draws do not depend on when the other rows end.
        """
        from transformers import DynamicCache

        rows, steps = input_ids.shape[0], settings.max_new_tokens
        start = 0 if cache is None else cache.get_seq_length()  # columns already in the cache
        cache = DynamicCache(config=self.model.config) if cache is None else cache
        ends = torch.tensor(sorted(self.eos_ids | set(settings.stop_token_ids)), device=self.device)
        sampled = settings.temperature > 0
        warpers = sampling_warpers(settings.temperature, settings.top_p) if sampled else []
        uniforms = torch.rand((steps, rows), dtype=torch.float64) if sampled else None
        tokens = torch.full((rows, steps), self.pad_id, dtype=torch.long, device=self.device)
        logprobs = torch.zeros((rows, steps), device=self.device)
        lengths, stopped = [steps] * rows, [False] * rows
        live = torch.arange(rows, device=self.device)  # the rows still running, in batch order
        step_ids, mask = input_ids[:, start:], attention
        positions = (attention.cumsum(-1) - 1).clamp(min=0)[:, start:]
        for t in range(steps):
            logits = self.model(input_ids=step_ids, attention_mask=mask, position_ids=positions, past_key_values=cache,
                                use_cache=True, logits_to_keep=1).logits[:, -1].float()
            if sampled:
                scores = logits
                for warp in warpers:
                    scores = warp(None, scores)
                token = inverse_cdf_draw(scores, uniforms[t][live.cpu()])
            else:
                token = logits.argmax(-1)
            tokens[live, t] = token
            logprobs[live, t] = torch.log_softmax(logits, -1).gather(-1, token[:, None])[:, 0]
            done = torch.isin(token, ends)
            if settings.stop:  # a stop string may end inside a token: look at the text so far
                texts = self.tokenizer.batch_decode(tokens[live, :t + 1].tolist())
                done |= torch.tensor([any(s in text for s in settings.stop) for text in texts], device=self.device)
            for row in live[done].tolist():
                lengths[row], stopped[row] = t + 1, True
            keep = (~done).nonzero()[:, 0]
            if keep.numel() == 0 or t == steps - 1:
                break
            if keep.numel() < live.numel():  # finished rows leave the batch, their cache too
                cache.batch_select_indices(keep)
                live, mask, token, positions = live[keep], mask[keep], token[keep], positions[keep]
            mask = torch.cat([mask, mask.new_ones((mask.shape[0], 1))], dim=-1)
            positions, step_ids = positions[:, -1:] + 1, token[:, None]
        return tokens, logprobs, lengths, stopped

    def _shared_prefill(self, rows: list[list[int]], input_ids: torch.Tensor, attention: torch.Tensor):
        """The KV cache of every row's prompt but its last token, computed once per distinct prompt.

        Prefill is most of generation's cost at these sizes (prompts of tens of tokens, answers of a
        few): a turn's prompts repeat, all of a group's at the first step, and `n` > 1 repeats each, and
        later turns repeat earlier turns' prompts. Prompts not in `prompt_cache` go through the model
        once; every distinct prompt's cache is then laid out left-padded and indexed out to its rows,
        and the decode loop runs only each row's last prompt token before sampling. None if there is
        nothing to share (no repeats, nothing kept) or no prefix at all.
        """
        from transformers import DynamicCache

        width = input_ids.shape[1] - 1  # every prompt's prefix ends at this column (left padding)
        first: dict[tuple[int, ...], int] = {}
        index = [first.setdefault(tuple(r[:-1]), len(first)) for r in rows]
        prefixes = list(first)
        if width < 1 or (len(prefixes) == len(rows) and self.prompt_cache.max_bytes == 0):
            return None
        kv: list[Optional[LayerKV]] = [self.prompt_cache.get(p) for p in prefixes]
        missing = [i for i, layers in enumerate(kv) if layers is None]
        for i, layers in zip(missing, self._prefill([prefixes[i] for i in missing])):
            kv[i] = layers
            self.prompt_cache.put(prefixes[i], layers)
        cache = DynamicCache(config=self.model.config)
        to_rows = torch.tensor(index, device=input_ids.device)
        for layer in range(len(kv[0])):
            heads, _, head_dim = kv[0][layer][0].shape
            keys = kv[0][layer][0].new_zeros((len(prefixes), heads, width, head_dim))
            values = torch.zeros_like(keys)
            for d, layers in enumerate(kv):  # the padding's keys stay zero: the attention mask hides them
                k, v = layers[layer]
                keys[d, :, width - k.shape[1]:] = k
                values[d, :, width - k.shape[1]:] = v
            cache.update(keys[to_rows], values[to_rows], layer)
        return cache

    def _prefill(self, prefixes: list[tuple[int, ...]]) -> list[LayerKV]:
        """Per prefix, its own per-layer keys and values (heads, len(prefix), head_dim), run as one batch."""
        from transformers import DynamicCache

        if not prefixes:
            return []
        width = max(1, max(len(p) for p in prefixes))
        ids = torch.full((len(prefixes), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(prefixes), width), dtype=torch.long)
        for i, p in enumerate(prefixes):
            if p:
                ids[i, width - len(p):] = torch.tensor(p)
                mask[i, width - len(p):] = 1
        ids, mask = ids.to(self.device), mask.to(self.device)
        cache = DynamicCache(config=self.model.config)
        self.model(input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0),
                   past_key_values=cache, use_cache=True, logits_to_keep=1)
        return [[(layer.keys[i, :, width - len(p):].clone(), layer.values[i, :, width - len(p):].clone())
                 for layer in cache.layers] for i, p in enumerate(prefixes)]

    def end_rollout(self) -> None:
        self.prompt_cache.clear()

    @property
    def tied_lm_head(self) -> bool:
        """The model shares its LM head with the input embedding (a sync adds the head from the embedding)."""
        return bool(self.model.config.tie_word_embeddings)

    @property
    def torch_dtype(self) -> torch.dtype:
        return self.model.dtype

    @torch.inference_mode()
    def load_state(self, state: dict[str, torch.Tensor], version: int) -> None:
        """The engine side of a sync (gigpo.rollout.weight_sync.transports): copy a full state dict into the
        model, drop the prompt caches of the old weights, and stamp outputs with `version`."""
        self.prompt_cache.clear()  # every kept prompt cache is of the old weights
        missing, unexpected = self.model.load_state_dict(state, strict=False)
        if unexpected:
            raise ValueError(f"update_weights got parameters this model does not have: {unexpected[:5]}")
        if missing:
            raise ValueError(f"update_weights is missing parameters: {missing[:5]}")
        self._version = version

    def close(self) -> None:
        self.model = None
