"""The GPU check: kernel parity, kernel bandwidth vs a device copy, end-to-end latency vs references.

    python benchmarks/gpu_check.py                 # on a CUDA machine, ~2-4 minutes
    python benchmarks/gpu_check.py --tiny          # smoke test of the script itself (CPU ok, interpreted)

Needs torch, triton and transformers, no network and no checkpoints: both models are built from
configs with random weights (latency does not depend on weight values).

1. Parity: kernels/yesno_head.py and kernels/sentence_keep.py against their twins, on the device.
2. Bandwidth: bytes each kernel must move / its time, against a device-to-device copy measured in
   the same run (target: >= 50% of copy).
3. End to end, compress() latency p50/p99 against the reference procedure in the same run:
   - EXIT-size (Gemma-2B config, bf16, 5 HotpotQA documents per request): thresher = one
     tree-packed row per request through CausalYesNoTorch (SDPA, fused head, CUDA graphs);
     reference = one prompt per sentence with full-vocabulary logits. Target p50 <= 100 ms.
   - Provence-size (DeBERTa-v3-large config, bf16, 20 passages per request): thresher = all
     passages in one bucketed batch through EncoderPrunerTorch + the keep kernel; reference =
     one pair at a time with a Python loop over sentences. Target p50 <= 50 ms.
   Text is tokenized by a stand-in (words and punctuation hashed into the vocabulary: about the
   token counts of a subword tokenizer), since no tokenizer files exist offline.

Prints a table last and writes JSON (--out, default benchmarks/out/gpu_check.json).
Runs on transformers 4.57 and 5.x, torch 2.11+; without thresher._native (another Python) the
inputs are packed by the NumPy twins below and the JSON says so.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import sys
import time
import types
import zlib
from functools import partial
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
if not torch.cuda.is_available():  # kernels on CPU tensors only run interpreted
    os.environ.setdefault("TRITON_INTERPRET", "1")


def _import_thresher() -> str:
    """Make thresher's kernels/backend importable; returns "native" or "numpy" (the packer used)."""
    try:
        import thresher._native  # noqa: F401

        return "native"
    except ImportError:
        pass
    sys.path.insert(0, str(ROOT / "src"))  # not installed: the source tree
    for name in [k for k in sys.modules if k == "thresher" or k.startswith("thresher.")]:
        del sys.modules[name]
    try:
        import thresher._native  # noqa: F401, F811

        return "native"
    except ImportError:
        pass
    # thresher/__init__ could not load (no _native for this Python, or a missing runtime
    # dependency): register the package without running __init__, so the kernels and the torch
    # backend (which need neither) import; an in-place build of _native is still picked up.
    for name in [k for k in sys.modules if k == "thresher" or k.startswith("thresher.")]:
        del sys.modules[name]
    pkg = types.ModuleType("thresher")
    pkg.__path__ = [str(ROOT / "src" / "thresher")]
    sys.modules["thresher"] = pkg
    try:
        import thresher._native  # noqa: F401, F811

        return "native"
    except ImportError:
        return "numpy"


PACKER = _import_thresher()
from thresher.engine.torch_backend import CausalYesNoTorch, EncoderPrunerTorch  # noqa: E402
from thresher.kernels.sentence_keep import sentence_keep, sentence_keep_reference  # noqa: E402
from thresher.kernels.yesno_head import yesno_head, yesno_head_reference  # noqa: E402

EPS32 = torch.finfo(torch.float32).eps
WORD = re.compile(r"\w+|[^\w\s]")


# ---------------------------------------------------------------- inputs


def tokenize(text: str, vocab: int) -> np.ndarray:
    """Stand-in tokenizer: words and punctuation -> stable ids in [10, vocab)."""
    return np.array([10 + zlib.crc32(w.encode()) % (vocab - 10) for w in WORD.findall(text)], np.int64)


