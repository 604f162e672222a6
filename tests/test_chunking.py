"""Chunking: causal-eos export parity, LGMGC cuts, multi-granular children, baselines, retrieval,
metrics, bad input, CLI. The causal LM is a tiny random Llama with a byte-level BPE tokenizer
trained here, saved in the published checkpoint layout; MiniLM (semantic, dense) is the real one."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from thresher.chunking import make_chunker
from thresher.chunking.base import check_text, sentence_units, word_starts, words_in
from thresher.chunking.baselines import (
    FixedTokensChunker,
    FixedWordsChunker,
    RecursiveChunker,
    SemanticChunker,
    SentencesChunker,
    SentenceWindowChunker,
)
from thresher.chunking.logits_guided import LogitsGuidedChunker
from thresher.chunking.metrics import budget_spans, dcg_recall_at, overlap_scores, relabelled_gold, span_mask
from thresher.chunking.multigranular import MultiGranularChunker
from thresher.chunking.retrieve import ChunkIndex

CORPUS = [
    "The cat sat on the mat. It was happy there. Meanwhile, the stock market fell sharply.",
    "Investors were worried about rates! Did the bank act? Nobody knew.\n\nA new chapter began.",
    "Rain fell over the hills for days. Rivers rose and farmers moved their animals to higher ground.",
]
CHAT = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] "
        "+ '<|im_end|>' + '\n'}}{% endfor %}")


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory):
    """A random 2-layer Llama (vocab of a byte-level BPE trained on CORPUS) with a ChatML template."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM

    out = tmp_path_factory.mktemp("tiny-llama")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok.train_from_iterator(CORPUS * 3, trainers.BpeTrainer(
        vocab_size=400, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({"chat_template": CHAT}))
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=tok.get_vocab_size(), hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=512, eos_token_id=2, bos_token_id=1, pad_token_id=0,
                         tie_word_embeddings=False)
    model = LlamaForCausalLM(config)
    with torch.no_grad():  # a sharper random head, so EOS probabilities differ between positions
        model.lm_head.weight.mul_(50)
    model.save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def eos_model(tiny_checkpoint, tmp_path_factory):
    from thresher.chunking.logits_guided import load_eos_model
    from thresher.export.causal_eos import export_causal_eos

    return load_eos_model(export_causal_eos(tiny_checkpoint, tmp_path_factory.mktemp("tiny-eos")))


def _partition_ok(text, chunks):
    parents = [c for c in chunks if c.level == 0]
    assert "".join(c.text(text) for c in parents) == text
    assert all(a.end == b.start and a.start < a.end for a, b in zip(parents, parents[1:]))
    assert all(c.parent == i for i, c in enumerate(parents))


# ---------- export and runtime ----------

def test_manifest_names_im_end_as_eos(eos_model):
    assert eos_model.eos_id == 2
    assert eos_model.prefix_ids[0] == 1  # the ChatML prefix starts with <|im_start|>


def test_onnx_eos_matches_full_vocabulary_softmax(eos_model, tiny_checkpoint):
    """Each window alone through HF (full logits, softmax over the vocabulary) equals the
    gathered head of the ONNX graph on a padded batch of windows of different lengths."""
    import torch
    from transformers import LlamaForCausalLM

    hf = LlamaForCausalLM.from_pretrained(tiny_checkpoint).eval()
    windows = CORPUS + [CORPUS[0][:40]]
    ends = [sentence_units(w)[1:] for w in windows]
    ends = [np.array([len(w[:e].rstrip()) for e in es.tolist()]) for w, es in zip(windows, ends)]
    got = eos_model.eos_log_probs(windows, ends)
    for w, e, g in zip(windows, ends, got):
        enc = eos_model._tok.encode(w, add_special_tokens=False)
        ids = np.concatenate([eos_model.prefix_ids, enc.ids])
        starts = np.array([a for a, _ in enc.offsets])
        tok = np.searchsorted(starts, e, side="left") - 1 + eos_model.prefix_ids.size
        with torch.no_grad():
            logp = torch.log_softmax(hf(torch.from_numpy(ids)[None]).logits[0], -1)[:, 2].numpy()
        np.testing.assert_allclose(g, logp[tok], atol=2e-4)
    assert len({round(float(x), 3) for g in got for x in g}) > 3  # not a constant


def test_ends_beyond_the_model_window_are_not_candidates(eos_model):
    long = " ".join(["Rain fell over the hills."] * 200)  # far more than 512 tokens
    ends = np.array([25, 51, len(long)])
    logp = eos_model.eos_log_probs([long], [ends])[0]
    assert np.isfinite(logp[:2]).all() and logp[2] == -np.inf
    with pytest.raises(ValueError, match="end lists"):
        eos_model.eos_log_probs(["a"], [])


