"""`make demo`: compress examples/question.json with the embedded default model."""

import json
import time
from pathlib import Path

import thresher

example = json.loads((Path(__file__).parent / "question.json").read_text(encoding="utf-8"))

t0 = time.perf_counter()
compressor = thresher.Compressor.load("default")  # exported once to ~/.cache/thresher, then cached
print(f"loaded {compressor.model} ({compressor.kind}) in {time.perf_counter() - t0:.1f} s; "
      f"threshold {compressor.threshold}\n")

compressor.compress(example["question"], example["passages"])  # warm-up
result = compressor.compress(example["question"], example["passages"])

print(f"Q: {result.question}\n")
for passage in result.passages:
    print(f"[{passage.index}] {passage.title}  (rerank {passage.rerank_score:.3f})")
    for i, sentence in enumerate(passage.sentences):
        mark = "KEEP" if sentence.kept else "drop"
        print(f"   {mark} {sentence.score:5.2f}  {passage.sentence_text(i)}")
    print()
kept = sum(s.kept for p in result.passages for s in p.sentences)
total = sum(len(p.sentences) for p in result.passages)
print(f"kept {kept} of {total} sentences; removed {result.compression_rate:.0%} of characters "
      f"in {result.timings_ms['total']:.1f} ms")
print("stages (ms): " + ", ".join(f"{k} {v:.1f}" for k, v in result.timings_ms.items() if k != "total"))
