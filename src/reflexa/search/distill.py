"""Distillation: keep the 1-3 sentences of a hit most relevant to the query, not whole pages."""

from __future__ import annotations

import re
from dataclasses import replace

from ..types import valid_text
from .base import Evidence

SENTENCES = 3
_SPLIT = re.compile(r"(?<=[.!?])\s+|\n+")
_WORD = re.compile(r"\w+")
_STOP = {"the", "a", "an", "of", "in", "on", "and", "or", "to", "is", "was", "what", "which", "who", "when",
         "where", "how", "for", "by", "with", "as", "at", "from", "that", "this", "it", "did", "does", "do"}


def _terms(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in _STOP}


def distill(evidence: Evidence, query: str, sentences: int = SENTENCES) -> Evidence:
    """The same evidence with its snippet cut to the best `sentences` sentences, in their original order (its
    text made valid: a hostile page may hold lone surrogates)."""
    evidence = replace(evidence, title=valid_text(evidence.title), snippet=valid_text(evidence.snippet),
                       source=valid_text(evidence.source))
    parts = [s.strip() for s in _SPLIT.split(evidence.snippet) if s.strip()]
    if len(parts) <= sentences:
        return evidence
    wanted = _terms(query)
    ranked = sorted(range(len(parts)), key=lambda i: (-len(wanted & _terms(parts[i])), i))[:sentences]
    return replace(evidence, snippet=" ".join(parts[i] for i in sorted(ranked)))
