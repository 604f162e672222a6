"""The default model ships exported in the package (trained/minilm_pruner/model: int8 model.onnx,
tokenizer.json, thresher.json), so `Compressor.load("default")` needs no torch and no export on
first use. `make default-model` rebuilds it from the shipped LoRA delta (needs the [export] extra):

    python -m thresher.shipped src/thresher/trained/minilm_pruner/model
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from thresher.announce import long_step
from thresher.catalogue import ALIASES, NAMED_MODELS
from thresher.manifest import atomic_directory

DEFAULT = ALIASES["default"]


def export_default(out_dir: str | Path) -> Path:
    """Export the default named model from the delta into out_dir (replaced if present)."""
    out_dir = Path(out_dir)
    staged = out_dir.with_name(out_dir.name + ".new")
    with long_step(f"exporting the default model ({DEFAULT}) into {out_dir}", "20-60 s"), \
            atomic_directory(staged) as tmp:
        NAMED_MODELS[DEFAULT].export(tmp)
    shutil.rmtree(out_dir, ignore_errors=True)
    staged.rename(out_dir)
    return out_dir


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m thresher.shipped", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", help="model directory to (re)write, e.g. src/thresher/trained/minilm_pruner/model")
    out = export_default(parser.parse_args(argv).out)
    sys.stdout.write(f"{out}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