# ---------- LGMGC ----------

def _reference_cuts(model, text, size):
    """The algorithm written plainly: one window, one model call, cut after the argmax."""
    units = sentence_units(text, "rules", max_words=size, max_chars=20 * size)
    words = words_in(units, word_starts(text))
    cuts, pos = [], 0
    while pos < len(words):
        if words[pos:].sum() <= size:
            break
        stop = pos + 1
        while stop < len(words) and words[pos:stop + 1].sum() <= size:
            stop += 1
        if stop - pos > 1:
            a = units[pos]
            window = text[a:units[stop]]
            ends = np.array([len(window[:e - a].rstrip()) for e in units[pos + 1:stop + 1].tolist()])
            pos += int(np.argmax(model.eos_log_probs([window], [ends])[0])) + 1
        else:
            pos = stop
        if pos < len(words):
            cuts.append(int(units[pos]))
    return cuts


def test_lgmgc_batched_documents_equal_sequential_reference(eos_model):
    texts = [" ".join(CORPUS * k) for k in (1, 2, 3)]
    chunker = LogitsGuidedChunker(24, eos_model, batch_docs=3)
    got = chunker.chunk_many(texts)
    for text, chunks in zip(texts, got):
        _partition_ok(text, chunks)
        assert [c.start for c in chunks[1:]] == _reference_cuts(eos_model, text, 24)
        assert max(len(c.text(text).split()) for c in chunks) <= 24
    assert sum(len(c) for c in got) > 5
    assert 0 < chunker.timings["model"] <= chunker.timings["total"]


def test_checkpoint_folder_is_exported_once_as_causal_eos(tiny_checkpoint, tmp_path, monkeypatch):
    from thresher.chunking.logits_guided import load_eos_model

    monkeypatch.setenv("THRESHER_HOME", str(tmp_path))
    model = load_eos_model(tiny_checkpoint)
    cached = list((tmp_path / "models").glob("ckpt-causal-eos-*/thresher.json"))
    assert model.kind == "causal-eos" and len(cached) == 1
    assert load_eos_model(cached[0].parent).eos_id == model.eos_id
    chunker = make_chunker("logits-guided", 12, model=model)
    _partition_ok(CORPUS[1], chunker.chunk(CORPUS[1]))


def test_lgmgc_defined_behaviour_on_odd_documents(eos_model):
    chunker = LogitsGuidedChunker(10, eos_model)
    assert chunker.chunk("") == []
    assert [(c.start, c.end) for c in chunker.chunk("  \n ")] == [(0, 4)]
    no_punct = " ".join(f"word{i}" for i in range(55))  # one "sentence" of 55 words
    chunks = chunker.chunk(no_punct)
    _partition_ok(no_punct, chunks)
    assert [len(c.text(no_punct).split()) for c in chunks] == [10] * 5 + [5]
    one_long = "Short one. " + " ".join(["long"] * 25) + ". Tail here."
    chunks = chunker.chunk(one_long)
    _partition_ok(one_long, chunks)
    assert all(len(c.text(one_long).split()) <= 10 for c in chunks)
    blob = "x" * 1000  # one "word" longer than 20 * size characters
    _partition_ok(blob, chunker.chunk(blob))
    with pytest.raises(ValueError, match=">= 2"):
        LogitsGuidedChunker(1, eos_model)


def _spans_partition(outer: tuple[int, int], spans: list[tuple[int, int]]) -> bool:
    spans = sorted(spans)
    return bool(spans) and spans[0][0] == outer[0] and spans[-1][1] == outer[1] and all(
        a < b and b == c for (a, b), (c, _) in zip(spans, spans[1:] + [(outer[1], None)]))


