import pytest

from ocrcli.evaluation.edit_distance import (
    page_text_edit_distance,
    reading_order_edit_distance,
    text_edit_distance,
)


def test_text_edit_distance_is_normalised_by_the_longer_side():
    assert text_edit_distance("abcd", "abXd", normalize=False) == pytest.approx(1 / 4)
    assert text_edit_distance("abc", "abcdef", normalize=False) == pytest.approx(3 / 6)
    assert text_edit_distance("", "", normalize=False) == 0.0
    assert text_edit_distance("", "abc", normalize=False) == 1.0


def test_text_edit_distance_ignores_punctuation_and_whitespace():
    assert text_edit_distance("Hello,  world!", "hello world") == pytest.approx(1 / 10)
    assert text_edit_distance("The value of $\\alpha$ is 2.", "The value of α is 2") == 0.0


def test_page_aggregation_sums_before_dividing():
    pairs = [("aaaa", "aaaa"), ("b", "c")]
    # 1 edit over 5 characters, not the mean of 0 and 1.
    assert page_text_edit_distance(pairs) == pytest.approx(1 / 5)
    assert page_text_edit_distance([]) == 0.0
    # Each pair contributes its longer side's length.
    assert page_text_edit_distance([("abcdef", "abc"), ("x", "x")]) == pytest.approx(3 / 7)


def test_reading_order():
    assert reading_order_edit_distance([0, 1, 2, 3]) == 0.0
    assert reading_order_edit_distance([1, 0, 2, 3]) == pytest.approx(2 / 4)
    # A missed block counts when all ground-truth indices are given.
    assert reading_order_edit_distance([0, 2], truth_indices=[0, 1, 2]) == pytest.approx(1 / 3)
    assert reading_order_edit_distance([]) == 0.0
