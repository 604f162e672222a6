"""EXIT (causal-yesno): tree-packed two-logit scoring vs one full prompt per sentence.

The reference is EXIT's procedure: one prompt per sentence (query + context + sentence), the
whole causal LM with full-vocabulary logits, softmax over the Yes/No entries. Both context modes
run in the same run: "own" (the sentence's own document, EXIT's paper and training data; the
default) and "all" (all 5 documents, EXIT's quickstart). thresher packs each context's prompts
into a tree (the prefix once, every sentence as a branch), several trees per row
(block-diagonal), and reads two logits per branch. Both run here, in torch on the CPU
(2 threads), on HotpotQA dev requests of 5 documents:
  (a) a Gemma-2B-width config (hidden 2048, 8 heads, 1 KV head, intermediate 16384,
      vocab 256000) with 2 layers and random weights;
  (b) SmolLM2-135M-Instruct, real weights (GGUF Q4_1, de-quantized), also through ONNX Runtime.
Reported: real tokens, tokens the model computes (rows x width per call, padding included) and
what one prefix per row (pack_tree, exports without a tree stride) would compute, latency per
request, the largest P(Yes) difference and keep-decision agreement. With --ref-sentences k the reference runs only the first k sentences
of each request and its latency is extrapolated per sentence (its prompts are independent and
equally long up to the sentence); the token count of the reference is always exact.

    .venv/bin/python benchmarks/exit.py [--quick] [--modes own,all]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import Stopwatch, command, hotpot_passages, load_records, md_table, write_results  # noqa: E402


def _items(n: int, docs: int):
    from thresher.engine.request import Passage
    from thresher.engine.scorer import ScoreInput
    from thresher.engine.segment import get_segmenter

    segment = get_segmenter("rules")
    items = []
    for record in load_records(limit=n):
        ps = tuple(Passage(p["text"], p["title"]) for p in hotpot_passages(record)[:docs])
        items.append(ScoreInput(record["question"], ps, tuple(segment(p.text) for p in ps)))
    return items


def _prompts(template, item, mode: str) -> list[str]:
    docs = [f"{p.title}\n{p.text.strip()}" if p.title else p.text.strip() for p in item.passages]
    contexts = [" ".join(docs)] * len(docs) if mode == "all" else docs
    return [template.prefix(item.question, c) + template.branch(p.text[a:b])
            for c, p, sp in zip(contexts, item.passages, item.spans) for a, b in sp.tolist()]


class Counting:
    """Wrap a runner (None: answer zeros without a model): also add up the tokens it is fed
    (rows x width, padding included)."""

    padded = True

    def __init__(self, runner=None):
        from thresher.engine.runner import CPU_CALL_TOKENS

        self.runner, self.computed = runner, 0
        self.call_tokens = runner.call_tokens if runner else CPU_CALL_TOKENS["causal-yesno"]

    def run(self, feeds):
        self.computed += int(feeds["input_ids"].size)
        if self.runner is None:
            return [np.zeros((feeds["score_index"].shape[0], 2), np.float32)]
        return self.runner.run(feeds)


def computed_tokens(folder: Path, manifest: dict, item, **options) -> int:
    """Tokens a scorer with `manifest` feeds the model for `item`, without running it."""
    from thresher.scorers.causal_yesno import CausalYesNoScorer

    run = Counting()
    scorer = CausalYesNoScorer(folder, manifest, run, **options)
    scorer.run_tree(scorer.build_tree([item]))
    return run.computed


def reference(model, tokenizer, prompts: list[str], yes: int, no: int, limit: int | None):
    """EXIT: one prompt per sentence, full-vocabulary logits. Returns (p_yes of the first
    `limit` prompts, tokens of all prompts, ms of the scored prompts)."""
    import torch

    lengths = [len(tokenizer(p).input_ids) for p in prompts]
    out = []
    with Stopwatch() as t:
        for prompt in prompts[:limit]:
            ids = tokenizer(prompt, return_tensors="pt").input_ids
            with torch.inference_mode():
                logits = model(input_ids=ids).logits[0, -1]  # the [1, L, vocab] tensor is computed
            out.append(torch.softmax(logits[[yes, no]].double(), 0)[0].item())
    return np.array(out), sum(lengths), t.ms


def run_model(label: str, lm, items, ref_sentences: int | None, onnx_dir: Path | None,
              modes: list[str], row_tokens: int | None) -> list[dict]:
    from thresher.engine.runner import CPU_CALL_TOKENS, OrtRunner, SessionConfig
    from thresher.engine.torch_backend import ModuleRunner
    from thresher.export.yesno import YesNoHead, describe
    from thresher.manifest import read_manifest
    from thresher.scorers.causal_yesno import GRAPH_INPUTS, CausalYesNoScorer, PromptTemplate

    folder = Path(tempfile.mkdtemp(prefix="thresher-exit-"))
    lm.tokenizer.backend_tokenizer.save(str(folder / "tokenizer.json"))
    options = {"max_row_tokens": row_tokens} if row_tokens else {}
    rows = []
    for mode in modes:
        manifest = describe(lm, context=mode)
        head = YesNoHead(lm.model, manifest["yes_id"], manifest["no_id"]).eval()
        budget = CPU_CALL_TOKENS["causal-yesno"]
        runners = {"torch": (folder, manifest, ModuleRunner(head, GRAPH_INPUTS, budget))}
        if onnx_dir is not None:
            runners["onnx"] = (onnx_dir, {**read_manifest(onnx_dir), "context": mode},
                               OrtRunner(onnx_dir / "model.onnx", budget, SessionConfig(intra_op_threads=2)))
        for i, item in enumerate(items):
            prompts = _prompts(PromptTemplate(manifest["prompt"]["template"]), item, mode)
            n = len(prompts)
            ref_p, ref_tokens, ref_ms = reference(lm.model, lm.tokenizer, prompts, manifest["yes_id"],
                                                  manifest["no_id"], ref_sentences)
            k = ref_p.shape[0]
            ref_full_ms = ref_ms / k * n
            for name, (where, m, run) in runners.items():
                run = Counting(run)
                scorer = CausalYesNoScorer(where, m, run, **options)
                if name == "onnx":
                    scorer.score([item], {})  # warm-up: ONNX Runtime plans shapes on its first run
                run.computed = 0
                with Stopwatch() as t:
                    scores = scorer.score([item], {})
                ours = np.concatenate(scores[0].sentences)
                rows.append({
                    "model": label, "context": mode, "backend": name, "request": i, "sentences": n,
                    "ref_scored": k, "ref_tokens": ref_tokens, "tokens": scorer.build_tree([item]).tokens,
                    "computed": run.computed, "computed_one_prefix_per_row": computed_tokens(  # pack_tree
                        where, {key: v for key, v in m.items() if key != "tree_stride"}, item, **options),
                    "ref_ms": ref_full_ms, "ms": t.ms, "speedup": ref_full_ms / t.ms,
                    "max_abs_diff": float(np.abs(ours[:k] - ref_p).max()),
                    "same_decisions": bool(((ours[:k] >= 0.5) == (ref_p >= 0.5)).all()),
                })
                rows[-1]["token_ratio"] = ref_tokens / rows[-1]["computed"]
                print(rows[-1], flush=True)
    return rows


def gemma_width_model():
    """Gemma-2B width, 2 layers, random weights; the test suite's Gemma tokenizer recipe."""
    import torch
    from tokenizers.processors import TemplateProcessing
    from transformers import AutoTokenizer, GemmaConfig, GemmaForCausalLM, PreTrainedTokenizerFast

    from thresher.catalogue import smollm2_gguf
    from thresher.export.causal_lm import CausalLM, cached_checkpoint

    smol = cached_checkpoint(smollm2_gguf())
    tok = PreTrainedTokenizerFast(tokenizer_object=AutoTokenizer.from_pretrained(smol).backend_tokenizer,
                                  bos_token="<bos>", eos_token="<eos>", pad_token="<pad>")
    tok.add_special_tokens({"additional_special_tokens": ["<start_of_turn>", "<end_of_turn>"]})
    bos = tok.convert_tokens_to_ids("<bos>")
    tok.backend_tokenizer.post_processor = TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", bos)])
    config = GemmaConfig(vocab_size=256000, hidden_size=2048, intermediate_size=16384, num_hidden_layers=2,
                         num_attention_heads=8, num_key_value_heads=1, head_dim=256, max_position_embeddings=8192,
                         pad_token_id=tok.pad_token_id, bos_token_id=bos, initializer_range=0.05)
    torch.manual_seed(0)
    model = GemmaForCausalLM(config).eval()
    return CausalLM(model, tok, {"config": "gemma-2b-width, 2 layers, random"})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 request per model, 3 reference sentences")
    parser.add_argument("--requests", type=int, default=2)
    parser.add_argument("--ref-sentences", type=int, default=None,
                        help="score only the first k sentences per request in the reference (extrapolated)")
    parser.add_argument("--onnx", action="store_true", help="also export SmolLM2 and time ONNX Runtime")
    parser.add_argument("--modes", default="own,all", help="context modes, comma-separated (default own,all)")
    parser.add_argument("--models", default="gemma,smollm2", help="models, comma-separated (default gemma,smollm2)")
    parser.add_argument("--row-tokens", type=int, help="the scorer's max_row_tokens (default: its own)")
    args = parser.parse_args(argv)
    modes = args.modes.split(",")
    if not modes or set(modes) - {"own", "all"}:
        parser.error(f"--modes takes own and/or all, got {args.modes!r}")
    models = args.models.split(",")
    if not models or set(models) - {"gemma", "smollm2"}:
        parser.error(f"--models takes gemma and/or smollm2, got {args.models!r}")
    import torch

    from thresher.catalogue import smollm2_gguf
    from thresher.export.causal_lm import cached_checkpoint, load_causal_lm

    torch.set_num_threads(2)
    n = 1 if args.quick else args.requests
    k = 3 if args.quick and args.ref_sentences is None else args.ref_sentences
    items = _items(n, docs=5)
    rows = []
    if "gemma" in models:
        rows += run_model("gemma-2b-width-2L", gemma_width_model(), items, k, None, modes, args.row_tokens)
    if "smollm2" in models:
        smol = cached_checkpoint(smollm2_gguf())
        lm = load_causal_lm(smol)
        onnx_dir = None
        if args.onnx:
            from thresher.export.yesno import export_causal_yesno

            t0 = time.perf_counter()
            onnx_dir = export_causal_yesno(smol, Path(tempfile.mkdtemp(prefix="thresher-exit-onnx-")), lm=lm)
            print(f"SmolLM2 ONNX export: {time.perf_counter() - t0:.0f} s", flush=True)
        rows += run_model("smollm2-135m", lm, items, k, onnx_dir, modes, args.row_tokens)
    table = md_table(
        ["model", "context", "backend", "req", "sentences", "ref tokens", "real tokens", "computed",
         "computed, one prefix/row", "token ratio", "ref ms", "ms", "speedup", "max |dP|", "same keep"],
        [[r["model"], r["context"], r["backend"], r["request"], r["sentences"], r["ref_tokens"], r["tokens"],
          r["computed"], r["computed_one_prefix_per_row"], round(r["token_ratio"], 2), round(r["ref_ms"]),
          round(r["ms"]), round(r["speedup"], 2), f"{r['max_abs_diff']:.1e}", r["same_decisions"]] for r in rows])
    how = f"measured on the first {k} sentences per request and extrapolated" if k else "measured on all sentences"
    note = (f"Reference latency: {how}; 2 torch threads; load average at the end "
            f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores.")
    cmd = command("exit.py", argv)
    markdown = f"{table}\n\n{note}\n\nCommand: `{cmd}`\n"
    write_results("exit", {"command": cmd, "rows": rows, "ref_sentences": k}, markdown)
    print(markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
