"""causal-yesno (EXIT): tree-packed two-logit scoring equals one full prompt per sentence.

The reference is EXIT's own procedure: fill the prompt for one sentence, tokenize it with the
tokenizer's special tokens, run the whole causal LM and read the "Yes"/"No" entries of the
full-vocabulary logits at the last position.
"""

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from thresher.engine.request import Passage
from thresher.engine.runner import CPU_CALL_TOKENS
from thresher.engine.scorer import ScoreInput
from thresher.engine.segment import get_segmenter
from thresher.engine.torch_backend import ModuleRunner
from thresher.export.causal_lm import CausalLM, cached_checkpoint, load_causal_lm, single_token_id
from thresher.export.yesno import YesNoHead, describe, export_causal_yesno
from thresher.scorers.causal_yesno import GRAPH_INPUTS, CausalYesNoScorer, PromptTemplate

from .conftest import load_jsonl

TOL = 1e-4
GEMMA_CHAT = ("{{ bos_token }}{% for m in messages %}<start_of_turn>{{ 'model' if m['role'] == 'assistant' "
              "else m['role'] }}\n{{ m['content'] }}<end_of_turn>\n{% endfor %}"
              "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}")


# -- fixtures: real SmolLM2 weights, and tiny random models in published checkpoint layouts ----
@pytest.fixture(scope="session")
def smollm2_dir() -> Path:
    from thresher.catalogue import smollm2_gguf

    return cached_checkpoint(smollm2_gguf())


@pytest.fixture(scope="session")
def gemma_tokenizer(smollm2_dir):
    """SmolLM2's BPE vocabulary with Gemma's special tokens, BOS post-processor and chat template."""
    from tokenizers.processors import TemplateProcessing
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    base = AutoTokenizer.from_pretrained(smollm2_dir).backend_tokenizer
    tok = PreTrainedTokenizerFast(tokenizer_object=base, bos_token="<bos>", eos_token="<eos>",
                                  pad_token="<pad>", chat_template=GEMMA_CHAT)
    tok.add_special_tokens({"additional_special_tokens": ["<start_of_turn>", "<end_of_turn>"]})
    bos = tok.convert_tokens_to_ids("<bos>")
    tok.backend_tokenizer.post_processor = TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", bos)])
    return tok


def _tiny_config(arch: str, vocab: int):
    from transformers import Gemma2Config, Gemma3TextConfig, GemmaConfig, LlamaConfig

    common = dict(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=1, head_dim=16, max_position_embeddings=2048,
                  pad_token_id=0, initializer_range=0.3)
    if arch == "gemma":
        return GemmaConfig(**common)
    if arch == "gemma2":  # sliding window far below the prompt length, soft-capping on
        return Gemma2Config(**common, sliding_window=24, final_logit_softcapping=3.0, attn_logit_softcapping=5.0)
    if arch == "gemma3_text":
        return Gemma3TextConfig(**common, sliding_window=24, layer_types=["sliding_attention", "full_attention"],
                                final_logit_softcapping=4.0)
    return LlamaConfig(**{**common, "num_key_value_heads": 2}, tie_word_embeddings=False)


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory, gemma_tokenizer, smollm2_dir):
    """checkpoint folder of a tiny random model per architecture (Gemma tokenizer for Gemmas)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    made = {}

    def make(arch: str) -> Path:
        if arch not in made:
            tok = gemma_tokenizer if arch.startswith("gemma") else AutoTokenizer.from_pretrained(smollm2_dir)
            torch.manual_seed(0)
            model = AutoModelForCausalLM.from_config(_tiny_config(arch, len(tok)))
            folder = tmp_path_factory.mktemp(arch)
            model.save_pretrained(folder)
            tok.save_pretrained(folder)
            made[arch] = folder
        return made[arch]

    return make


def _requests(n: int, passages: int, max_sentences: int = 3) -> list[ScoreInput]:
    segment = get_segmenter("rules")
    out = []
    for record in load_jsonl("hotpotqa_distractor", n):
        ps = tuple(Passage("".join(sentences[:max_sentences]), title) for title, sentences in record["context"][:passages])
        out.append(ScoreInput(record["question"], ps, tuple(segment(p.text) for p in ps)))
    return out


def _contexts(item: ScoreInput, mode: str) -> list[str]:
    docs = [f"{p.title}\n{p.text.strip()}" if p.title else p.text.strip() for p in item.passages]
    return [" ".join(docs)] * len(docs) if mode == "all" else docs


def reference_p_yes(model, tokenizer, template: PromptTemplate, items, mode: str, yes: int, no: int):
    """EXIT's procedure: one whole prompt per sentence, full-vocabulary logits, softmax of two."""
    out = []
    for item in items:
        for context, p, spans in zip(_contexts(item, mode), item.passages, item.spans):
            scores = []
            for a, b in spans.tolist():
                prompt = template.prefix(item.question, context) + template.branch(p.text[a:b])
                ids = tokenizer(prompt, return_tensors="pt").input_ids
                with torch.no_grad():
                    logits = model(input_ids=ids).logits[0, -1]
                scores.append(torch.softmax(logits[[yes, no]].double(), 0)[0].item())
            out.append(np.array(scores))
    return out


