"""Run every benchmark script in this folder; each prints its figure beside its same-run baseline."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> None:
    sys.path.insert(0, str(HERE))
    only = set(sys.argv[1:])
    for script in sorted(HERE.glob("bench_*.py")):
        if only and not {script.stem, script.stem.removeprefix("bench_")} & only:
            continue
        print(f"\n##### {script.name}", flush=True)
        runpy.run_path(str(script), run_name="__main__")


if __name__ == "__main__":
    main()
