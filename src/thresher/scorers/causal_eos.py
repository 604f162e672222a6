"""`causal-eos` runtime: log P(EOS | prompt, window[:e]) for chosen character ends of windows.

One ONNX call scores a batch of windows: each row is prompt prefix + window tokens (right
padded); the graph reads only the token that holds each requested character end. Rows are
sorted by length and split under a padded-token budget. Ends that fall beyond the model's
window (max_length) get -inf: they are not candidates, nothing is cut silently.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from thresher.engine.batch import cut_runs
from thresher.engine.runner import Runner
from thresher.engine.timing import timed
from thresher.engine.tokenize import load_tokenizer


class CausalEosModel:
    kind = "causal-eos"

    def __init__(self, model_dir: str | Path, manifest: dict, runner: Runner):
        model_dir = Path(model_dir)
        self.name = manifest["name"]
        self.segmenter = manifest.get("segmenter", "rules")
        self.max_length = int(manifest["max_length"])
        self.eos_id = int(manifest["eos_id"])
        self.pad_id = int(manifest["pad_id"])
        self._tok = load_tokenizer(model_dir / "tokenizer.json")
        self.prefix_ids = np.asarray(
            self._tok.encode(manifest["prompt_prefix"], add_special_tokens=False).ids, np.int64)
        if self.prefix_ids.size >= self.max_length:
            raise ValueError(f"{model_dir}: the prompt prefix alone fills max_length {self.max_length}")
        self._runner = runner  # padded tokens per call: runner.call_tokens (bounds activations)

    def eos_log_probs(self, windows: list[str], ends: list[np.ndarray],
                      timings: dict[str, float] | None = None) -> list[np.ndarray]:
        """For each window and each character end e in ends[i] (ascending, 0 < e <= len):
        log P(EOS | prompt, window[:e]) read at the window token holding character e - 1.
        Returns float32 arrays shaped like `ends`."""
        timings = {} if timings is None else timings
        if len(windows) != len(ends):
            raise ValueError(f"{len(windows)} windows but {len(ends)} end lists")
        room = self.max_length - self.prefix_ids.size
        with timed(timings, "tokenize"):
            encs = self._tok.encode_batch(windows, add_special_tokens=False) if windows else []
            rows, reads = [], []
            for enc, e, text in zip(encs, ends, windows):
                e = np.asarray(e, np.int64)
                offsets = np.asarray(enc.offsets, np.int64).reshape(-1, 2)[:room]
                kept_end = len(text) if len(enc.ids) <= room else int(offsets[-1, 1])
                tok = np.searchsorted(offsets[:, 0], e, side="left") - 1  # token holding char e-1
                rows.append(np.concatenate([self.prefix_ids, np.asarray(enc.ids[:room], np.int64)]))
                reads.append(np.where((tok >= 0) & (e > 0) & (e <= kept_end), self.prefix_ids.size + tok, -1))
        out = [np.full(len(e), -np.inf, np.float32) for e in ends]
        lengths = np.array([r.size for r in rows], np.int64)
        order = np.argsort(-lengths, kind="stable")
        with timed(timings, "model"):
            for part in cut_runs(lengths[order], self._runner.call_tokens, min_fill=0.0):
                batch = order[part].tolist()
                width = rows[batch[0]].size
                n = max(1, max(len(ends[b]) for b in batch))
                ids = np.full((len(batch), width), self.pad_id, np.int64)
                mask = np.zeros((len(batch), width), np.int64)
                pos = np.zeros((len(batch), n), np.int64)
                for r, b in enumerate(batch):
                    ids[r, : rows[b].size] = rows[b]
                    mask[r, : rows[b].size] = 1
                    pos[r, : reads[b].size] = np.maximum(reads[b], 0)
                (logp,) = self._runner.run({"input_ids": ids, "attention_mask": mask, "positions": pos})
                for r, b in enumerate(batch):
                    valid = reads[b] >= 0
                    out[b][valid] = logp[r, : reads[b].size][valid]
        return out
