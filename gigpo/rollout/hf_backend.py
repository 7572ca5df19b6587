"""The reference backend: transformers `generate`, batched with left padding, in this process."""
from __future__ import annotations

from typing import Iterable, Optional

import torch

from gigpo.rollout.generator import Generator, check_prompts, check_version
from gigpo.rollout.prompt_cache import LayerKV, PromptKVStore
from gigpo.rollout.types import Completion, SamplingSettings
from gigpo.rollout.weights import full_state_dict

TORCH_DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32, "bfloat16": torch.bfloat16, "float32": torch.float32}


class SampledLogprobs:
    """A logits processor that records the log-prob of each sampled token, one step at a time.

    generate's `output_logits` keeps every step's (rows x vocabulary) logits until it returns: with a
    49k vocabulary, 64 rows and 96 tokens that is 1.2 GB in fp32, copied twice more to read log-probs.
    This processor runs before temperature and top-p (transformers appends user processors before its
    warpers), so it sees the raw logits; at step t+1 the token sampled at step t is the last column of
    `input_ids`, read from the log-softmax kept from step t. Only one step's log-softmax is alive.
    """

    def __init__(self) -> None:
        self.previous: torch.Tensor | None = None  # (rows, V) fp32 log-softmax of the last step
        self.logprobs: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self.previous is not None:
            self.logprobs.append(self.previous.gather(-1, input_ids[:, -1:]).squeeze(-1))
        self.previous = torch.log_softmax(scores.float(), dim=-1)
        return scores

    def finish(self, last_tokens: torch.Tensor) -> torch.Tensor:
        """(rows, T) log-probs, given the last step's sampled tokens (rows,)."""
        if self.previous is not None:
            self.logprobs.append(self.previous.gather(-1, last_tokens[:, None]).squeeze(-1))
            self.previous = None
        return torch.stack(self.logprobs, dim=1)


class InverseCdfSampler:
    """The last logits processor of a sampled `generate`: draws each row's next token and leaves only it.

    generate then runs greedy (`do_sample=False`) and picks exactly that token. Why not generate's own
    sampling: `torch.multinomial` took 2.2 ms per call on 128 rows x 1,024 tokens on this CPU (a
    random number per vocabulary entry), a fifth of `sokoban_tiny`'s generation time; one uniform
    number per row searched in the cumulative distribution takes 0.1 ms. The draw comes from the same
    distribution (the probabilities after temperature and top-p); the random stream differs, so a
    seed gives other samples than generate's own sampling would.
    """

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        cdf = torch.softmax(scores.double(), dim=-1).cumsum(-1)  # float64: sums over 150k entries stay exact enough
        total = cdf[:, -1:]
        u = torch.rand(total.shape, dtype=torch.float64, device=scores.device) * total  # in [0, total)
        token = torch.searchsorted(cdf, u, right=True)  # first entry above u: a token of positive probability
        # u rounding up to total would run past the end: take the last token of positive probability instead
        token = torch.minimum(token, (cdf < total).sum(-1, keepdim=True))
        return torch.full_like(scores, float("-inf")).scatter_(-1, token, 0.0)


def sampling_processors(temperature: float, top_p: float) -> list:
    """Temperature, top-p and the draw, as logits processors run after the log-prob recorder."""
    from transformers import TemperatureLogitsWarper, TopPLogitsWarper

    processors: list = []
    if temperature != 1.0:
        processors.append(TemperatureLogitsWarper(temperature))
    if top_p < 1.0:
        processors.append(TopPLogitsWarper(top_p))
    return processors + [InverseCdfSampler()]


def torch_dtype(name: str) -> torch.dtype:
    if name not in TORCH_DTYPES:
        raise ValueError(f"dtype={name!r} is not supported; use one of {', '.join(TORCH_DTYPES)}")
    return TORCH_DTYPES[name]


