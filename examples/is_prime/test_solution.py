from solution import is_prime


def test_small_primes():
    assert [n for n in range(20) if is_prime(n)] == [2, 3, 5, 7, 11, 13, 17, 19]


def test_below_two_is_not_prime():
    assert not is_prime(1)
    assert not is_prime(0)
    assert not is_prime(-7)


def test_larger_numbers():
    assert is_prime(97)
    assert not is_prime(91)
