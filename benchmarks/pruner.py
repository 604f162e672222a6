"""Latency of the trained pruner (`minilm-pruner`, int8 ONNX) vs the same network in torch, same run.

Requests: hotpotqa_distractor dev questions, each with its ~10 paragraphs as {"title", "text"}.
- thresher: `Compressor.load("minilm-pruner")` (per-token int8, rows sorted by length, C++ packer);
- reference: the same trained network (base + shipped delta) in torch fp32, the way a
  CrossEncoder-style script runs it: segment with the same `rules` segmenter, build the same
  `[CLS] question [SEP] title sentences [SEP]` inputs (thresher.training.train.encode), one
  padded batch per request, mean keep probability per sentence, the model's default operating
  point (calibration, threshold, relative threshold: thresher.catalogue.PRUNER_*).
Both use the same thread count; they take turns in blocks of 10 requests, the reference in a
process of its own (timed there). Reports p50/p90/p99, ratios,
thresher's per-stage medians and how many keep decisions agree.

    .venv/bin/python benchmarks/pruner.py [--n 100] [--threads 2] [--quick]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (  # noqa: E402
    STAGES,
    Stopwatch,
    command,
    hotpot_requests,
    load_records,
    md_table,
    percentiles,
    write_results,
)

BLOCK = 10


class TorchReference:
    def __init__(self, threshold: float):
        from thresher.catalogue import TRAINED_PRUNER
        from thresher.engine.tokenize import load_tokenizer
        from thresher.export.bert_pruner import load_trained_pruner

        self.net, _, tok_path, _ = load_trained_pruner(TRAINED_PRUNER)
        self.tok = load_tokenizer(tok_path)
        self.threshold = threshold

    def __call__(self, question: str, passages: list[dict]) -> list[np.ndarray]:
        import torch

        from thresher.catalogue import PRUNER_CALIBRATION, PRUNER_RELATIVE_THRESHOLD
        from thresher.engine.segment import split_rules
        from thresher.scorers.encoder_pruner import logit, platt
        from thresher.training.data import Example
        from thresher.training.train import collate, encode

        examples = []
        for p in passages:
            sentences = tuple(p["text"][a:b] for a, b in split_rules(p["text"]).tolist())
            examples.append(Example("", "", question, p["title"], sentences, (0,) * len(sentences)))
        cls, sep, pad = (self.tok.token_to_id(t) for t in ("[CLS]", "[SEP]", "[PAD]"))
        enc = encode(self.tok, examples, 512, cls, sep)
        ids, mask, _, _ = collate(enc, list(range(len(enc))), pad)
        with torch.no_grad():
            keep = self.net(ids, mask)[0].numpy().astype(np.float64)
        out = []
        for r, e in enumerate(enc):
            s = e.sentence
            n = len(examples[r].sentences)
            sums = np.bincount(s[s >= 0], weights=keep[r, : s.shape[0]][s >= 0], minlength=n)
            mean = sums / np.maximum(np.bincount(s[s >= 0], minlength=n), 1)
            score = platt(logit(mean), PRUNER_CALIBRATION["sentence"])
            out.append((score > self.threshold) & (score >= PRUNER_RELATIVE_THRESHOLD * score.max(initial=0.0)))
        return out


def _serve_reference(threshold: float, threads: int) -> None:
    """Child process (--serve-reference): time TorchReference on each pickled (question, passages)
    read from stdin, answer (wall ms, kept flags) on stdout; None ends."""
    import pickle

    import torch

    torch.set_num_threads(threads)
    ref = TorchReference(threshold)
    src, dst = sys.stdin.buffer, sys.stdout.buffer
    while (item := pickle.load(src)) is not None:
        with Stopwatch() as t:
            kept = ref(*item)
        pickle.dump((t.ms, kept), dst)
        dst.flush()


class ReferenceProcess:
    """TorchReference in a process of its own; calling it returns (wall ms timed there, kept flags)."""

    def __init__(self, threshold: float, threads: int):
        import subprocess

        self._proc = subprocess.Popen(
            [sys.executable, __file__, "--serve-reference", str(threshold), "--threads", str(threads)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def __call__(self, question: str, passages: list[dict]):
        import pickle

        pickle.dump((question, passages), self._proc.stdin)
        self._proc.stdin.flush()
        return pickle.load(self._proc.stdout)

    def close(self) -> None:
        import pickle

        pickle.dump(None, self._proc.stdin)
        self._proc.stdin.close()
        self._proc.wait(timeout=60)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--threads", type=int, default=int(os.environ.get("THRESHER_THREADS") or 2))
    ap.add_argument("--quick", action="store_true", help="20 requests, 2 warm-up")
    ap.add_argument("--serve-reference", type=float, metavar="THRESHOLD", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.serve_reference is not None:
        _serve_reference(args.serve_reference, args.threads)
        return {}
    if args.quick:
        args.n, args.warmup = 20, 2
    import thresher
    from thresher.engine.runner import SessionConfig

    c = thresher.Compressor.load("minilm-pruner", session_config=SessionConfig(intra_op_threads=args.threads))
    ref = ReferenceProcess(c.threshold, args.threads)
    requests = hotpot_requests(load_records(limit=args.n + args.warmup))
    ours, theirs, stages, agree, total = [], [], {s: [] for s in STAGES}, 0, 0
    # The pipelines take turns in blocks of BLOCK requests, and the reference runs in a process of
    # its own: in this process, its large padded torch batches slowed the ONNX calls that followed
    # (thresher p50 57-73 ms there vs ~55 ms alone, on this 2-core CPU).
    for start in range(0, len(requests), BLOCK):
        block = requests[start:start + BLOCK]
        results, kept = [], []
        for q, passages in block:
            with Stopwatch() as t:
                results.append(c.compress(q, passages))
            ours.append(t.ms)
        for q, passages in block:
            ms, k = ref(q, passages)
            kept.append(k)
            theirs.append(ms)
        for res, ks in zip(results, kept):
            for s in STAGES:
                stages[s].append(res.timings_ms.get(s, 0.0))
            for p, k in zip(res.passages, ks):
                mine = np.array([s.kept for s in p.sentences])
                if mine.shape == k.shape:
                    agree += int((mine == k).sum())
                total += k.shape[0]
    ref.close()
    ours, theirs = ours[args.warmup:], theirs[args.warmup:]
    stages = {s: v[args.warmup:] for s, v in stages.items()}
    a, b = percentiles(ours), percentiles(theirs)
    res = {"model": c.model, "threads": args.threads, "requests": len(ours),
           "thresher_int8": a, "torch_fp32_reference": b,
           "speedup": {k: b[k] / a[k] for k in ("p50", "p90", "p99")},
           "stage_p50_ms": {s: float(np.median(v)) for s, v in stages.items()},
           "keep_agreement": agree / max(total, 1)}
    cmd = command("pruner.py", argv)
    res["command"] = cmd
    md = "\n\n".join([
        f"`{cmd}`",
        md_table(["pipeline", "p50 ms", "p90 ms", "p99 ms"],
                 [["thresher minilm-pruner (int8 ONNX)", a["p50"], a["p90"], a["p99"]],
                  ["same network in torch fp32, one padded batch per request", b["p50"], b["p90"], b["p99"]],
                  ["speed-up", *(res["speedup"][k] for k in ("p50", "p90", "p99"))]]),
        "thresher stage medians (ms): " + ", ".join(f"{s} {v:.1f}" for s, v in res["stage_p50_ms"].items()),
        f"Keep decisions identical to the torch fp32 reference: {100 * res['keep_agreement']:.1f}%.",
    ])
    js, mdp = write_results("pruner", res, md)
    print(md)
    print(f"\nwrote {js} and {mdp}")
    return res


if __name__ == "__main__":
    main()