def load_records(data: Path | None, n: int) -> tuple[list[dict], str]:
    candidates = [data] if data else [ROOT.parent / "shared" / "data", ROOT / "shared" / "data"]
    for base in candidates:
        path = base / "hotpotqa_distractor" / "dev.jsonl"
        if path.is_file():
            with path.open(encoding="utf-8") as f:
                return [json.loads(line) for _, line in zip(range(n), f)], str(path)
    # No data here: synthetic records with HotpotQA's shape (10 paragraphs of ~4 sentences of ~25 words).
    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(5000)]

    def sentence():
        return " " + " ".join(rng.choice(words, int(rng.integers(12, 40)))) + "."

    recs = [{"question": " ".join(rng.choice(words, 15)) + "?",
             "context": [[f"t{i}", [sentence() for _ in range(int(rng.integers(2, 7)))]] for i in range(10)]}
            for _ in range(n)]
    return recs, "synthetic (HotpotQA data not found)"


def pack_tree_numpy(prefix: np.ndarray, branches: list[np.ndarray], pad: int) -> dict[str, np.ndarray]:
    """One row: prefix then every branch (thresher._native.pack_tree's layout for one group)."""
    lens = np.array([len(b) for b in branches])
    ids = np.concatenate([prefix, *branches])[None]
    br = np.concatenate([np.zeros(len(prefix), np.int32), np.repeat(np.arange(1, len(branches) + 1), lens)])
    starts = len(prefix) + np.concatenate([[0], np.cumsum(lens)[:-1]])
    pos = np.concatenate([np.arange(len(prefix))] + [len(prefix) + np.arange(n) for n in lens])
    return {"input_ids": ids, "position_ids": pos[None].astype(np.int64), "branch_ids": br[None].astype(np.int32),
            "score_index": (starts + lens - 1).astype(np.int64)}


def build_tree(prefix: np.ndarray, branches: list[np.ndarray], pad: int) -> dict[str, np.ndarray]:
    if PACKER == "numpy":
        return pack_tree_numpy(prefix, branches, pad)
    from thresher._native import pack_tree

    bcu = np.concatenate([[0], np.cumsum([len(b) for b in branches])]).astype(np.int64)
    total = len(prefix) + int(bcu[-1])
    return pack_tree(prefix, np.array([0, len(prefix)], np.int64), np.concatenate(branches), bcu,
                     np.zeros(len(branches), np.int64), total, pad)


def pack_rows(seqs: list[np.ndarray], labels: list[np.ndarray], pad: int):
    """One sequence per row, longest first: (input_ids, segment_ids, labels, row_of_sequence)."""
    if PACKER == "native":
        from thresher._native import Packer

        cu = np.concatenate([[0], np.cumsum([len(s) for s in seqs])]).astype(np.int64)
        out = Packer(max(len(s) for s in seqs), 1, pad).pack(np.concatenate(seqs), cu, np.concatenate(labels))
        return out["input_ids"], out["segment_ids"], out["labels"], out["placement"][:, 0]
    order = np.argsort([-len(s) for s in seqs], kind="stable")
    width = max(len(s) for s in seqs)
    ids = np.full((len(seqs), width), pad, np.int64)
    seg = np.zeros((len(seqs), width), np.int32)
    lab = np.full((len(seqs), width), -1, np.int32)
    row = np.empty(len(seqs), np.int64)
    for r, i in enumerate(order):
        ids[r, :len(seqs[i])], seg[r, :len(seqs[i])], lab[r, :len(seqs[i])] = seqs[i], 1, labels[i]
        row[i] = r
    return ids, seg, lab, row


# ---------------------------------------------------------------- timing


def device_ms(fn, iters: int, device: torch.device) -> float:
    """Median milliseconds of fn() on the device (CUDA events; wall clock on CPU)."""
    for _ in range(3):
        fn()
    times = []
    for _ in range(iters):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    return float(np.median(times))


