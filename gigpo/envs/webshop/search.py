"""BM25 search over the catalogue with `bm25s` (pure Python + NumPy; the reference uses Lucene via Java).

Each product is indexed as its title, bullet points, description and option values, lower-cased,
split into words of two or more characters, English stopwords removed (bm25s' defaults, Lucene's
BM25 variant with k1=1.5, b=0.75). A query returns the ids of the top `SEARCH_RETURN_N` products
with a positive score, best first; ties keep catalogue order, so results are the same in every
process.
"""
from __future__ import annotations

from typing import Sequence

import bm25s
import numpy as np

SEARCH_RETURN_N = 50


def _tokenize(texts: list[str]) -> list[list[str]]:
    return bm25s.tokenize(texts, stopwords="en", return_ids=False, show_progress=False)


class SearchIndex:
    """BM25 over (product id, indexed text) pairs; takes plain strings, so the catalogue can own an index
    without this module importing the catalogue back."""

    def __init__(self, documents: Sequence[tuple[str, str]]) -> None:
        if not documents:
            raise ValueError("cannot index an empty catalogue")
        self.asins = [asin for asin, _ in documents]
        corpus = bm25s.tokenize([text for _, text in documents], stopwords="en", show_progress=False)
        self.vocab: dict[str, int] = corpus.vocab
        self.retriever = bm25s.BM25()
        self.retriever.index(corpus, show_progress=False)

    def search(self, keywords: str, k: int = SEARCH_RETURN_N) -> list[str]:
        """Product ids of the best `k` matches for `keywords` (fewer when fewer products share a word)."""
        return self.search_many([keywords], k)[0]

    def search_many(self, queries: Sequence[str], k: int = SEARCH_RETURN_N) -> list[list[str]]:
        """`search` for several queries in one batched call."""
        tokens = [[t for t in q if t in self.vocab] for q in _tokenize(list(queries))]
        results: list[list[str]] = [[] for _ in queries]
        asked = [i for i, t in enumerate(tokens) if t]
        if not asked:
            return results
        k = min(k, len(self.asins))
        ids = [[self.vocab[t] for t in tokens[i]] for i in asked]
        docs, scores = self.retriever.retrieve(ids, k=k, show_progress=False, n_threads=1)
        for row, i in enumerate(asked):
            # bm25s sorts by score only; re-sort so that equal scores keep catalogue order
            order = np.lexsort((docs[row], -scores[row]))
            results[i] = [self.asins[docs[row][j]] for j in order if scores[row][j] > 0]
        return results