class HFGenerator(Generator):
    """transformers generate on its own copy of the model; weights are copied in on update."""

    def __init__(self, model_path: str, dtype: str = "bf16", max_batch_size: int = 256, share_prefill: bool = True,
                 prompt_cache_bytes: int = 1 << 30) -> None:
        """`max_batch_size` rows per `generate` call (rollout.max_num_seqs): a whole turn in one call where
        the logits budget allows, since generate's per-token overhead is paid per call. `share_prefill`:
        each distinct prompt is run through the model once, its KV cache copied to every row that shows
        it (see `_shared_prefill`), and kept for later calls until the weights change, up to
        `prompt_cache_bytes` (0: within a call only)."""
        super().__init__()
        from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache
        from transformers.cache_utils import DynamicLayer

        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        # on the GPU when there is one: this backend generates in the trainer's process (on CPU here)
        self.device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch_dtype(dtype)).to(self.device).eval()
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
        with torch.random.fork_rng(devices=[self.device.index] if self.device.type == "cuda" else []):
            if settings.seed is not None:
                torch.manual_seed(settings.seed)
            for start in range(0, len(prompts), prompts_per_call):
                out.extend(self._generate_batch(prompts[start:start + prompts_per_call], start, settings))
        return out

    def _generate_batch(self, prompts: list[list[int]], offset: int, settings: SamplingSettings) -> list[Completion]:
        from transformers import LogitsProcessorList

        rows = [p for p in prompts for _ in range(settings.n)]  # prompt-major, as num_return_sequences orders them
        width = max(len(p) for p in rows)
        input_ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        attention = torch.zeros((len(rows), width), dtype=torch.long)
        for i, ids in enumerate(rows):  # left padding: every prompt ends at the same column
            input_ids[i, width - len(ids):] = torch.tensor(ids)
            attention[i, width - len(ids):] = 1
        input_ids, attention = input_ids.to(self.device), attention.to(self.device)
        cache = self._shared_prefill(rows, input_ids, attention) if self.share_prefill else None
        ends = self.eos_ids | set(settings.stop_token_ids)
        recorder = SampledLogprobs()  # first: it must see the raw logits
        # sampling happens in our processors (InverseCdfSampler), so generate itself always runs greedy
        # and none of the model's own generation defaults (top_k, min_p, ...) change the distribution
        processors = [recorder] + (sampling_processors(settings.temperature, settings.top_p) if settings.temperature > 0 else [])
        result = self.model.generate(
            input_ids=input_ids, attention_mask=attention, past_key_values=cache, max_new_tokens=settings.max_new_tokens,
            do_sample=False, temperature=None, top_p=None, top_k=None,
            num_return_sequences=1, eos_token_id=sorted(ends), pad_token_id=self.pad_id,
            stop_strings=list(settings.stop) or None, tokenizer=self.tokenizer if settings.stop else None,
            logits_processor=LogitsProcessorList(processors), return_dict_in_generate=True,
        )
        new_tokens = result.sequences[:, width:]  # (B*n, T)
        logprobs = recorder.finish(new_tokens[:, -1]).cpu()  # (B*n, T), of the raw logits: before temperature/top-p
        new_tokens = new_tokens.cpu()
        completions = []
        for row in range(new_tokens.shape[0]):
            ids, reason = self._trim(new_tokens[row].tolist(), settings.stop, ends)
            completions.append(Completion(
                prompt_index=offset + row // settings.n, token_ids=ids,
                text=self.tokenizer.decode(ids, skip_special_tokens=True),
                logprobs=logprobs[row, :len(ids)].tolist(), finish_reason=reason, weight_version=self.version))
        return completions

    def _shared_prefill(self, rows: list[list[int]], input_ids: torch.Tensor, attention: torch.Tensor):
        """The KV cache of every row's prompt but its last token, computed once per distinct prompt.

        Prefill is most of generation's cost at these sizes (prompts of tens of tokens, answers of a
        few): a turn's prompts repeat, all of a group's at the first step, and `n` > 1 repeats each, and
        later turns repeat earlier turns' prompts. Prompts not in `prompt_cache` go through the model
        once; every distinct prompt's cache is then laid out left-padded and indexed out to its rows,
        and `generate` runs only each row's last prompt token before sampling. None if there is
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

    def _trim(self, ids: list[int], stop: tuple[str, ...], ends: set[int]) -> tuple[list[int], str]:
        """Cut the padding generate adds after a row finished; say why the row finished."""
        end = next((k for k, t in enumerate(ids) if t in ends), None)
        if end is None:
            text = self.tokenizer.decode(ids)
            return ids, "stop" if any(s in text for s in stop) else "length"
        if stop and any(s in self.tokenizer.decode(ids[:end]) for s in stop):
            return ids[:end], "stop"  # finished on a stop string; what follows is padding
        return ids[:end + 1], "stop"

    @torch.inference_mode()
    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]], version: int) -> None:
        check_version(version, self.version)
        state = full_state_dict(named_tensors, bool(self.model.config.tie_word_embeddings), dtype=self.model.dtype)
        self.prompt_cache.clear()  # every kept prompt cache is of the old weights
        missing, unexpected = self.model.load_state_dict(state, strict=False)
        if unexpected:
            raise ValueError(f"update_weights got parameters this model does not have: {unexpected[:5]}")
        if missing:
            raise ValueError(f"update_weights is missing parameters: {missing[:5]}")
        self._version = version

    def close(self) -> None:
        self.model = None
