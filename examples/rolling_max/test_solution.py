"""HumanEval/9's tests (MIT licence), as a pytest file: the candidate is imported from `solution`."""

from solution import rolling_max


def test_empty():
    assert rolling_max([]) == []


def test_increasing():
    assert rolling_max([1, 2, 3, 4]) == [1, 2, 3, 4]


def test_decreasing():
    assert rolling_max([4, 3, 2, 1]) == [4, 4, 4, 4]


def test_mixed():
    assert rolling_max([3, 2, 3, 100, 3]) == [3, 3, 3, 100, 100]
