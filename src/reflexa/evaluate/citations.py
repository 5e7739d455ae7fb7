"""The citation audit: every citation in an answer must be `[n]` naming evidence retrieved in this run.

Only the syntax the prompt asks for counts: `[n]`, one number in ASCII digits in plain brackets. Any other
bracketed number form is not a citation and fails the audit, and `clean` removes it: `[1, 99]`, `[ 99 ]`,
`[^2]`, `[1-3]`, `[99a]`, full-width and CJK brackets (`［99］`, `【99】`), other digit scripts (`[١]`) and
brackets written as HTML entities (`&#91;99&#93;`). The answer is read as it would be shown: HTML entities
decoded (`[&#57;&#57;]` is `[99]`), markdown-escaped brackets unescaped (`\\[99\\]` is `[99]`) and invisible
format characters dropped (`[9<zero-width space>9]` is `[99]`), so no spelling hides a citation from the
audit. HTML tags are removed whole, and a URL, a bare host with a path, an IP address or a data URI is kept
only when it is the source of evidence the answer cites.
"""

from __future__ import annotations

import html
import re
import unicodedata
from collections.abc import Collection, Mapping

from ..search.base import Evidence
from ..types import ErrorCode, Signal

_CITE = re.compile(r"\[([1-9][0-9]*)\]")
"""A citation: one number in ASCII digits, no leading zero (`[01]` and `[١]` are not the form asked for)."""
OPEN = "[［【〔〖〘⟦⁅﹝"
CLOSE = "]］】〕〗〙⟧⁆﹞"
_ANY_REF = re.compile(rf"[{re.escape(OPEN)}]\s*\^?\s*\d[\w\s,;.\-–]*[{re.escape(CLOSE)}]")
"""Anything that looks like a bracketed reference, valid or not: any bracket, any script's digits, suffixes."""
_TAG = re.compile(r"</?[a-zA-Z][^<>]{0,2000}>|<!--.*?-->", re.DOTALL)
"""An HTML tag (an <img> or <a> would fetch or link whatever its attributes name) or an HTML comment."""
_HEADING = re.compile(r"(?:#+ ?)?\**(?:references?|sources?|bibliography)\**:?\**(?: *\[\d.*)?", re.IGNORECASE)
"""A line (stripped) that opens a references section: the word alone as a heading, or "Sources: [1] ..."."""
_MD_LINK = re.compile(r"\[([^\]\n]*)\]\((\S+?)\)")
_URL = re.compile(r"(?:[a-z][a-z0-9+.-]{1,15})://[^\s<>()\[\]]+|(?<![\w:/])//[\w-]+(?:\.[\w-]+)+[^\s<>()\[\]]*"
                  r"|www\.[^\s<>()\[\]]+|(?:mailto|data|javascript|file):[^\s<>()\[\]]+"
                  r"|(?<![\w@/.-])(?:[a-z0-9-]+\.)+[a-z]{2,}(?::\d+)?[/?][^\s<>()\[\]\"']*"
                  r"|(?<![\w.])\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?(?:/[^\s<>()\[\]\"']*)?", re.IGNORECASE)
"""A link: with a scheme, scheme-relative (//host), www., a mailto:, data:, javascript: or file: URI, a bare
host with a path or a query (`evil.example/x?d=...`), or an IP address."""


_TITLE_URL = re.compile(r"\S*://\S*|www\.\S+")
REFERENCES = "References:\n"
"""The heading of the references block `references` writes (and an eval's score reads back)."""


def references(answer: str, evidence: list[Evidence]) -> str:
    """The references block for the evidence `answer` cites (`evidence[n - 1]` is `[n]`), built from the
    evidence only: `References:` and a line `[n] title: source` each; empty when it cites none."""
    lines = [f"[{n}] {_TITLE_URL.sub('', evidence[n - 1].title).strip()[:120]}: {evidence[n - 1].source}"
             for n in cited(answer) if 0 < n <= len(evidence)]
    return REFERENCES + "\n".join(lines) if lines else ""


def strip_references(answer: str) -> str:
    """Drop a references or sources section the model wrote itself (from its heading line to the end):
    references are built from evidence. A sentence that merely starts with "Sources ..." is kept."""
    lines = answer.split("\n")
    for number, line in enumerate(lines):
        if number and _HEADING.fullmatch(line.strip()):
            return "\n".join(lines[:number]).rstrip()
    return answer.rstrip()