class CountingRunner:
    """A runner that answers zeros and adds up the tokens it is fed (rows x width)."""

    call_tokens, padded, fed = CPU_CALL_TOKENS["causal-yesno"], True, 0

    def run(self, feeds):
        self.fed += int(feeds["input_ids"].size)
        return [np.zeros((feeds["score_index"].shape[0], 2), np.float32)]


def _scorer(lm: CausalLM, folder: Path, **manifest_options) -> CausalYesNoScorer:
    manifest = describe(lm, **manifest_options)
    lm.tokenizer.backend_tokenizer.save(str(folder / "tokenizer.json"))
    head = YesNoHead(lm.model, manifest["yes_id"], manifest["no_id"]).eval()
    return CausalYesNoScorer(folder, manifest, ModuleRunner(head, GRAPH_INPUTS, CPU_CALL_TOKENS["causal-yesno"]))


def _flat(scores) -> np.ndarray:
    return np.concatenate([s for sc in scores for s in sc.sentences])


# -- parity --------------------------------------------------------------------------------
@pytest.mark.parametrize("arch, mode", [("gemma", "all"), ("gemma2", "own"), ("gemma3_text", "all"),
                                        ("llama", "own")])
def test_tree_packing_equals_one_prompt_per_sentence(tiny_checkpoint, tmp_path, arch, mode):
    lm = load_causal_lm(tiny_checkpoint(arch))
    scorer = _scorer(lm, tmp_path, context=mode)
    items = _requests(2, 3)
    got = _flat(scorer.score(items, {}))
    want = np.concatenate(reference_p_yes(lm.model, lm.tokenizer, scorer.template, items, mode, *_yes_no(lm)))
    assert got.shape == want.shape and got.size > 6
    np.testing.assert_allclose(got, want, atol=TOL, rtol=0)
    assert ((got >= 0.5) == (want >= 0.5)).all()
    assert want.std() > 1e-3  # the comparison is not between constants
    tree = scorer.build_tree(items)
    assert tree.tokens < sum(len(lm.tokenizer(scorer.template.prefix(i.question, c)).input_ids) for i in items
                             for c, sp in zip(_contexts(i, mode), i.spans) for _ in range(sp.shape[0]))
    if mode == "own":  # the documents' trees share rows
        assert tree.rows["input_ids"].shape[0] < sum(len(i.passages) for i in items)


def test_own_context_is_the_default(tiny_checkpoint):
    """EXIT's paper (Eq. 4) and training data condition a sentence on its own document."""
    manifest = describe(load_causal_lm(tiny_checkpoint("llama")))
    assert manifest["context"] == "own" and manifest["tree_stride"] >= 2


def test_exports_without_a_tree_stride_keep_one_prefix_per_row(tiny_checkpoint, tmp_path):
    """A model exported before forests (no tree_stride in its manifest) gets pack_tree's rows,
    which its graph understands; the scores are the same either way."""
    lm = load_causal_lm(tiny_checkpoint("llama"))
    items = _requests(2, 3)
    forest = _scorer(lm, tmp_path, context="own")
    manifest = describe(lm, context="own")
    del manifest["tree_stride"]
    head = YesNoHead(lm.model, manifest["yes_id"], manifest["no_id"]).eval()
    older = CausalYesNoScorer(tmp_path, manifest, ModuleRunner(head, GRAPH_INPUTS, CPU_CALL_TOKENS["causal-yesno"]))
    one_per_row = older.build_tree(items).rows
    assert one_per_row["input_ids"].shape[0] == sum(len(i.passages) for i in items)
    assert "row_group" in one_per_row and "row_group" not in forest.build_tree(items).rows
    np.testing.assert_allclose(_flat(older.score(items, {})), _flat(forest.score(items, {})), atol=1e-5, rtol=0)


def test_own_context_computes_close_to_its_real_tokens(smollm2_dir, tmp_path):
    """HotpotQA requests of 5 documents in 'own' mode: trees packed several to a row feed the
    model little padding, where one prefix per row pads every document to the longest."""
    lm = load_causal_lm(smollm2_dir)
    segment = get_segmenter("rules")
    items = []
    for record in load_jsonl("hotpotqa_distractor", 4):
        ps = tuple(Passage("".join(s), t) for t, s in record["context"][:5])
        items.append(ScoreInput(record["question"], ps, tuple(segment(p.text) for p in ps)))
    lm.tokenizer.backend_tokenizer.save(str(tmp_path / "tokenizer.json"))
    manifest = describe(lm, context="own")
    older = {k: v for k, v in manifest.items() if k != "tree_stride"}
    for item in items:
        fed = {}
        for name, m in (("forest", manifest), ("one per row", older)):
            runner = CountingRunner()
            scorer = CausalYesNoScorer(tmp_path, m, runner)
            tree = scorer.build_tree([item])
            scorer.run_tree(tree)
            fed[name] = runner.fed
        assert fed["forest"] <= 1.1 * tree.tokens < fed["one per row"]


