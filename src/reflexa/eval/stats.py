"""The paired statistic of an eval: exact McNemar on the tasks two strategies disagree on."""

from __future__ import annotations

from math import comb


def mcnemar(b: int, c: int) -> float:
    """The exact (binomial) two-sided McNemar p-value: `b` tasks only the first strategy solved, `c` only
    the second. Under "neither is better" each disagreement goes either way with chance 1/2; 1.0 when
    they never disagree."""
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(comb(n, i) for i in range(min(b, c) + 1)) / 2**n
    return min(1.0, 2 * tail)