def _check_recursive_children(text: str, chunks, size: int) -> None:
    """LGMGC's recursive subdivision: every parent has theta/2 children partitioning it, every
    theta/2 child has theta/4 children partitioning it (so none straddles two theta/2 children),
    cuts at sentence units, each child within its size or a single unit."""
    from thresher.chunking.base import chunk_units

    units = chunk_units(text, size)
    cuts = set(units.tolist())
    starts = word_starts(text)
    parents = [c for c in chunks if c.level == 0]
    assert {c.level for c in chunks} == ({0, 1, 2} if parents else set())
    for p, parent in enumerate(parents):
        halves = [(c.start, c.end) for c in chunks if c.level == 1 and c.parent == p]
        assert _spans_partition((parent.start, parent.end), halves)
        quarters = [(c.start, c.end) for c in chunks if c.level == 2 and c.parent == p]
        for half in halves:
            inside = [q for q in quarters if half[0] <= q[0] < half[1]]
            assert all(q[1] <= half[1] for q in inside)  # nested, never straddling
            assert _spans_partition(half, inside)
        assert sum(len([q for q in quarters if h[0] <= q[0] < h[1]]) for h in halves) == len(quarters)
        for level, divisor in ((1, 2), (2, 4)):
            for c in (c for c in chunks if c.level == level and c.parent == p):
                assert c.start in cuts | {parent.start} and c.end in cuts | {parent.end}
                words = int(words_in(np.array([c.start, c.end]), starts)[0])
                one_unit = np.count_nonzero((units > c.start) & (units < c.end)) == 0
                assert words <= max(1, size // divisor) or one_unit


def test_multigranular_children_subdivide_recursively(eos_model):
    text = " ".join(CORPUS * 3)
    mg = MultiGranularChunker(LogitsGuidedChunker(24, eos_model))
    chunks = mg.chunk(text)
    _partition_ok(text, chunks)
    _check_recursive_children(text, chunks, 24)
    # A child equal to its parent is kept (the paper subdivides every chunk): a parent of at
    # most 12 words is its own theta/2 child.
    for p, parent in enumerate(c for c in chunks if c.level == 0):
        halves = [c for c in chunks if c.level == 1 and c.parent == p]
        if len(parent.text(text).split()) <= 12:
            assert [(h.start, h.end) for h in halves] == [(parent.start, parent.end)]


@settings(max_examples=60, deadline=None)
@given(words=st.lists(st.sampled_from(["alpha", "beta.", "gamma", "Dr.", "x?", "delta\n", "3.5", "é!"]),
                      max_size=120),
       size=st.integers(2, 40))
def test_recursive_children_property(words, size):
    text = " ".join(words)
    chunks = MultiGranularChunker(SentencesChunker(size)).chunk(text)
    if text:
        _partition_ok(text, chunks)
    _check_recursive_children(text, chunks, size)


# ---------- the partition property, every method ----------

TEXTS = st.lists(st.sampled_from(list("abcXY Z .!?\n\t'é中") + ["Dr.", "3.5", "\n\n", "word ", ". The "]),
                 max_size=150).map("".join)


@pytest.fixture(scope="module")
def all_chunkers(eos_model):
    from thresher.chunking.retrieve import default_embedder

    size = 7
    return [FixedWordsChunker(size), FixedTokensChunker(size), RecursiveChunker(size), SentencesChunker(size),
            SemanticChunker(size, default_embedder()), LogitsGuidedChunker(size, eos_model),
            MultiGranularChunker(LogitsGuidedChunker(size, eos_model)), MultiGranularChunker(SentencesChunker(size)),
            SentenceWindowChunker(size)]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=TEXTS)
def test_every_method_partitions_the_document_exactly(all_chunkers, text):
    for chunker in all_chunkers:
        chunks = chunker.chunk(text)
        if not text:
            assert chunks == []
            continue
        _partition_ok(text, chunks)
        for c in chunks:  # children partition their parent per level
            assert 0 <= c.start < c.end <= len(text)
            a, b = c.returned_span  # a window holds its own chunk
            assert 0 <= a <= c.start < c.end <= b <= len(text)


def test_size_limits_of_word_based_baselines():
    text = " ".join(CORPUS * 4)
    for chunker in (FixedWordsChunker(9), RecursiveChunker(9), SentencesChunker(9)):
        chunks = chunker.chunk(text)
        _partition_ok(text, chunks)
        assert max(len(c.text(text).split()) for c in chunks) <= 9, chunker.name
    sizes = [len(c.text(text).split()) for c in FixedWordsChunker(9).chunk(text)]
    assert sizes[:-1] == [9] * (len(sizes) - 1)


def test_sentence_windows_surround_their_sentence_within_size():
    text = " ".join(CORPUS * 2)
    units = sentence_units(text)
    starts = word_starts(text)
    chunks = SentenceWindowChunker(30).chunk(text)
    assert [(c.start, c.end) for c in chunks] == list(zip(units[:-1].tolist(), units[1:].tolist()))
    for c in chunks:
        a, b = c.window
        assert a in units and b in units  # whole sentences
        words = int(words_in(np.array([a, b]), starts)[0])
        assert words <= 30 or (a, b) == (c.start, c.end)
        # maximal: neither neighbour sentence would still fit
        lo, hi = int(np.searchsorted(units, a)), int(np.searchsorted(units, b))
        for j in (lo - 1, hi):
            if 0 <= j < len(units) - 1:
                assert words + int(words_in(units[j:j + 2], starts)[0]) > 30
    # retrieval indexes the sentence and returns its window
    index = ChunkIndex(text, chunks, "bm25")
    top, _ = index.search("farmers animals", top_k=1)[0]
    a, b = chunks[top].returned_span
    assert "farmers" in chunks[top].text(text) and len(text[a:b]) > len(chunks[top].text(text))


