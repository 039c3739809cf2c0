from ocrcli.engine.guard import banned_tokens, is_looping
from ocrcli.models.base import GuardConfig


def test_ngram_ban_finds_repeats_in_window_and_respects_whitelist():
    cfg = GuardConfig(ngram=3, window=100)
    history = [5, 6, 7, 1, 5, 6]
    assert banned_tokens(history, cfg) == {7}
    assert banned_tokens(history, GuardConfig(ngram=3, window=100, whitelist=frozenset({7}))) == set()
    # outside the window the earlier n-gram no longer counts
    assert banned_tokens(history, GuardConfig(ngram=3, window=3)) == set()
    assert banned_tokens(history, GuardConfig(ngram=0)) == set()


def test_loop_detection_needs_enough_repeats():
    cfg = GuardConfig(loop_period_max=3, loop_repeats=4)
    assert is_looping([9, 1, 2, 1, 2, 1, 2, 1, 2], cfg)
    assert not is_looping([9, 1, 2, 1, 2, 1, 2], cfg)
    assert not is_looping([1, 2, 3, 4] * 4, cfg)  # period 4 is longer than allowed
    assert not is_looping([1] * 10, GuardConfig())
