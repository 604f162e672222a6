"""The framework examples run end to end and shrink what the retriever returned."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import DATA

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.mark.parametrize("name", ["langchain_example", "llamaindex_example", "haystack_example"])
def test_example_runs(name, default_compressor):  # the fixture exports the default model once
    if not (DATA / "hotpotqa_distractor" / "dev.jsonl").is_file():
        pytest.skip(f"{DATA} is absent")
    out = subprocess.run([sys.executable, str(EXAMPLES / f"{name}.py")], capture_output=True, timeout=600,
                         env={**os.environ, "THRESHER_DATA": str(DATA)})
    assert out.returncode == 0, out.stderr.decode()[-3000:]
    text = out.stdout.decode()
    before = re.search(r"^before \(BM25\): (\d+) passages, ([\d,]+) characters", text, re.M)
    after = re.search(r"^after \(thresher\): (\d+) passages, ([\d,]+) characters", text, re.M)
    assert before and after, text
    assert int(before[1]) == 8 and 1 <= int(after[1]) <= 4  # top 4 of the 8 retrieved
    assert int(after[2].replace(",", "")) < int(before[2].replace(",", ""))