def test_semantic_cuts_where_neighbours_differ_most():
    from thresher.chunking.retrieve import default_embedder

    text = ("The cat purred on the sofa. The kitten played with the cat. "
            "Bond yields rose after the central bank raised interest rates. Stock prices fell.")
    chunks = SemanticChunker(15, default_embedder()).chunk(text)  # 28 words -> one cut
    assert [c.text(text).strip() for c in chunks][0].endswith("with the cat.")


# ---------- bad input ----------

def test_bad_input_errors():
    with pytest.raises(ValueError, match="UTF-8"):
        check_text(b"abc \xff\xfe")
    assert check_text("é".encode()) == "é"
    with pytest.raises(ValueError, match="offset 3"):
        check_text("abc\x00def")
    with pytest.raises(ValueError, match="surrogate"):
        check_text("a\udc80b")
    with pytest.raises(TypeError, match="str"):
        check_text(42)
    with pytest.raises(ValueError, match=">= 1"):
        FixedWordsChunker(0)
    with pytest.raises(TypeError, match="int"):
        SentencesChunker(2.5)
    with pytest.raises(ValueError, match="unknown chunking method"):
        make_chunker("magic", 10)
    with pytest.raises(ValueError, match="retriever"):
        ChunkIndex("a", [], "tfidf")


# ---------- retrieval and metrics ----------

def test_small_to_big_returns_the_parent_of_the_best_child():
    text = " ".join(CORPUS * 2)
    chunks = MultiGranularChunker(SentencesChunker(30)).chunk(text)
    index = ChunkIndex(text, chunks, "bm25")
    scores = index.chunk_scores(["farmers animals"])[0]
    best_child = max((i for i, c in enumerate(chunks) if c.level > 0), key=lambda i: scores[i])
    top, score = index.search("farmers animals", top_k=1)[0]
    assert top == chunks[best_child].parent and score == pytest.approx(scores[best_child])
    assert "farmers" in chunks[top].text(text)
    parent_scores = index.parent_scores(["farmers animals", "zzz unknown"])
    assert parent_scores.shape == (2, index.n_parents) and (parent_scores[1] == 0).all()


def test_dense_retrieval_with_the_default_embedder():
    text = " ".join(CORPUS)
    chunks = SentencesChunker(8).chunk(text)
    index = ChunkIndex(text, chunks, "dense")
    top, _ = index.search("flooding after heavy rain", top_k=1)[0]
    assert "Rain" in chunks[top].text(text) or "Rivers" in chunks[top].text(text)


def test_span_metrics_and_budget():
    ev = span_mask(20, [(2, 6), (10, 12)])
    got = span_mask(20, [(0, 4), (10, 20)])
    s = overlap_scores(ev, got)
    assert s == pytest.approx({"recall": 4 / 6, "precision": 4 / 14, "iou": 4 / 16})
    ends = np.array([3, 6, 10, 24, 27, 30])  # token end offsets of the document
    assert budget_spans([(0, 10), (20, 30)], ends, 4) == [(0, 10), (20, 24)]
    # overlapping spans pay only for text not yet taken: (3, 24) adds (10, 24), one token
    assert budget_spans([(0, 10), (3, 24), (20, 30)], ends, 5) == [(0, 10), (10, 24), (24, 27)]
    assert budget_spans([(0, 10), (0, 10), (20, 30)], ends, 10) == [(0, 10), (20, 30)]
    assert relabelled_gold(["the cat sat", "stock market fell"], "market fell") == 1
    assert dcg_recall_at(0, 3) == (1.0, 1.0) and dcg_recall_at(1, 3)[0] == pytest.approx(1 / np.log2(3))
    assert dcg_recall_at(3, 3) == (0.0, 0.0)


# ---------- CLI ----------

def test_cli_chunk_jsonl_reconstructs_the_file(tmp_path, capsys):
    from thresher.cli import main

    path = tmp_path / "doc.txt"
    text = " ".join(CORPUS)
    path.write_text(text, encoding="utf-8")
    assert main(["chunk", str(path), "--method", "mg-sentences", "--size", "12"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert "".join(r["text"] for r in rows if r["level"] == 0) == text
    assert any(r["level"] == 1 for r in rows)
    assert main(["chunk", str(path), "--method", "sentence-window", "--size", "12"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert "".join(r["text"] for r in rows) == text
    assert all(r["window"][0] <= r["start"] < r["end"] <= r["window"][1] for r in rows)
    path.write_bytes(b"caf\xe9")
    assert main(["chunk", str(path), "--method", "sentences"]) == 2
    assert "UTF-8" in capsys.readouterr().err