def _yes_no(lm: CausalLM) -> tuple[int, int]:
    return single_token_id(lm.tokenizer, "Yes"), single_token_id(lm.tokenizer, "No")


def test_gemma_prompt_is_exit_prompt(tiny_checkpoint):
    lm = load_causal_lm(tiny_checkpoint("gemma"))
    manifest = describe(lm)
    assert manifest["prompt"]["name"] == "exit"
    filled = PromptTemplate(manifest["prompt"]["template"])
    text = filled.prefix("Q?", "T\nC.") + filled.branch("S.")
    assert text == ('<start_of_turn>user\nQuery:\nQ?\nFull context:\nT\nC.\nSentence:\nS.\nIs this sentence '
                    'useful in answering the query? Answer only "Yes" or "No".<end_of_turn>\n<start_of_turn>model\n')
    assert manifest["prompt"]["prefix_ids"] == [lm.tokenizer.bos_token_id]
    # the chat template renders the same turn
    chat = lm.tokenizer.apply_chat_template([{"role": "user", "content": "x"}], tokenize=False,
                                            add_generation_prompt=True)
    assert chat == "<bos><start_of_turn>user\nx<end_of_turn>\n<start_of_turn>model\n"


@pytest.mark.parametrize("mode", ["own", "all"])
def test_both_tokenization_paths_give_the_whole_prompt_ids(smollm2_dir, tmp_path, mode):
    """Prefix and branches encoded apart (junction-safe vocabularies) or as whole prompts with
    a shared longest common prefix: either way every branch sees exactly tokenizer(prompt),
    also where several contexts' trees share a row."""
    lm = load_causal_lm(smollm2_dir)
    items = _requests(2, 3)
    manifest = describe(lm, context=mode)
    assert manifest["prompt"]["junction_safe"]
    lm.tokenizer.backend_tokenizer.save(str(tmp_path / "tokenizer.json"))
    stride = manifest["tree_stride"]
    for safe in (True, False):
        m = {**manifest, "prompt": {**manifest["prompt"], "junction_safe": safe}}
        scorer = CausalYesNoScorer(tmp_path, m, runner=None)  # build_tree only: no model call
        tree = scorer.build_tree(items)
        rows = tree.rows
        width = rows["input_ids"].shape[1]
        k = 0
        for item in items:
            for context, p, spans in zip(_contexts(item, mode), item.passages, item.spans):
                for a, b in spans.tolist():
                    row, col = divmod(int(rows["score_index"][k]), width)
                    br = rows["branch_ids"][row].astype(np.int64)
                    own = (br == br[col]) | (br == br[col] - br[col] % stride)  # own branch, own tree's prefix
                    seen = np.flatnonzero((np.arange(width) <= col) & own)
                    prompt = scorer.template.prefix(item.question, context) + scorer.template.branch(p.text[a:b])
                    assert rows["input_ids"][row, seen].tolist() == lm.tokenizer(prompt).input_ids
                    k += 1


@pytest.mark.parametrize("mode", ["own", "all"])
def test_smollm2_real_weights(smollm2_dir, tmp_path, mode):
    """Real SmolLM2-135M-Instruct (GGUF Q4_1, de-quantized) in the torch backend, both context
    modes: the reference P(Yes) within 1e-4 and identical keep decisions. (Its ONNX export takes
    minutes on 2 cores; benchmarks/exit.py --onnx checks that graph; here ONNX is checked on
    tiny models.)"""
    lm = load_causal_lm(smollm2_dir)
    items = _requests(1, 2, max_sentences=3)
    scorer = _scorer(lm, tmp_path, context=mode)
    got = _flat(scorer.score(items, {}))
    want = np.concatenate(reference_p_yes(lm.model, lm.tokenizer, scorer.template, items, mode, *_yes_no(lm)))
    np.testing.assert_allclose(got, want, atol=TOL, rtol=0)
    assert ((got >= 0.5) == (want >= 0.5)).all()


