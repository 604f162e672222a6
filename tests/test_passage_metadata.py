"""Passages with "id" and "metadata" (what retrievers return): accepted by the API, the CLI and
the server, echoed unchanged in each passage's result; results parse back from their JSON."""

import json
import subprocess
import sys

import httpx
import pytest

from thresher.engine.result import CompressionResult

from .conftest import load_jsonl
from .test_server import serve

PASSAGES = [
    {"id": "doc-7", "title": "Hamlet", "text": "Hamlet is a tragedy. It was written by William Shakespeare.",
     "metadata": {"source": "wiki", "page": 3, "tags": ["play", "drama"]}},
    {"id": 12, "text": "Paris is the capital of France. It has many museums."},
    "A plain string passage about cats. Cats sleep a lot.",
]


def test_id_and_metadata_are_echoed_in_every_order(default_compressor):
    for options in ({}, {"reorder": True}, {"top_k": 2, "reorder": True}):
        r = default_compressor.compress("Who wrote Hamlet?", PASSAGES, **options)
        for p in r.passages:
            given = PASSAGES[p.index]
            assert p.id == (given.get("id") if isinstance(given, dict) else None)
            assert p.metadata == (given.get("metadata") if isinstance(given, dict) else None)
            d = p.to_dict()
            assert ("id" in d) == (p.id is not None) and ("metadata" in d) == (p.metadata is not None)
    by_index = {p.index: p for p in default_compressor.compress("Who wrote Hamlet?", PASSAGES).passages}
    assert by_index[0].metadata is PASSAGES[0]["metadata"]  # the caller's object, unchanged
    assert by_index[0].to_dict()["id"] == "doc-7" and by_index[1].to_dict()["id"] == 12


@pytest.mark.parametrize("passage, exc, needle", [
    ({"text": "a", "id": 1.5}, TypeError, "passages[0].id must be a string or an integer, got float"),
    ({"text": "a", "id": True}, TypeError, "passages[0].id must be a string or an integer, got bool"),
    ({"text": "a", "id": ["x"]}, TypeError, "passages[0].id"),
    ({"text": "a", "metadata": ["x"]}, TypeError, "passages[0].metadata must be a JSON object"),
    ({"text": "a", "metadata": {1: "x"}}, TypeError, "passages[0].metadata must be a JSON object"),
    ({"text": "a", "meta": {}}, ValueError, "passages[0] has unknown keys ['meta']; allowed: 'text', 'title', "
                                            "'id', 'metadata'"),
])
def test_bad_id_or_metadata_names_the_field(default_compressor, passage, exc, needle):
    with pytest.raises(exc) as e:
        default_compressor.compress("q", [passage])
    assert needle in str(e.value)


def test_from_dict_round_trip(default_compressor):
    rows = load_jsonl("hotpotqa_distractor", limit=2)
    for row in rows:
        passages = [{"id": f"{row['id']}-{i}", "title": t, "text": "".join(s), "metadata": {"i": i}}
                    for i, (t, s) in enumerate(row["context"])]
        r = default_compressor.compress(row["question"], passages, top_k=4, reorder=True)
        data = json.loads(json.dumps(r.to_dict()))
        assert CompressionResult.from_dict(data, [p["text"] for p in passages]) == r
        rebuilt = CompressionResult.from_dict(data)  # without texts: sentences sit at their offsets
        for a, b in zip(rebuilt.passages, r.passages):
            assert [a.sentence_text(i) for i in range(len(a.sentences))] == \
                   [b.sentence_text(i) for i in range(len(b.sentences))]
            assert (a.id, a.metadata, a.pruned_text, a.rerank_score) == (b.id, b.metadata, b.pruned_text,
                                                                         b.rerank_score)


def test_cli_echoes_ids(tmp_path, default_compressor):
    path = tmp_path / "passages.jsonl"
    path.write_text("\n".join(json.dumps(p) for p in PASSAGES), encoding="utf-8")
    out = subprocess.run([sys.executable, "-m", "thresher.cli", "compress", "-q", "Who wrote Hamlet?", str(path),
                          "-o", "json"], capture_output=True, timeout=600)
    assert out.returncode == 0, out.stderr.decode()
    got = json.loads(out.stdout)["passages"]
    assert [(p.get("id"), p.get("metadata")) for p in got] == [("doc-7", PASSAGES[0]["metadata"]), (12, None),
                                                               (None, None)]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"text": "a", "metadata": "x"}]), encoding="utf-8")
    out = subprocess.run([sys.executable, "-m", "thresher.cli", "compress", "-q", "q", str(bad)],
                         capture_output=True, timeout=600)
    assert out.returncode == 2 and b"passages[0].metadata must be a JSON object" in out.stderr


def test_server_echoes_ids(default_compressor):
    with serve(default_compressor) as (base, _):
        r = httpx.post(f"{base}/v1/compress", json={"question": "Who wrote Hamlet?", "passages": PASSAGES,
                                                     "reorder": True})
        assert r.status_code == 200, r.text
        expected = default_compressor.compress("Who wrote Hamlet?", PASSAGES, reorder=True)
        assert [(p.get("id"), p.get("metadata")) for p in r.json()["passages"]] == \
               [(p.id, p.metadata) for p in expected.passages]
        bad = httpx.post(f"{base}/v1/compress", json={"question": "q", "passages": [{"text": "a", "id": {}}]})
        assert bad.status_code == 422 and "passages[0].id" in bad.json()["error"]
