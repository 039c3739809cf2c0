from ocrcli.training.data import page_lines
from ocrcli.training.synth import available_fonts, make_page
from ocrcli.training.text import TextSources


def test_pages_are_deterministic_by_seed_and_carry_markdown():
    src = TextSources.load("train", max_files=40)
    a, b = make_page(7, src), make_page(7, src)
    assert a.markdown == b.markdown and a.image.tobytes() == b.image.tobytes()
    assert make_page(8, src).markdown != a.markdown
    assert a.lines and all(line.text for line in a.lines)


def test_train_and_test_text_come_from_different_files():
    train, test = TextSources.load("train"), TextSources.load("test")
    shared = set(train.prose) & set(test.prose)  # boilerplate docstrings repeat across files
    assert test.prose and len(shared) < 0.05 * len(set(test.prose))
    assert not set(train.words) & set(test.words)


def test_most_pages_segment_into_their_typeset_lines():
    src = TextSources.load("train", max_files=40)
    matched = sum(page_lines(make_page(seed, src)) is not None for seed in range(12))
    assert matched >= 8  # the rest are skipped in training, never mislabelled


def test_dejavu_is_enough():
    fonts = available_fonts()
    assert all(fonts[role] for role in ("serif", "sans", "bold", "mono"))
