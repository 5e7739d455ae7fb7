"""The citation audit: every [n] in an answer must name evidence retrieved in this run."""

from __future__ import annotations

import re
from collections.abc import Collection

from ..types import ErrorCode, Signal

_CITE = re.compile(r"\[(\d+)\]")
_REFERENCES = re.compile(r"\n+\s*(#+\s*)?references?:?\s*\n.*\Z", re.IGNORECASE | re.DOTALL)


def strip_references(answer: str) -> str:
    """Drop a references section the model wrote itself: references are built from retrieved evidence only."""
    return _REFERENCES.sub("", answer).rstrip()


def cited(answer: str) -> list[int]:
    return sorted({int(n) for n in _CITE.findall(answer)})


def audit(answer: str, retrieved: Collection[int]) -> Signal:
    """UNCITED when the answer cites a number that is not retrieved evidence."""
    unknown = [n for n in cited(answer) if n not in retrieved]
    if unknown:
        return Signal("citation-audit", False, ErrorCode.UNCITED,
                      f"cites {', '.join(f'[{n}]' for n in unknown)}, which no retrieved evidence has; "
                      f"valid numbers: {', '.join(f'[{n}]' for n in sorted(retrieved)) or 'none'}", score=0.0)
    return Signal("citation-audit", True, message="every citation names retrieved evidence", score=1.0)


def remove_unknown(answer: str, retrieved: Collection[int]) -> str:
    """Cut citations of unknown evidence and mark each claim that carried one as uncertain."""
    sentences = re.split(r"(?<=[.!?])\s+", answer)
    out = []
    for sentence in sentences:
        bad = [n for n in cited(sentence) if n not in retrieved]
        if not bad:
            out.append(sentence)
            continue
        clean = re.sub(r"\s*\[(\d+)\]", lambda m: "" if int(m.group(1)) in bad else m.group(0), sentence).strip()
        out.append(f"[UNCERTAIN: {clean}]")
    return " ".join(out)
