"""Segmenters on adversarial and real text: linear time, and the same spans as before.

The `rules` segmenter's candidate scan was quadratic on runs of terminal punctuation (issue 17);
its spans on every paragraph of the dev sets are pinned by digests recorded from the
implementation before the fix. The `punkt` segmenter is NLTK's trained English Punkt run in
bounded windows (engine/nltk_punkt.py); it must equal `nltk.sent_tokenize` and unbounded Punkt.
"""

import hashlib
import re
import sys
from pathlib import Path

import nltk
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from thresher.engine import nltk_punkt, segment
from thresher.engine.segment import SEGMENTERS

from .conftest import load_jsonl

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fuzz"))
from shapes import SHAPES, best_seconds  # noqa: E402

SETS = ("hotpotqa_distractor", "hotpotqa_fullwiki_dev", "2wikimultihopqa", "squad_v2.0_dev",
        "nq_open_oracle", "clapnq")
# sha256 over the int64 spans of split_rules on every distinct paragraph of each dev set, in
# file order, recorded with the quadratic implementation (git main before issue 17's fix).
RULES_DIGESTS = {
    "hotpotqa_distractor": (2200, "343f2ba472b8006f99d90a5bad4b997effd460089a6a07796309cfcffbd71935"),
    "hotpotqa_fullwiki_dev": (2780, "d769c0851efc938dccadb853667eea1851ea1f9e586d250af26179c8cec7b3d7"),
    "2wikimultihopqa": (1174, "690043e915e8ea11ad75128c039c3abda5cdb9b8b37ccf796f39407df303d9eb"),
    "squad_v2.0_dev": (1169, "8773b3dfb04175f017d5944e570f4a91c67f236a17fcd295e992d403ac4e73cf"),
    "nq_open_oracle": (825, "f375e849f88977fd5eb41ca3cc1609468dfed0b1aebc940f001f5eea23986295"),
    "clapnq": (173, "d507f1cefb2d75a50103480209cb384a39afe6313683e3675cf8b88f8b63830b"),
}
# The candidate pattern before the fix: the lookahead made `re` retry every suffix of a run.
_OLD_CANDIDATE = re.compile(r"[.!?…]+[\"'”’)\]]*(?=\s)|\n[^\S\n]*\n")
# The next-sentence-start pattern before the fix (it backtracked over long whitespace runs).
_OLD_NEXT_START = re.compile(r"\s+([\"'“‘(\[]*)(\S)")


def paragraphs(name: str) -> list[str]:
    """Every distinct passage text of a dev set (HotpotQA-style sentence lists joined by "")."""
    out = []
    for r in load_jsonl(name):
        if isinstance(r.get("context"), str):
            out.append(r["context"])
        elif "context" in r:
            out.extend("".join(sentences) for _, sentences in r["context"])
        else:
            out.extend(p["text"] for p in r["passages"])
    return list(dict.fromkeys(out))


@pytest.mark.parametrize("name", SETS)
def test_rules_spans_are_unchanged_on_every_dev_paragraph(name):
    texts = paragraphs(name)
    digest = hashlib.sha256()
    for text in texts:
        digest.update(segment.split_rules(text).tobytes())
    assert (len(texts), digest.hexdigest()) == RULES_DIGESTS[name]


_ADVERSARIAL = st.lists(st.sampled_from(
    [".", "!", "?", "…", "...", '"', "'", "”", "’", ")", "]", " ", "\n", "\n\n", "\t", "\u00a0", "a", "A",
     "Dr", "U.S", "I", "1", ",", "“", "("]), max_size=60).map("".join)


@settings(max_examples=400, deadline=None)
@given(text=_ADVERSARIAL)
def test_rules_cuts_equal_the_old_candidate_scan(text):
    old = [m.end() for m in _OLD_CANDIDATE.finditer(text) if segment._is_boundary(text, m.end())]
    assert list(segment._rule_cuts(text)) == old


@settings(max_examples=400, deadline=None)
@given(text=_ADVERSARIAL)
def test_next_start_equals_the_old_pattern(text):
    for end in range(len(text)):
        if text[end].isspace():
            old = _OLD_NEXT_START.match(text, end)
            assert segment._next_start(text, end) == (old and old.group(2))


