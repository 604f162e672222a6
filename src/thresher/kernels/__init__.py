"""Triton kernels for the GPU path, each beside the reference twin that defines it.

- yesno_head: final hidden states -> RMSNorm -> two LM-head rows -> soft-cap -> P(Yes)/(P(Yes)+P(No)).
- sentence_keep: token keep probabilities -> per-sentence mean / majority vote -> keep flags ->
  per-passage aggregates (one segmented reduction).

Importing a kernel module imports torch and triton; nothing in `import thresher` does. On CPU
tensors the kernels need TRITON_INTERPRET=1 (tests only); the CPU production path is NumPy
(thresher.engine.reduce).
"""
