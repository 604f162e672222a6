"""The engine: what every model kind shares, below the scorers.

request.py  validation (one validator for every front door)   segment.py   sentences with offsets
tokenize.py fast-tokenizer helpers                            batch.py     packing (C++) and cut_runs
scorer.py   the scorer contract                               runner.py    the runner contract + ONNX Runtime
torch_backend.py  torch runners for GPUs (lazy: needs torch)  tree_mask.py tree attention masks (torch)
reduce.py   token -> sentence -> keep flags                   result.py    results and assembly
pipeline.py one compression: segment -> score -> select -> assemble
"""