@pytest.mark.parametrize("name", sorted(SEGMENTERS))
def test_every_segmenter_is_linear_on_adversarial_shapes(name, monkeypatch):
    # Punkt's windows are made small so that 10x and 100x both span many windows.
    monkeypatch.setattr(nltk_punkt, "WINDOW", 256)
    split, n = SEGMENTERS[name], 1_000
    for shape, make in SHAPES.items():
        t1, t10 = best_seconds(split, make(n), 5), best_seconds(split, make(10 * n), 3)
        t100 = best_seconds(split, make(100 * n), 2)
        # Linear: ~10x per step; quadratic: ~100x per step, 10,000x over both. Ratios, not
        # wall-clock limits (shared CPUs). Per-character costs step up once between ~4,000 and
        # ~40,000 characters (allocator and caches: `rules` on blank lines goes 0.6 -> 1.9 us per
        # candidate, then stays), so one step may exceed 10x; the two steps together may not
        # exceed 1,000x (an exponent of 1.5; quadratic is 2).
        assert t100 / t10 < 50, f"{name} on {shape}: 10x more text took {t100 / t10:.0f}x longer"
        assert t100 / max(t1, 1e-5) < 1_000, f"{name} on {shape}: 100x more text took {t100 / t1:.0f}x longer"


def test_a_hundred_thousand_periods_are_one_sentence():
    text = "a" + "." * 100_000 + "b"
    for name, split in SEGMENTERS.items():
        spans = split(text)
        assert spans[0, 0] == 0 and spans[-1, 1] == len(text), name


@pytest.fixture(scope="module")
def nltk_english(tmp_path_factory):
    """nltk.sent_tokenize reading the same English parameters, written as punkt_tab files (the
    format nltk_data ships) into a temporary nltk data directory."""
    english = nltk_punkt.import_optional("punkt.data").load_module("english")
    root = tmp_path_factory.mktemp("nltk_data")
    lang = root / "tokenizers" / "punkt_tab" / "english"
    lang.mkdir(parents=True)
    lines = {
        "abbrev_types.txt": sorted(english.ABBREV_TYPES),
        "sent_starters.txt": sorted(english.SENT_STARTERS),
        "collocations.tab": [f"{a}\t{b}" for a, b in sorted(english.COLLOCATIONS)],
        "ortho_context.tab": [f"{k}\t{v}" for k, v in sorted(english.ORTHO_CONTEXT.items())],
    }
    for file, rows in lines.items():
        (lang / file).write_text("".join(f"{row}\n" for row in rows), encoding="utf-8")
    nltk.data.path.insert(0, str(root))
    nltk.tokenize._get_punkt_tokenizer.cache_clear()
    yield nltk.sent_tokenize
    nltk.data.path.remove(str(root))
    nltk.tokenize._get_punkt_tokenizer.cache_clear()


def _spans_of_sentences(text: str, sentences: list[str]) -> list[list[int]]:
    """Character spans of sent_tokenize's sentences (found in order), whitespace-trimmed."""
    spans, cursor = [], 0
    for sentence in sentences:
        start = text.index(sentence, cursor)
        cursor = start + len(sentence)
        stripped = sentence.strip()
        if stripped:
            a = start + len(sentence) - len(sentence.lstrip())
            spans.append([a, a + len(stripped)])
    return spans


def test_punkt_equals_nltk_sent_tokenize_on_every_hotpotqa_paragraph(nltk_english):
    texts = paragraphs("hotpotqa_distractor")
    assert len(texts) > 2000
    for text in texts:
        assert segment.split_punkt(text).tolist() == _spans_of_sentences(text, nltk_english(text)), text


def test_punkt_knows_english_abbreviations_and_cuts_without_whitespace(nltk_english):
    text = "Dr. Smith arrived at 5 p.m. yesterday. He sat. It cost etc.) and more. Fine."
    expected = ["Dr. Smith arrived at 5 p.m. yesterday.", "He sat.", "It cost etc.)", "and more.", "Fine."]
    assert nltk_english(text) == expected
    assert [text[a:b] for a, b in segment.split_punkt(text).tolist()] == expected


@pytest.mark.parametrize("window", [300, 1024])
@pytest.mark.parametrize("name", ["hotpotqa_distractor", "nq_open_oracle"])
def test_punkt_windows_equal_unbounded_punkt_on_long_texts(name, window):
    texts = paragraphs(name)
    long_texts = [" ".join(texts[i : i + 12]) for i in range(0, len(texts), 12)]
    tokenizer = nltk_punkt.english_tokenizer()
    for text in long_texts:
        unbounded = [start for start, _ in tokenizer.span_tokenize(text)]
        assert list(nltk_punkt.span_starts(text, window)) == unbounded


def test_punkt_forced_cuts_lose_no_text_and_never_overlap():
    # No sentence break followed by a space anywhere: every window ends in a forced restart.
    text = ("word" * 300 + "?) " + "x.Y" * 200 + " ") * 20
    spans = segment.split_punkt(text)
    assert np.all(spans[1:, 0] >= spans[:-1, 1])
    covered = "".join(text[a:b] for a, b in spans.tolist())
    assert covered.replace(" ", "") == text.replace(" ", "")
