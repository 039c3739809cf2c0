import numpy as np
import pytest

from ocrcli.evaluation.bootstrap import bootstrap_mean_of_means


def test_interval_brackets_the_estimate_and_is_reproducible():
    groups = [[1, 0, 1, 1, 0, 1, 1, 1], [0, 0, 1, 0]]
    point = (6 / 8 + 1 / 4) / 2
    a = bootstrap_mean_of_means(groups, 2000, np.random.default_rng(3))
    b = bootstrap_mean_of_means(groups, 2000, np.random.default_rng(3))
    assert a == b
    low, high = a
    assert 0.0 <= low < point < high <= 1.0


def test_constant_groups_have_no_spread():
    assert bootstrap_mean_of_means([[1, 1, 1], [0, 0]], 100, np.random.default_rng(0)) == (
        pytest.approx(0.5),
        pytest.approx(0.5),
    )


def test_resampling_is_within_groups():
    # Pooled resampling would mix the groups; within-group resampling of two
    # constant groups cannot move the mean of means at all.
    groups = [[1.0] * 50, [0.0] * 2]
    low, high = bootstrap_mean_of_means(groups, 500, np.random.default_rng(1))
    assert low == high == pytest.approx(0.5)


def test_nothing_to_resample():
    assert bootstrap_mean_of_means([], 100, np.random.default_rng(0)) is None
    assert bootstrap_mean_of_means([[]], 100, np.random.default_rng(0)) is None
    assert bootstrap_mean_of_means([[1.0]], 0, np.random.default_rng(0)) is None
