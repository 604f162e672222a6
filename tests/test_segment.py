"""Sentence segmenters: span invariants on random text (hypothesis) and concrete cases."""

import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from thresher.engine import nltk_punkt, segment
from thresher.engine.segment import SEGMENTERS, get_segmenter, spans_from_cuts

# Sentence-like text: words, terminal and closing punctuation, quotes, abbreviations, initials,
# decimals, blank lines, non-breaking and other unicode spaces, non-Latin and astral characters.
_PIECES = st.sampled_from([
    "The", "cat", "sat", "Dr.", "J.", "K.", "U.S.", "3.50", "No.", "c.", "etc.", "I.", ".", "!",
    "?", "...", "…", '"', "'", "“", "”", "(", ")", "[", "]", " ", " ", " ", "\n", "\n\n", "\t",
    "\u00a0", "\u2003", "\r\n", "é", "東京", "😀", "x", "A", "1", ",", ";",
])
TEXTS = st.one_of(
    st.lists(_PIECES, max_size=40).map("".join),
    st.text(max_size=60),
)


def check_spans(text: str, spans: np.ndarray) -> None:
    assert spans.dtype == np.int64 and spans.ndim == 2 and spans.shape[1] == 2
    starts, ends = spans[:, 0], spans[:, 1]
    assert np.all(starts < ends), "every span is non-empty"
    assert np.all(ends[:-1] <= starts[1:]), "spans are sorted and do not overlap"
    covered = np.zeros(len(text), dtype=bool)
    for a, b in spans.tolist():
        assert 0 <= a < b <= len(text)
        assert not text[a].isspace() and not text[b - 1].isspace(), f"untrimmed span {text[a:b]!r}"
        covered[a:b] = True
    lost = [c for c, cov in zip(text, covered) if not cov and not c.isspace()]
    assert not lost, f"non-whitespace characters outside every span: {lost!r}"


@pytest.mark.parametrize("name", sorted(SEGMENTERS))
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=TEXTS)
def test_spans_sorted_trimmed_and_cover_every_non_whitespace_char(name, text):
    check_spans(text, SEGMENTERS[name](text))


@settings(max_examples=200, deadline=None)
@given(text=TEXTS, cuts=st.lists(st.integers(-5, 70), max_size=10))
def test_spans_from_cuts_ignores_bad_cuts(text, cuts):
    check_spans(text, spans_from_cuts(text, cuts))


@pytest.mark.parametrize("name", sorted(SEGMENTERS))
@pytest.mark.parametrize("text", ["", " ", "\n\n\t \u00a0"])
def test_empty_or_blank_text_gives_no_spans(name, text):
    spans = SEGMENTERS[name](text)
    assert spans.shape == (0, 2) and spans.dtype == np.int64


@pytest.mark.parametrize("name", sorted(SEGMENTERS))
def test_one_megabyte_text_is_segmented_completely(name):
    unit = ("Dr. J. K. Smith paid $3.50 in the U.S. on Jan. 5. He left! Did she? "
            "\"Yes,\" she said. ")
    text = unit * (1_000_000 // len(unit) + 1)
    spans = SEGMENTERS[name](text)
    check_spans(text, spans)
    if name != "whole":
        assert spans.shape[0] > 10_000  # really split, not one giant sentence


def sentences(text: str, name: str = "rules") -> list[str]:
    return [text[a:b] for a, b in get_segmenter(name)(text).tolist()]


@pytest.mark.parametrize("text, expected", [
    ("Dr. Smith met Mr. Jones at St. Mary's. They talked.",
     ["Dr. Smith met Mr. Jones at St. Mary's.", "They talked."]),
    ("J. K. Rowling wrote it. Harry S. Truman read it.",
     ["J. K. Rowling wrote it.", "Harry S. Truman read it."]),
    ("It costs $3.50 or 2.5 kg. Next one.", ["It costs $3.50 or 2.5 kg.", "Next one."]),
    ("The U.S. Army won. It was 1945.", ["The U.S. Army won.", "It was 1945."]),
    ("Luigi Rossi (c. 1597 – 1653) was a composer. He wrote No. 5 in 1640.",
     ["Luigi Rossi (c. 1597 – 1653) was a composer.", "He wrote No. 5 in 1640."]),
    ("He served in World War I. Returning home, he wrote.",
     ["He served in World War I.", "Returning home, he wrote."]),
    ('He said "Stop." Then he left. Really? Yes!', ['He said "Stop."', "Then he left.", "Really?", "Yes!"]),
    ("It rose approx. five metres. Then it fell.", ["It rose approx. five metres.", "Then it fell."]),
    ("A title without a stop\n\nThe body starts here.", ["A title without a stop", "The body starts here."]),
    ("no punctuation at all here", ["no punctuation at all here"]),
    ("  Leading and trailing space.   ", ["Leading and trailing space."]),
])
def test_rules_concrete_cases(text, expected):
    assert sentences(text) == expected


@pytest.mark.parametrize("name", sorted(SEGMENTERS))
def test_every_segmenter_splits_plain_sentences_and_keeps_unpunctuated_text_whole(name):
    assert sentences("no punctuation at all here", name) == ["no punctuation at all here"]
    if name != "whole":
        assert sentences("The cat sat. The dog ran. A bird flew.", name) == [
            "The cat sat.", "The dog ran.", "A bird flew."]


def test_punkt_has_the_trained_english_abbreviations():
    assert sentences("Dr. Smith arrived. He sat.", "punkt") == ["Dr. Smith arrived.", "He sat."]


@pytest.mark.parametrize("name", sorted(set(SEGMENTERS) - {"whole"}))
def test_offsets_are_character_offsets_into_the_original_text(name):
    # Astral characters (UTF-16 surrogate pairs, 4 UTF-8 bytes) and CJK before the cuts.
    text = "Ünïcødé first. 東京 second 😀. Third\u00a0one."
    assert sentences(text, name) == ["Ünïcødé first.", "東京 second 😀.", "Third\u00a0one."]


def test_default_segmenter_is_registered():
    assert segment.DEFAULT_SEGMENTER in SEGMENTERS


@pytest.mark.parametrize("name, module", [
    ("blingfire", "blingfire"), ("punkt", "nltk.tokenize.punkt"), ("punkt", "punkt.data")])
def test_missing_optional_package_names_the_extra(name, module, monkeypatch):
    nltk_punkt.english_tokenizer.cache_clear()
    monkeypatch.setitem(sys.modules, module, None)  # makes `import module` raise ImportError
    with pytest.raises(ImportError, match=r"thresher\[segment\]"):
        SEGMENTERS[name]("One. Two.")
    nltk_punkt.english_tokenizer.cache_clear()


def test_unknown_segmenter_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown segmenter 'nope'.*rules"):
        get_segmenter("nope")
