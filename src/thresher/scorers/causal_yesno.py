"""`causal-yesno`: EXIT-style scoring, P(Yes) / (P(Yes) + P(No)) per sentence from a causal LM.

EXIT asks, for every sentence, "is this sentence useful in answering the query?" with the query
and the full context in the prompt, one prompt per sentence. Here every context becomes one
prefix (instruction, query, context) shared by all its sentences: each sentence is a branch
(sentence + question + model turn) packed after the prefix by the C++ tree packer; several
contexts' trees share a row, block-diagonal, so short "own" contexts do not each pad a row. The
graph returns only the yes/no logits at each branch's last token. The result is the same as one prompt
per sentence (tests/test_exit.py checks it against full-vocabulary logits).

Context modes: "own" (the default of new exports) uses the sentence's own passage, title,
newline, text (EXIT's Eq. 4 and its training data); "all" joins every passage of the request
(passages joined by a space, as EXIT's quickstart joins its sentences). A prompt longer than the model's context window is split by documents (then by
sentence blocks of one document), never cut.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from thresher._native import pack_forest, pack_tree
from thresher.engine.batch import cut_runs
from thresher.engine.runner import Runner
from thresher.engine.scorer import ScoreInput, Scores
from thresher.engine.timing import timed
from thresher.engine.tokenize import encode_flat, load_tokenizer

USER_MESSAGE = ("Query:\n{query}\nFull context:\n{context}\nSentence:\n{sentence}\n"
                'Is this sentence useful in answering the query? Answer only "Yes" or "No".')
# EXIT's prompt (arXiv 2412.12559, Table 6) as a Gemma chat turn; BOS comes from the tokenizer.
EXIT_TEMPLATE = "<start_of_turn>user\n" + USER_MESSAGE + "<end_of_turn>\n<start_of_turn>model\n"
CONTEXT_MODES = ("all", "own")
GRAPH_INPUTS = ("input_ids", "position_ids", "branch_ids", "score_index")  # -> yes/no logits [N, 2]
MAX_ROW_TOKENS = 4_096  # one row = prefix + branches; more branches go to rows repeating the prefix


class PromptTemplate:
    """A template with {query}, {context} and {sentence}, in that order, each once.

    Filled piecewise (never with str.format), so braces in user text stay literal.
    """

    def __init__(self, text: str):
        parts = re.split(r"\{(query|context|sentence)\}", text)
        if parts[1::2] != ["query", "context", "sentence"]:
            raise ValueError("a yes/no prompt template needs {query}, {context} and {sentence}, in that "
                             f"order and once each; got fields {parts[1::2]}")
        self.text = text
        self.pieces = parts[0::2]  # literal text before query, before context, before sentence, after

    def prefix(self, query: str, context: str) -> str:
        a, b, c, _ = self.pieces
        return a + query + b + context + c

    def branch(self, sentence: str) -> str:
        return sentence + self.pieces[3]


@dataclass(frozen=True)
class TreeBatch:
    """Tree-packed rows for a batch of requests, and where each branch's score goes."""

    rows: dict[str, np.ndarray]  # pack_tree output (input_ids, position_ids, branch_ids, ...)
    branch_request: np.ndarray  # int64 [N]
    branch_passage: np.ndarray  # int64 [N]
    branch_sentence: np.ndarray  # int64 [N]

    @property
    def tokens(self) -> int:
        """Real (non-padding) tokens the model computes."""
        return int(np.count_nonzero(self.rows["branch_ids"] >= 0))


@dataclass
class _Group:
    request: int
    pieces: list[tuple[int, int, int]]  # (passage, first sentence, end sentence)


