"""Which response tokens spell the action: the text inside `<action>...</action>`.

The loss is averaged over every response token, and in a short answer most of them are format
(`<action>`, `</action>`, the end of turn). Diagnostics averaged that way hide what the policy does
to the move itself: KL and clip fraction per move were up to 8x the logged token means (issue 24).
The trainer therefore also reports them over the tokens this mask selects.
"""
from __future__ import annotations

import re
from typing import Protocol, Sequence

_INSIDE_ACTION = re.compile(r"<action>(.*?)</action>", re.DOTALL)


class Decoder(Protocol):
    def decode(self, ids: Sequence[int], skip_special_tokens: bool = ...) -> str: ...


def action_token_mask(tokenizer: Decoder, response_ids: Sequence[int]) -> list[bool]:
    """One flag per response token: True where the token's text overlaps the action inside the first tags.

    Token boundaries come from decoding prefixes (byte-level tokenizers have no per-token text), found by
    binary search, so a long reasoning answer costs O(log n) decodes, not n. No tags: all False.
    """
    ids = list(response_ids)
    match = _INSIDE_ACTION.search(tokenizer.decode(ids, skip_special_tokens=True))
    if match is None or match.start(1) == match.end(1):
        return [False] * len(ids)
    lengths: dict[int, int] = {}

    def decoded_length(k: int) -> int:  # characters the first k tokens decode to
        if k not in lengths:
            lengths[k] = len(tokenizer.decode(ids[:k], skip_special_tokens=True))
        return lengths[k]

    def first_prefix_longer_than(chars: int) -> int:  # smallest k whose first k tokens decode past `chars`
        low, high = 0, len(ids)
        while low < high:
            mid = (low + high) // 2
            if decoded_length(mid) > chars:
                high = mid
            else:
                low = mid + 1
        return low

    first = first_prefix_longer_than(match.start(1)) - 1  # the token holding the action's first character
    last = first_prefix_longer_than(match.end(1) - 1) - 1  # ... and its last
    return [first <= k <= last for k in range(len(ids))]
