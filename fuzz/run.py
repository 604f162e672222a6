"""Run one fuzz target: coverage-guided with atheris (libFuzzer), or a seeded replay.

    python fuzz/run.py TARGET [libFuzzer flags: -runs=N -seed=S -max_total_time=T CORPUS_DIR]
    python fuzz/run.py TARGET --replay N SEED     # N seeded random inputs, no libFuzzer

The replay mode exists for the ASan build (`make asan`): atheris's libFuzzer and a preloaded
libasan do not mix, so there the same target runs on seeded random bytes instead. A failing
input is written to crash-* (libFuzzer) or printed (replay) so it can become a regression test.
"""

from __future__ import annotations

import random
import sys

import atheris

sys.path.insert(0, __file__.rsplit("/", 1)[0])
# Python coverage guides the search: thresher's validator and segmenters, and the targets' own
# branches (which error each packer input hit). The C++ packers are not instrumented
# (libFuzzer's -fsanitize=fuzzer build is not available from atheris's wheel).
with atheris.instrument_imports(include=["thresher", "targets"]):
    from targets import TARGETS

    import thresher.engine.request  # noqa: F401
    import thresher.engine.segment  # noqa: F401


def replay(target, n: int, seed: int) -> None:
    rng = random.Random(seed)
    for i in range(n):
        data = rng.randbytes(rng.randint(0, 512))
        try:
            target(data)
        except BaseException:
            print(f"input {i} (seed {seed}) failed: {data!r}", file=sys.stderr)
            raise
    print(f"replay: {n} inputs, no failure")


def main(argv: list[str]) -> None:
    if len(argv) < 2 or argv[1] not in TARGETS:
        raise SystemExit(f"usage: {argv[0]} {{{','.join(TARGETS)}}} [libFuzzer flags | --replay N SEED]")
    target = TARGETS[argv[1]]
    if argv[2:3] == ["--replay"]:
        replay(target, int(argv[3]), int(argv[4]))
        return
    atheris.Setup([argv[0], *argv[2:]], target)
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)