class CausalYesNoScorer:
    kind = "causal-yesno"

    def __init__(self, model_dir: str | Path, manifest: dict, runner: Runner, *,
                 context: str | None = None, max_row_tokens: int = MAX_ROW_TOKENS):
        """context: "all" | "own" (default from the manifest). max_row_tokens: row budget of the
        tree packer (raised for a prompt that needs more). The runner's call_tokens bounds the
        rows x width of each model call; its graph maps {input_ids, position_ids, branch_ids,
        score_index} to yes/no logits [N, 2]."""
        model_dir = Path(model_dir)
        self.name = manifest["name"]
        self.threshold = float(manifest["threshold"])
        self.segmenter = manifest["segmenter"]
        self.context = context or manifest["context"]
        if self.context not in CONTEXT_MODES:
            raise ValueError(f"context must be one of {CONTEXT_MODES}, got {self.context!r}")
        if isinstance(max_row_tokens, bool) or not isinstance(max_row_tokens, int) or max_row_tokens < 1:
            raise ValueError(f"max_row_tokens must be an int >= 1, got {max_row_tokens!r}")
        self.max_row_tokens = max_row_tokens
        self.window = int(manifest["max_length"])
        prompt = manifest["prompt"]
        self.template = PromptTemplate(prompt["template"])
        self._before = np.asarray(prompt["prefix_ids"], np.int64)
        self._after = np.asarray(prompt["suffix_ids"], np.int64)
        self._apart = bool(prompt["junction_safe"])
        self._pad = int(manifest["pad_id"])
        # Graphs exported with a tree stride take several trees per row (pack_forest); older
        # exports get one prefix per row (pack_tree).
        self._stride = manifest.get("tree_stride")
        self._tok = load_tokenizer(model_dir / "tokenizer.json")
        self._runner = runner

    # -- prompts ---------------------------------------------------------------------------
    def _context_text(self, item: ScoreInput, pieces: list[tuple[int, int, int]]) -> str:
        texts = []
        for p, s0, s1 in pieces:
            passage, spans = item.passages[p], item.spans[p]
            whole = s0 == 0 and s1 == spans.shape[0]
            body = passage.text.strip() if whole else passage.text[spans[s0, 0]:spans[s1 - 1, 1]]
            title = (passage.title or "").strip()
            texts.append(f"{title}\n{body}" if title else body)
        return " ".join(texts)

    def _initial_groups(self, items: list[ScoreInput]) -> list[_Group]:
        groups = []
        for r, item in enumerate(items):
            pieces = [(p, 0, sp.shape[0]) for p, sp in enumerate(item.spans) if sp.shape[0]]
            if self.context == "all":
                groups.extend([_Group(r, pieces)] if pieces else [])
            else:
                groups.extend(_Group(r, [piece]) for piece in pieces)
        return groups

    @staticmethod
    def _split(group: _Group) -> list[_Group]:
        """Halve by documents; a single document by sentence blocks."""
        if len(group.pieces) > 1:
            half = len(group.pieces) // 2
            return [_Group(group.request, group.pieces[:half]), _Group(group.request, group.pieces[half:])]
        p, s0, s1 = group.pieces[0]
        mid = (s0 + s1) // 2
        return [_Group(group.request, [(p, s0, mid)]), _Group(group.request, [(p, mid, s1)])]

    def _encode(self, texts: list[str]) -> list[np.ndarray]:
        ids, cu = encode_flat(self._tok, texts)
        return np.split(ids, cu[1:-1]) if texts else []

    def _tokenize(self, items: list[ScoreInput], groups: list[_Group]):
        """Token ids of every group's prefix and branches.

        junction_safe tokenizers encode prefix and branches apart (the branch ids of a sentence
        are shared by all its contexts); others encode each whole prompt and share the longest
        common prefix of a group's prompts, which is exact for any tokenizer.
        """
        prefix_texts = [self.template.prefix(items[g.request].question, self._context_text(items[g.request], g.pieces))
                        for g in groups]
        branch_texts = [[self.template.branch(items[g.request].passages[p].text[a:b])
                         for p, s0, s1 in g.pieces for a, b in items[g.request].spans[p][s0:s1].tolist()]
                        for g in groups]
        if self._apart:
            prefixes = [np.concatenate([self._before, ids]) for ids in self._encode(prefix_texts)]
            flat = iter(self._encode([t for ts in branch_texts for t in ts]))
            branches = [[np.concatenate([next(flat), self._after]) for _ in ts] for ts in branch_texts]
            return prefixes, branches
        prefixes, branches = [], []
        for prefix, texts in zip(prefix_texts, branch_texts):
            whole = [np.concatenate([self._before, ids, self._after]) for ids in self._encode([prefix + t for t in texts])]
            lcp = min(len(w) for w in whole) - 1  # every branch keeps its scoring token
            for w in whole[1:]:
                diff = np.flatnonzero(w[:lcp] != whole[0][:lcp])
                lcp = int(diff[0]) if diff.size else lcp
            prefixes.append(whole[0][:lcp])
            branches.append([w[lcp:] for w in whole])
        return prefixes, branches

    def build_tree(self, items: list[ScoreInput]) -> TreeBatch:
        """Group sentences by context, fit every prompt into the window, and tree-pack them."""
        groups = self._initial_groups(items)
        if not groups:  # no sentence anywhere
            rows = pack_tree(*(np.zeros(n, np.int64) for n in (0, 1, 0, 1, 0)), 1, self._pad)
            return TreeBatch(rows, *(np.zeros(0, np.int64) for _ in range(3)))
        prefixes, branches = self._tokenize(items, groups)
        while True:
            too_long = [i for i, (p, bs) in enumerate(zip(prefixes, branches))
                        if len(p) + max(len(b) for b in bs) > self.window]
            if not too_long:
                break
            for i in too_long:
                g = groups[i]
                if len(g.pieces) == 1 and g.pieces[0][2] - g.pieces[0][1] == 1:
                    p, s, _ = g.pieces[0]
                    raise ValueError(
                        f"request {g.request}, passage {p}, sentence {s}: its prompt needs "
                        f"{len(prefixes[i]) + len(branches[i][0])} tokens; the model's context window is "
                        f"{self.window} (shorten the sentence or the question)")
            parts = {i: self._split(groups[i]) for i in too_long}
            new = [part for i in too_long for part in parts[i]]
            new_prefixes, new_branches = self._tokenize(items, new)
            at = iter(range(len(new)))
            merged = []  # keep the groups in request/passage order
            for i in range(len(groups)):
                if i in parts:
                    merged += [(new[j], new_prefixes[j], new_branches[j]) for j in (next(at) for _ in parts[i])]
                else:
                    merged.append((groups[i], prefixes[i], branches[i]))
            groups, prefixes, branches = (list(x) for x in zip(*merged))
        req, psg, sent, gid = [], [], [], []
        for k, g in enumerate(groups):
            for p, s0, s1 in g.pieces:
                req += [g.request] * (s1 - s0)
                psg += [p] * (s1 - s0)
                sent += range(s0, s1)
                gid += [k] * (s1 - s0)
        flat_b = [b for bs in branches for b in bs]
        pcu = np.zeros(len(prefixes) + 1, np.int64)
        np.cumsum([len(p) for p in prefixes], out=pcu[1:])
        bcu = np.zeros(len(flat_b) + 1, np.int64)
        np.cumsum([len(b) for b in flat_b], out=bcu[1:])
        need = max((len(p) + max(len(b) for b in bs) for p, bs in zip(prefixes, branches)), default=1)
        args = (np.concatenate(prefixes or [np.zeros(0, np.int64)]), pcu,
                np.concatenate(flat_b or [np.zeros(0, np.int64)]), bcu, np.asarray(gid, np.int64),
                max(self.max_row_tokens, need), self._pad)
        rows = pack_forest(*args, int(self._stride)) if self._stride else pack_tree(*args)
        return TreeBatch(rows, np.asarray(req, np.int64), np.asarray(psg, np.int64), np.asarray(sent, np.int64))

    # -- model -----------------------------------------------------------------------------
    def run_tree(self, tree: TreeBatch) -> np.ndarray:
        """Yes/no logits [N, 2] of every branch, rows batched under the runner's call_tokens."""
        rows = tree.rows
        n = rows["score_index"].shape[0]
        out = np.zeros((n, 2), np.float32)
        if not n:
            return out
        width = rows["input_ids"].shape[1]
        fill = (rows["branch_ids"] >= 0).sum(axis=1)
        order = np.argsort(-fill, kind="stable")
        b_row, b_col = rows["score_index"] // width, rows["score_index"] % width
        for part in cut_runs(fill[order], self._runner.call_tokens, min_fill=0.0):
            run, w = order[part], int(fill[order[part.start]])
            local = np.full(rows["input_ids"].shape[0], -1, np.int64)
            local[run] = np.arange(run.shape[0])
            mine = np.flatnonzero(local[b_row] >= 0)
            feeds = {
                "input_ids": np.ascontiguousarray(rows["input_ids"][run, :w]),
                "position_ids": np.ascontiguousarray(rows["position_ids"][run, :w]),
                "branch_ids": np.ascontiguousarray(rows["branch_ids"][run, :w]),
                "score_index": local[b_row[mine]] * w + b_col[mine],
            }
            out[mine] = self._runner.run(feeds)[0]
        return out

    def score(self, items: list[ScoreInput], timings: dict[str, float]) -> list[Scores]:
        with timed(timings, "tokenize"):
            tree = self.build_tree(items)
        with timed(timings, "run"):
            logits = self.run_tree(tree)
        with timed(timings, "reduce"):
            p_yes = (1.0 / (1.0 + np.exp(logits[:, 1].astype(np.float64) - logits[:, 0]))).astype(np.float32)
            out = []
            for r, item in enumerate(items):
                sentences = [np.zeros(sp.shape[0], np.float32) for sp in item.spans]
                mine = np.flatnonzero(tree.branch_request == r)
                for p in np.unique(tree.branch_passage[mine]).tolist():
                    sel = mine[tree.branch_passage[mine] == p]
                    sentences[p][tree.branch_sentence[sel]] = p_yes[sel]
                rerank = np.array([s.max() if s.size else 0.0 for s in sentences], np.float32)
                out.append(Scores(tuple(sentences), rerank))
        return out
