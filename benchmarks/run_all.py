"""Run every benchmark script in this folder (they print figures; none of them asserts)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    scripts = sorted(p for p in HERE.glob("*.py") if p.name != "run_all.py")
    for script in scripts:
        print(f"== {script.name}", flush=True)
        subprocess.run([sys.executable, str(script)], check=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
