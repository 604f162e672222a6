"""Provence (`encoder-pruner`): thresher ONNX (fp32, int8) vs the reference process(), same run.

Random weights at DeBERTa-v3-base and -large shapes (the real weights cannot be downloaded here),
saved in the published checkpoint layout, exported with thresher's exporter. The reference is the
plain-PyTorch, one-pair-at-a-time process() of tests/test_provence.py. Requests are HotpotQA
questions with 5 and 20 paragraphs. Reported: median latency per request, speed-ups, whether fp32
output (kept sentences + pruned text) is identical to the reference, and int8's largest sentence
keep-probability difference against fp32.

The tokenizer is a DeBERTa-v3-style SentencePiece Unigram trained on HotpotQA (8k pieces instead
of 128k, so passages have somewhat more tokens than with the real tokenizer); the embedding table
is sized to it, which does not change the encoder's cost.

    .venv/bin/python benchmarks/provence.py            # base + large (minutes on 2 cores)
    .venv/bin/python benchmarks/provence.py --quick    # a tiny shape, seconds
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, Stopwatch, command, hotpot_passages, load_records, md_table, write_results  # noqa: E402

SHAPES = {  # name: (hidden, layers, heads, intermediate)
    "tiny": (64, 2, 2, 128),
    "base": (768, 12, 12, 3072),
    "large": (1024, 24, 16, 4096),
}


def _reference_module():
    sys.path.insert(0, str(ROOT))
    import tests.test_provence as t  # the reference process() lives with its parity tests

    return t


def _requests(records: list[dict], n_passages: int, count: int) -> list[tuple[str, list[dict]]]:
    out, i = [], 0
    while len(out) < count:
        passages = []
        while len(passages) < n_passages:
            passages += hotpot_passages(records[i % len(records)])
            i += 1
        out.append((records[(i - 1) % len(records)]["question"], passages[:n_passages]))
    return out


def _int8_copy(fp32_dir: Path, out: Path) -> Path:
    from thresher.export.onnx_io import quantize_int8
    from thresher.manifest import read_manifest, write_manifest

    out.mkdir(parents=True, exist_ok=True)
    quantize_int8(fp32_dir / "model.onnx", out / "model.onnx")
    shutil.copyfile(fp32_dir / "tokenizer.json", out / "tokenizer.json")
    manifest = read_manifest(fp32_dir)
    manifest.update(precision="int8", files=list(manifest["files"]))
    write_manifest(out, manifest)
    return out


def run_shape(shape: str, requests_by_size: dict, tok_path: Path, work: Path, ref, threads: int) -> list[dict]:
    import torch
    from tests.checkpoints import deberta_v3_backbone, write_random_checkpoint
    from transformers import PreTrainedTokenizerFast

    import thresher
    from thresher.export.provence import export_provence

    hidden, layers, heads, inter = SHAPES[shape]
    vocab = json.loads(tok_path.read_text())["model"]["vocab"].__len__()
    ckpt = write_random_checkpoint(work / f"{shape}-ckpt", deberta_v3_backbone(vocab, hidden, layers, heads, inter),
                                   tok_path, seed=0, keep_bias=-3.0)
    with Stopwatch() as t_export:
        fp32_dir = export_provence(ckpt, work / f"{shape}-fp32", precision="fp32")
    int8_dir = _int8_copy(fp32_dir, work / f"{shape}-int8")
    torch.set_num_threads(threads)
    model = ref.ReferenceProvence(ckpt)
    tok = PreTrainedTokenizerFast(tokenizer_file=str(ckpt / "tokenizer.json"), cls_token="[CLS]",
                                  sep_token="[SEP]", pad_token="[PAD]", unk_token="[UNK]")
    from thresher.engine.runner import SessionConfig

    session = SessionConfig(intra_op_threads=threads)
    fp32 = thresher.Compressor.load(fp32_dir, session_config=session)
    int8 = thresher.Compressor.load(int8_dir, session_config=session)
    rows = []
    for size, reqs in requests_by_size.items():
        q0, p0 = reqs[0]
        ref.reference_process(model, tok, q0, p0[0]["text"])  # warm-up
        fp32.compress(q0, p0)
        int8.compress(q0, p0)
        t_ref, t32, t8, identical, worst, flags_equal = [], [], [], True, 0.0, True
        for q, ps in reqs:
            with Stopwatch() as sw:
                want = [ref.reference_process(model, tok, q, p["text"]) for p in ps]
            t_ref.append(sw.ms)
            with Stopwatch() as sw:
                got = fp32.compress(q, ps)
            t32.append(sw.ms)
            with Stopwatch() as sw:
                got8 = int8.compress(q, ps)
            t8.append(sw.ms)
            for w, g, g8 in zip(want, got.passages, got8.passages):
                identical &= ([s.kept for s in g.sentences] == w["kept"]
                              and g.pruned_text == w["pruned_context"])
                a = np.array([s.score for s in g.sentences])
                b = np.array([s.score for s in g8.sentences])
                if a.size:
                    worst = max(worst, float(np.abs(a - b).max()))
                flags_equal &= [s.kept for s in g.sentences] == [s.kept for s in g8.sentences]
        r, a32, a8 = float(np.median(t_ref)), float(np.median(t32)), float(np.median(t8))
        rows.append({"shape": shape, "passages": size, "requests": len(reqs), "reference_ms": r,
                     "fp32_ms": a32, "int8_ms": a8, "fp32_speedup": r / a32, "int8_speedup": r / a8,
                     "fp32_identical": bool(identical), "int8_max_sentence_prob_diff": worst,
                     "int8_same_kept": bool(flags_equal), "export_s": t_export.ms / 1e3})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny shape, 2 requests per size")
    parser.add_argument("--shapes", default="base,large", help="comma-separated: tiny, base, large")
    parser.add_argument("--requests", type=int, default=3, help="requests per size (5 and 20 passages)")
    parser.add_argument("--threads", type=int, default=1,
                        help="threads for torch and ONNX Runtime alike (1: the fairest on a shared machine)")
    args = parser.parse_args(argv)
    shapes = ["tiny"] if args.quick else args.shapes.split(",")
    n = 2 if args.quick else args.requests
    unknown = set(shapes) - set(SHAPES)
    if unknown:
        raise SystemExit(f"unknown shapes {sorted(unknown)}; choose from {sorted(SHAPES)}")
    records = load_records()
    ref = _reference_module()
    from tests.checkpoints import train_tokenizer

    rows = []
    with tempfile.TemporaryDirectory(prefix="thresher-provence-bench-") as tmp:
        work = Path(tmp)
        texts = ["".join(s) for r in records for _, s in r["context"]]
        tok_path = train_tokenizer(texts, 2000 if args.quick else 8000, work / "tokenizer.json")
        requests_by_size = {size: _requests(records[40:], size, n) for size in (5, 20)}
        for shape in shapes:
            rows += run_shape(shape, requests_by_size, tok_path, work, ref, args.threads)
    header = ["shape", "passages", "reference ms", "fp32 ms", "int8 ms", "fp32 x", "int8 x",
              "fp32 identical", "int8 max prob diff", "int8 same kept"]
    table = md_table(header, [[r["shape"], r["passages"], r["reference_ms"], r["fp32_ms"], r["int8_ms"],
                               r["fp32_speedup"], r["int8_speedup"], r["fp32_identical"],
                               r["int8_max_sentence_prob_diff"], r["int8_same_kept"]] for r in rows])
    cmd = command("provence.py", argv)
    markdown = f"Command: `{cmd}` (median ms per request, {n} requests per size, {args.threads} thread(s) for torch and ONNX Runtime)\n\n{table}\n"
    write_results("provence-" + "-".join(shapes), {"command": cmd, "rows": rows}, markdown)  # one file per shape set
    print(markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