def test_onnx_export_through_compressor(tiny_checkpoint, tmp_path):
    """Gemma 2 (sliding window + both soft-caps) exported with the dynamo exporter, loaded by
    Compressor.load as a model directory: scores and kept sentences match the reference."""
    from thresher import Compressor

    src = tiny_checkpoint("gemma2")
    out = export_causal_yesno(src, tmp_path / "model", context="own")
    c = Compressor.load(out)
    assert c.kind == "causal-yesno" and c.threshold == 0.5
    item = _requests(1, 3)[0]
    passages = [{"title": p.title, "text": p.text} for p in item.passages] + [{"title": "Empty", "text": "  "}]
    result = c.compress(item.question, passages)
    assert len(result.passages[-1].sentences) == 0
    assert len(c.compress("Nothing?", ["   ", ""]).passages[0].sentences) == 0
    got = np.array([s.score for p in result.passages for s in p.sentences])
    kept = np.array([s.kept for p in result.passages for s in p.sentences])
    lm = load_causal_lm(src)
    manifest = json.loads((out / "thresher.json").read_text())
    want = np.concatenate(reference_p_yes(lm.model, lm.tokenizer, PromptTemplate(manifest["prompt"]["template"]),
                                          [item], "own", manifest["yes_id"], manifest["no_id"]))
    np.testing.assert_allclose(got, want, atol=TOL, rtol=0)
    assert (kept == (want >= 0.5)).all()


# -- LoRA ----------------------------------------------------------------------------------
def _lora(base_dir: Path, out: Path, seed: int) -> Path:
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(base_dir)
    peft_model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)  # LoRA B starts at zero; make the adapter change the model
    peft_model.save_pretrained(out)
    return out


def test_lora_merged_equals_unmerged(tiny_checkpoint, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base_dir = tiny_checkpoint("llama")
    adapter = _lora(base_dir, tmp_path / "adapter", seed=1)
    merged = load_causal_lm(base_dir, adapter)
    scorer = _scorer(merged, tmp_path, context="all")
    items = _requests(1, 2)
    got = _flat(scorer.score(items, {}))
    unmerged = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base_dir), str(adapter)).eval()
    yes, no = _yes_no(merged)
    want = np.concatenate(reference_p_yes(unmerged, merged.tokenizer, scorer.template, items, "all", yes, no))
    base = np.concatenate(reference_p_yes(load_causal_lm(base_dir).model, merged.tokenizer, scorer.template,
                                          items, "all", yes, no))
    np.testing.assert_allclose(got, want, atol=TOL, rtol=0)
    assert np.abs(base - want).max() > 1e-3  # the adapter really changes the scores


def test_mismatched_adapter_is_refused(tiny_checkpoint, tmp_path):
    adapter = _lora(tiny_checkpoint("gemma"), tmp_path / "gemma-adapter", seed=2)  # other shapes/heads
    with pytest.raises(ValueError, match="does not match the base model"):
        load_causal_lm(tiny_checkpoint("llama"), adapter)
    with pytest.raises(ValueError, match="not a PEFT adapter"):
        load_causal_lm(tiny_checkpoint("llama"), tmp_path)


# -- bad input -----------------------------------------------------------------------------
def test_tokenizer_without_single_token_yes_no_is_refused(tiny_checkpoint):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {c: i for i, c in enumerate("YesNo<>x")}
    raw = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok = PreTrainedTokenizerFast(tokenizer_object=raw)
    lm = load_causal_lm(tiny_checkpoint("llama"))
    with pytest.raises(ValueError, match="'Yes' as 3 tokens"):
        describe(CausalLM(lm.model, tok, {}))


def test_prompt_over_the_window_is_split_by_documents(smollm2_dir, tmp_path):
    """'all' mode with a window that fits one document but not two scores every sentence with
    its own document as context (the same as 'own' mode); a sentence that cannot fit at all is
    refused, never cut."""
    lm = load_causal_lm(smollm2_dir)
    items = _requests(1, 3)
    manifest = describe(lm)
    lm.tokenizer.backend_tokenizer.save(str(tmp_path / "tokenizer.json"))

    def tree(mode, window):
        m = {**manifest, "max_length": window, "context": mode}
        return CausalYesNoScorer(tmp_path, m, runner=None).build_tree(items)

    def prefixes(t):  # trees in the rows: their first prefix token has position 0
        br, pos = t.rows["branch_ids"], t.rows["position_ids"]
        return int(((pos == 0) & (br >= 0) & (br % manifest["tree_stride"] == 0)).sum())

    own = tree("own", 8192)
    longest_own = int(own.rows["position_ids"].reshape(-1)[own.rows["score_index"]].max()) + 1
    assert prefixes(tree("all", 8192)) == 1  # everything fits: one shared prefix
    split = tree("all", longest_own)
    assert prefixes(split) == prefixes(own) == 3
    for key in ("input_ids", "position_ids", "branch_ids"):
        np.testing.assert_array_equal(split.rows[key], own.rows[key], err_msg=key)
    np.testing.assert_array_equal(split.branch_sentence, own.branch_sentence)
    with pytest.raises(ValueError, match="context window is 40"):
        tree("own", 40)