def wall_ms(fn, device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e3


def pct(ms: list[float]) -> dict[str, float]:
    a = np.asarray(ms)
    return {"p50": float(np.percentile(a, 50)), "p99": float(np.percentile(a, 99)), "mean": float(a.mean()),
            "n": int(a.size)}


# ---------------------------------------------------------------- 1. parity


def check_parity(device: torch.device, tiny: bool) -> dict:
    g = torch.Generator().manual_seed(0)
    worst_head, head_ok = 0.0, True
    shapes = [(1, 64), (37, 1000), (515, 2304)] if not tiny else [(1, 40), (9, 100)]
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        for n, h in shapes:
            hidden = (torch.randn(n, h, generator=g) * 3).to(dtype)
            head = (torch.randn(2, h, generator=g) * 0.05).to(dtype)
            w = (torch.randn(h, generator=g) * 0.3).to(dtype)
            idx = torch.randint(0, n, (n,), generator=g)
            for kw in ({}, {"norm_weight": w, "eps": 1e-6, "norm_plus_one": True, "softcap": 30.0, "index": idx},
                       {"norm_weight": w, "eps": 1e-5}):
                on = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in kw.items()}
                logits, p = yesno_head(hidden.to(device), head.to(device), **on)
                ref, _ = yesno_head_reference(hidden, head, **kw)
                x = hidden.double() if "index" not in kw else hidden.double()[idx]
                scale = torch.ones(x.shape[0], dtype=torch.float64)
                ww = torch.ones(h, dtype=torch.float64)
                if "norm_weight" in kw:
                    ww = w.double() + (1.0 if kw.get("norm_plus_one") else 0.0)
                    scale = torch.rsqrt(x.pow(2).mean(-1) + kw["eps"])
                tol = 8 * h ** 0.5 * EPS32 * ((x.abs() * ww.abs()) @ head.double().abs().t() * scale[:, None]) + 4 * EPS32
                err = (logits.cpu() - ref).abs()
                worst_head = max(worst_head, float(err.max()))
                head_ok &= bool(torch.all(err <= tol.float())) and not bool(torch.isnan(p).any())
    worst_keep, keep_ok, runs = 0.0, True, 0
    for rep in range(3 if tiny else 20):
        b, t = (2, 300) if tiny else (16, int(torch.randint(1000, 9000, (1,), generator=g)))
        n_sent = int(torch.randint(5, 4000, (1,), generator=g))
        runs_len = torch.randint(1, 80, (b * t,), generator=g)
        sid = torch.randint(-1, n_sent, (b * t,), generator=g)
        labels = torch.repeat_interleave(sid, runs_len)[: b * t].to(torch.int32).reshape(b, t)
        sp = torch.sort(torch.randint(0, 20, (n_sent,), generator=g)).values.to(torch.int32)
        for dtype in (torch.float32, torch.bfloat16):
            values = (torch.randn(b, t, 2, generator=g) * 3).to(dtype)
            for fused in (True, False):
                out = sentence_keep(values.to(device), labels.to(device), sp.to(device), 20, 0.5,
                                    mode="vote" if rep % 2 else "mean", fused=fused)
                ref = sentence_keep_reference(values, labels, sp, 20, 0.5, mode="vote" if rep % 2 else "mean")
                tol = 8 * EPS32 * ref.tokens.clamp(min=1).float() + 4 * EPS32
                err = (out.score.cpu() - ref.score).abs()
                worst_keep = max(worst_keep, float(err.max()) if err.numel() else 0.0)
                decided = (ref.score - 0.5).abs() > tol
                keep_ok &= bool(torch.equal(out.tokens.cpu(), ref.tokens)) and bool(torch.all(err <= tol))
                keep_ok &= bool(torch.equal(out.keep.cpu()[decided], ref.keep[decided]))
                keep_ok &= bool(torch.equal(out.passage_length.cpu(), ref.passage_length))
                runs += 1
    return {"yesno_head": {"ok": head_ok, "max_abs_logit_err": worst_head},
            "sentence_keep": {"ok": keep_ok, "max_abs_score_err": worst_keep, "launches": runs}}


# ---------------------------------------------------------------- 2. bandwidth


