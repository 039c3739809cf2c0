import pytest

from ocrcli.evaluation.repetition import (
    looped_token_fraction,
    tokenize_for_repetition,
    trailing_repeat_counts,
)


@pytest.mark.parametrize(
    ("text", "n", "expected"),
    [
        ("", 3, [0, 0, 0]),
        ("a", 3, [1, 0, 0]),
        ("abab", 3, [1, 2, 1]),
        ("aabaabaa", 3, [2, 1, 2]),
        ("abc", 5, [1, 1, 1, 0, 0]),
        ("xabab", 5, [1, 2, 1, 1, 1]),
        ("a \n\t a \n a", 2, [1, 2]),  # whitespace runs collapse to one space first
    ],
)
def test_trailing_repeat_counts(text, n, expected):
    assert trailing_repeat_counts(text, n) == expected


def test_long_trailing_loop_is_counted():
    assert trailing_repeat_counts("intro " + "ab" * 40, 2)[1] == 40


def test_tokenizer_keeps_words_and_single_cjk_characters():
    assert tokenize_for_repetition("Hello, World! \u4e2d\u6587 x_1 | --- |") == [
        "hello", "world", "\u4e2d", "\u6587", "x_1",
    ]


def test_no_loop_in_ordinary_text():
    tokens = tokenize_for_repetition("the quick brown fox jumps over the lazy dog " * 3)
    assert looped_token_fraction(tokens) == 0.0  # three copies are allowed


def test_loop_surplus_fraction():
    tokens = ["a", "b"] * 10  # 20 tokens, period 2, 10 copies
    # The first 3 copies (6 tokens) are allowed; 14 tokens are surplus.
    assert looped_token_fraction(tokens) == pytest.approx(14 / 20)


def test_short_runs_are_not_loops():
    assert looped_token_fraction(["0"] * 8 + ["x", "y", "z"]) == 0.0
    assert looped_token_fraction([]) == 0.0
