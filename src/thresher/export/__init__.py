"""Exporters: a Hugging Face checkpoint folder or GGUF file -> a model directory (model.onnx,
tokenizer.json, thresher.json) that the runtime loads without torch. Everything here imports torch,
except detect.py and configs.py (which kind a checkpoint is)."""