def check_bandwidth(device: torch.device) -> dict:
    if device.type != "cuda":
        return {"skipped": "needs CUDA"}
    out = {}
    nbytes = 512 * 2**20
    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    ms = device_ms(lambda: dst.copy_(src), 30, device)
    copy = 2 * nbytes / ms / 1e6  # read + write, GB/s
    out["copy"] = {"GBps": copy, "ms": ms, "bytes": 2 * nbytes}
    n, h = 65536, 2048
    hidden = torch.randn(n, h, device=device, dtype=torch.bfloat16)
    head = torch.randn(2, h, device=device, dtype=torch.bfloat16) * 0.02
    w = torch.randn(h, device=device, dtype=torch.bfloat16) * 0.1
    ms = device_ms(lambda: yesno_head(hidden, head, w, norm_plus_one=True), 30, device)
    moved = hidden.numel() * 2 + n * 12
    out["yesno_head"] = {"GBps": moved / ms / 1e6, "ms": ms, "bytes": moved, "shape": [n, h]}
    small = torch.randn(64, h, device=device, dtype=torch.bfloat16)
    out["yesno_head_request_size"] = {"us": 1e3 * device_ms(lambda: yesno_head(small, head, w), 50, device),
                                      "shape": [64, h]}
    m = 32 * 2**20
    values = torch.randn(m // 512, 512, 2, device=device, dtype=torch.bfloat16)
    for name, n_sent in (("sentence_keep", 8192), ("sentence_keep_many_sentences", m // 32)):
        labels = (torch.arange(m, device=device, dtype=torch.int64) * n_sent // m).to(torch.int32).reshape(m // 512, 512)
        sp = (torch.arange(n_sent, device=device) * 20 // n_sent).to(torch.int32)
        ms = device_ms(lambda labels=labels, sp=sp: sentence_keep(values, labels, sp, 20, 0.5), 20, device)
        moved = values.numel() * 2 + labels.numel() * 4 + n_sent * 4 * 6
        out[name] = {"GBps": moved / ms / 1e6, "ms": ms, "bytes": moved, "tokens": m, "sentences": n_sent}
    req_values = torch.randn(20, 224, 2, device=device, dtype=torch.bfloat16)
    req_labels = (torch.arange(20 * 224, device=device) // 28).to(torch.int32).reshape(20, 224)
    req_sp = (torch.arange(160, device=device) // 8).to(torch.int32)
    out["sentence_keep_request_size"] = {
        "us": 1e3 * device_ms(lambda: sentence_keep(req_values, req_labels, req_sp, 20, 0.5), 50, device),
        "shape": [20, 224]}
    for k in ("yesno_head", "sentence_keep", "sentence_keep_many_sentences"):
        out[k]["fraction_of_copy"] = out[k]["GBps"] / copy
    return out


# ---------------------------------------------------------------- 3. end to end


def build_model(kind: str, tiny: bool, device: torch.device, dtype: torch.dtype):
    import transformers

    if kind == "exit":
        cfg = dict(vocab_size=256000, hidden_size=2048, intermediate_size=16384, num_hidden_layers=18,
                   num_attention_heads=8, num_key_value_heads=1, head_dim=256, max_position_embeddings=8192,
                   rms_norm_eps=1e-6, hidden_activation="gelu_pytorch_tanh")  # google/gemma-2b
        if tiny:
            cfg.update(vocab_size=4096, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                       num_attention_heads=4, head_dim=16)
        config = transformers.GemmaConfig(**cfg)
    else:
        cfg = dict(vocab_size=128100, hidden_size=1024, intermediate_size=4096, num_hidden_layers=24,
                   num_attention_heads=16, max_position_embeddings=512, relative_attention=True,
                   position_buckets=256, norm_rel_ebd="layer_norm", share_att_key=True,
                   pos_att_type=["p2c", "c2p"], layer_norm_eps=1e-7, position_biased_input=False,
                   type_vocab_size=0, max_relative_positions=-1, hidden_act="gelu")  # deberta-v3-large
        if tiny:
            cfg.update(vocab_size=4096, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                       num_attention_heads=4, position_buckets=32)
        config = transformers.DebertaV2Config(**cfg)
    # Parameters are created and randomly initialised on the device (fp32), then cast.
    with torch.device(device):
        if kind == "exit":
            try:
                model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")
            except (TypeError, ValueError):
                config._attn_implementation = "sdpa"
                model = transformers.AutoModelForCausalLM.from_config(config)
            return model.to(device, dtype).eval(), None, None
        backbone = transformers.DebertaV2Model(config)
        h = config.hidden_size
        token_head = torch.nn.Linear(h, 2)
        rank_head = torch.nn.Sequential(torch.nn.Linear(h, h), torch.nn.GELU(), torch.nn.Linear(h, 1))
    return (backbone.to(device, dtype).eval(), token_head.to(device, dtype).eval(),
            rank_head.to(device, dtype).eval())


EXIT_HEAD = "<start_of_turn>user\nQuery:\n{q}\nFull context:\n{c}\nSentence:\n"
EXIT_TAIL = '\nIs this sentence useful in answering the query? Answer only "Yes" or "No".<end_of_turn>\n<start_of_turn>model\n'


def exit_requests(records: list[dict], vocab: int, n_docs: int = 5):
    out = []
    for r in records:
        docs = r["context"][:n_docs]
        context = "\n".join(f"{title}: {''.join(sents)}" for title, sents in docs)
        prefix = np.concatenate([[2], tokenize(EXIT_HEAD.format(q=r["question"], c=context), vocab)])
        branches = [tokenize(s + EXIT_TAIL, vocab) for _, sents in docs for s in sents if s.strip()]
        out.append((prefix.astype(np.int64), branches))
    return out


def provence_requests(records: list[dict], vocab: int, n_passages: int = 20):
    out = []
    for i in range(0, len(records) - 1, 2):
        q = tokenize(records[i]["question"].lower(), vocab)
        paragraphs = (records[i]["context"] + records[i + 1]["context"])[:n_passages]
        seqs, labels, sent_passage, sid = [], [], [], 0
        for p, (_, sents) in enumerate(paragraphs):
            toks = [t for t in (tokenize(s, vocab) for s in sents) if len(t)]
            room = 509 - len(q)  # [CLS] q [SEP] ... [SEP] within 512: whole sentences only
            fit = int(np.searchsorted(np.cumsum([len(t) for t in toks]), room, side="right"))
            toks = toks[: max(fit, 1)]
            toks[0] = toks[0][:room]
            body = np.concatenate(toks)
            lab = np.concatenate([np.full(len(t), sid + k, np.int32) for k, t in enumerate(toks)])
            seqs.append(np.concatenate([[1], q, [2], body, [2]]).astype(np.int64))
            labels.append(np.concatenate([np.full(len(q) + 2, -1, np.int32), lab, [-1]]).astype(np.int32))
            sent_passage += [p] * len(toks)
            sid += len(toks)
        out.append((seqs, labels, np.array(sent_passage, np.int32)))
    return out


def run_exit(device, dtype, records, tiny, timed: int, ref_timed: int) -> dict:
    model, _, _ = build_model("exit", tiny, device, dtype)
    vocab, yes, no = model.config.vocab_size, 8438 % model.config.vocab_size, 1294 % model.config.vocab_size
    scorer = CausalYesNoTorch(model, yes, no, cuda_graphs=device.type == "cuda")
    mask_check = scorer.self_check()  # tree row vs full prompts: catches a 4D mask the model ignores
    requests = exit_requests(records, vocab)

    def ours(req):
        prefix, branches = req
        rows = build_tree(prefix, branches, 0)
        _, p = scorer.logits(rows["input_ids"], rows["position_ids"], rows["branch_ids"], rows["score_index"])
        p = p.cpu().numpy()
        return p, p >= 0.5

    @torch.inference_mode()
    def reference(req):  # EXIT's procedure: one full prompt per sentence, full-vocabulary logits
        prefix, branches = req
        probs = []
        for b in branches:
            ids = torch.from_numpy(np.concatenate([prefix, b]))[None].to(device)
            logits = model(input_ids=ids).logits[0, -1].float()
            two = torch.softmax(logits[[yes, no]], dim=0)
            probs.append(float(two[0]))
        p = np.array(probs, np.float32)
        return p, p >= 0.5

    return _compare(device, requests, ours, reference, timed, ref_timed,
                    tokens_ours=lambda r: len(r[0]) + sum(len(b) for b in r[1]),
                    tokens_ref=lambda r: len(r[1]) * len(r[0]) + sum(len(b) for b in r[1]),
                    extra={"tree_self_check_rel_err": lambda: mask_check,
                           "graphs_captured": lambda: scorer.graphs.captured,
                           "graphs_disabled": lambda: scorer.graphs.disabled_reason})


def run_provence(device, dtype, records, tiny, timed: int, ref_timed: int) -> dict:
    backbone, token_head, rank_head = build_model("provence", tiny, device, dtype)
    vocab = backbone.config.vocab_size
    pruner = EncoderPrunerTorch(backbone, token_head, rank_head, cuda_graphs=device.type == "cuda")
    requests = provence_requests(records, vocab)
    threshold = 0.1

    def ours(req):
        seqs, labels, sent_passage = req
        ids, seg, lab, row = pack_rows(seqs, labels, 0)
        out = pruner.run(ids, seg, lab, row, sent_passage, threshold, strict=True)
        score = out.keep.score.cpu().numpy()
        out.rank.cpu()
        return score, score > threshold

    @torch.inference_mode()
    def reference(req):  # one (question, passage) pair at a time, sentences reduced in Python
        seqs, labels, sent_passage = req
        scores = []
        for seq, lab in zip(seqs, labels):
            ids = torch.from_numpy(seq)[None].to(device)
            hidden = backbone(input_ids=ids).last_hidden_state
            probs = torch.softmax(token_head(hidden)[0].float(), -1)[:, 1].cpu().numpy()
            float(rank_head(hidden[:, 0]).float().reshape(()))
            for s in np.unique(lab[lab >= 0]):
                scores.append(float(probs[lab == s].mean()))
        score = np.array(scores, np.float32)
        return score, score > threshold

    return _compare(device, requests, ours, reference, timed, ref_timed,
                    tokens_ours=lambda r: sum(len(s) for s in r[0]), tokens_ref=lambda r: sum(len(s) for s in r[0]),
                    extra={"graphs_captured": lambda: pruner.graphs.captured,
                           "graphs_disabled": lambda: pruner.graphs.disabled_reason})


def _compare(device, requests, ours, reference, timed, ref_timed, tokens_ours, tokens_ref, extra) -> dict:
    for req in requests:  # warm-up: Triton JIT and one CUDA graph per bucket
        ours(req)
    reference(requests[0])
    ours_ms, ref_ms, max_dp, agree, total = [], [], 0.0, 0, 0
    for k in range(timed):
        ours_ms.append(wall_ms(partial(ours, requests[k % len(requests)]), device))
    for k in range(min(ref_timed, len(requests))):
        holder: dict = {}
        ref_ms.append(wall_ms(partial(lambda req, out: out.update(r=reference(req)), requests[k], holder), device))
        p_ours, keep_ours = ours(requests[k])
        p_ref, keep_ref = holder["r"]
        max_dp = max(max_dp, float(np.abs(p_ours - p_ref).max()))
        agree += int((keep_ours == keep_ref).sum())
        total += keep_ref.size
    o, r = pct(ours_ms), pct(ref_ms)
    return {"thresher_ms": o, "reference_ms": r, "speedup_p50": r["p50"] / o["p50"],
            "max_abs_prob_diff": max_dp, "keep_agreement": agree / max(total, 1), "sentences_compared": total,
            "requests": len(requests),
            "tokens_per_request": {"thresher": float(np.mean([tokens_ours(q) for q in requests])),
                                   "reference": float(np.mean([tokens_ref(q) for q in requests]))},
            **{k: f() for k, f in extra.items()}}


# ---------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "out" / "gpu_check.json")
    ap.add_argument("--data", type=Path, default=None, help="folder holding hotpotqa_distractor/dev.jsonl")
    ap.add_argument("--dtype", choices=["bf16", "fp16"], default="bf16")
    ap.add_argument("--requests", type=int, default=24, help="distinct requests per model")
    ap.add_argument("--timed", type=int, default=100, help="timed thresher calls per model")
    ap.add_argument("--ref-timed", type=int, default=8, help="timed reference calls per model")
    ap.add_argument("--tiny", action="store_true", help="tiny models and sizes: a smoke test of this script")
    ap.add_argument("--skip", nargs="*", default=[], choices=["parity", "bandwidth", "exit", "provence"])
    args = ap.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cpu" and not args.tiny:
        print("no CUDA device: run with --tiny for a CPU smoke test of this script", file=sys.stderr)
        return 2
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype] if device.type == "cuda" else torch.float32
    if args.tiny:
        args.requests, args.timed, args.ref_timed = min(args.requests, 4), min(args.timed, 4), min(args.ref_timed, 2)
    import transformers
    import triton

    records, source = load_records(args.data, 2 * args.requests)
    result = {"device": torch.cuda.get_device_name() if device.type == "cuda" else platform.processor() or "cpu",
              "versions": {"torch": torch.__version__, "triton": triton.__version__,
                           "transformers": transformers.__version__, "python": platform.python_version()},
              "dtype": str(dtype), "tiny": args.tiny, "packer": PACKER, "data": source,
              "command": " ".join(["python", "benchmarks/gpu_check.py", *(argv if argv is not None else sys.argv[1:])])}
    t_start = time.perf_counter()
    steps = [("parity", lambda: check_parity(device, args.tiny)), ("bandwidth", lambda: check_bandwidth(device)),
             ("exit", lambda: run_exit(device, dtype, records[: args.requests], args.tiny, args.timed, args.ref_timed)),
             ("provence", lambda: run_provence(device, dtype, records, args.tiny, args.timed, args.ref_timed))]
    for name, step in steps:
        if name in args.skip:
            continue
        t0 = time.perf_counter()
        try:
            result[name] = step()
        except Exception as exc:  # noqa: BLE001 - one failing step must not hide the others
            import traceback

            result[name] = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-3000:]}
        result[name]["seconds"] = time.perf_counter() - t0
        if device.type == "cuda":
            torch.cuda.empty_cache()
        print(f"[{time.perf_counter() - t_start:6.1f}s] {name}: {json.dumps(result[name])[:400]}", flush=True)
    result["seconds"] = time.perf_counter() - t_start
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"\nwrote {args.out}")
    print(summary_table(result))
    return 0


def summary_table(r: dict) -> str:
    rows = [("check", "measured", "target", "status")]

    def status(ok):
        return "n/a" if ok is None else ("PASS" if ok else "FAIL")

    par = r.get("parity", {})
    for k in ("yesno_head", "sentence_keep"):
        v = par.get(k)
        if v:
            err = v.get("max_abs_logit_err", v.get("max_abs_score_err"))
            rows.append((f"parity {k}", f"max err {err:.2e}", "fp32 bound", status(v["ok"])))
    bw = r.get("bandwidth", {})
    if "copy" in bw:
        rows.append(("copy bandwidth", f"{bw['copy']['GBps']:.0f} GB/s", "", ""))
        for k in ("yesno_head", "sentence_keep", "sentence_keep_many_sentences"):
            v = bw[k]
            rows.append((f"{k} bandwidth", f"{v['GBps']:.0f} GB/s ({100 * v['fraction_of_copy']:.0f}% of copy)",
                         ">= 50% of copy", status(v["fraction_of_copy"] >= 0.5)))
    for k, target in (("exit", 100.0), ("provence", 50.0)):
        v = r.get(k, {})
        if "thresher_ms" in v:
            o, ref = v["thresher_ms"], v["reference_ms"]
            rows.append((f"{k} p50 / p99", f"{o['p50']:.1f} / {o['p99']:.1f} ms (ref {ref['p50']:.0f} ms, "
                         f"x{v['speedup_p50']:.1f})", f"p50 <= {target:.0f} ms", status(o["p50"] <= target)))
            rows.append((f"{k} vs reference", f"max |dp| {v['max_abs_prob_diff']:.3f}, keep agree "
                         f"{100 * v['keep_agreement']:.1f}%", "same decisions", ""))
            if "tree_self_check_rel_err" in v:
                err = v["tree_self_check_rel_err"]
                rows.append(("exit tree mask check", f"rel logit err {err:.1e}", "< 5e-2 (rounding)", status(err < 5e-2)))
            rows.append((f"{k} CUDA graphs", f"{v.get('graphs_captured', 0)} captured", "",
                         "" if not v.get("graphs_disabled") else "eager"))
        elif "error" in v:
            rows.append((k, v["error"][:60], "", "ERROR"))
    widths = [max(len(str(row[i])) for row in rows) for i in range(4)]
    return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(row, widths)) for row in rows)


if __name__ == "__main__":
    raise SystemExit(main())