def _decoded(answer: str) -> str:
    """The answer as it is shown: HTML entities decoded, markdown's `\\[` and `\\]` unescaped, invisible
    format characters gone."""
    shown = (html.unescape(answer) if "&" in answer else answer).replace("\\[", "[").replace("\\]", "]")
    # Format characters (zero-width spaces and joiners, bidi controls, soft hyphens) are shown as nothing.
    return "".join(ch for ch in shown if unicodedata.category(ch) != "Cf")


def cited(answer: str) -> list[int]:
    """The evidence numbers an answer cites in the accepted `[n]` form."""
    return sorted({int(n) for n in _CITE.findall(_decoded(answer))})


def malformed(answer: str) -> list[str]:
    """Bracketed reference forms other than `[n]`."""
    return [m.group(0) for m in _ANY_REF.finditer(_decoded(answer)) if not _CITE.fullmatch(m.group(0))]


def audit(answer: str, retrieved: Collection[int]) -> Signal:
    """UNCITED when the answer cites a number that is no retrieved evidence, or uses another citation form.
    An answer that cites nothing passes the audit (there is nothing wrong to fix), but is not verified:
    `verified` says whether anything was cited and checked."""
    unknown = [n for n in cited(answer) if n not in retrieved]
    bad_forms = malformed(answer)
    if unknown or bad_forms:
        problems = []
        if unknown:
            problems.append(f"cites {', '.join(f'[{n}]' for n in unknown)}, which no retrieved evidence has")
        if bad_forms:
            problems.append(f"uses {', '.join(sorted(set(bad_forms)))}: cite one source per bracket, as [n]")
        valid = ", ".join(f"[{n}]" for n in sorted(retrieved)) or "none"
        return Signal("citation-audit", False, ErrorCode.UNCITED, f"{'; '.join(problems)}; valid numbers: {valid}",
                      score=0.0)
    if not cited(answer):
        return Signal("citation-audit", True, message="cites nothing", score=None)
    return Signal("citation-audit", True, message="every citation names retrieved evidence", score=1.0)


def verified(answer: str, retrieved: Collection[int]) -> bool:
    """The audit passes over a non-empty set of citations."""
    return bool(cited(answer)) and audit(answer, retrieved).ok


def clean(answer: str, sources: Mapping[int, str]) -> str:
    """The answer with every unknown or malformed citation removed (its claim marked uncertain), and every
    URL or markdown link that is not the source of cited evidence removed. `sources` maps each retrieved
    evidence number to its source."""
    answer = _remove_unknown(_TAG.sub(" ", _decoded(answer)), sources.keys())
    allowed = {sources[n] for n in cited(answer) if n in sources}
    answer = _MD_LINK.sub(lambda m: m.group(0) if m.group(2) in allowed else _link_text(m.group(1), sources),
                          answer)
    return _URL.sub(lambda m: m.group(0) if m.group(0) in allowed else "", answer).strip()


def _link_text(text: str, sources: Mapping[int, str]) -> str:
    """What stays of a markdown link whose target is no cited evidence's source: its text, and a citation
    written as the link's text (`[1](url)`) stays a citation."""
    return f"[{text}]" if text.isdecimal() and text.isascii() and int(text) in sources else text


def _remove_unknown(answer: str, retrieved: Collection[int]) -> str:
    """Cut citations of unknown evidence and malformed ones, and mark each claim that carried one uncertain."""
    out = []
    for sentence in re.split(r"(?<=[.!?])\s+", answer):
        bad = [m for m in _ANY_REF.finditer(sentence)
               if not _CITE.fullmatch(m.group(0)) or int(m.group(0)[1:-1]) not in retrieved]
        if not bad:
            out.append(sentence)
            continue
        clean_text = _ANY_REF.sub(lambda m: m.group(0) if m.group(0) in _valid(retrieved) else "", sentence)
        clean_text = re.sub(r"\s+([.!?,;])", r"\1", clean_text).strip()
        out.append(f"[UNCERTAIN: {clean_text}]")
    return " ".join(out)


def _valid(retrieved: Collection[int]) -> set[str]:
    return {f"[{n}]" for n in retrieved}
