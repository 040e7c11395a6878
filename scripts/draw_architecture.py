"""Draw the package's architecture for the book: book/_static/architecture.png (the
figure) and book/_static/architecture.json (the layers and the imports between module
groups it shows). tests/test_architecture.py fails when the JSON no longer matches the
code, which means: run this script again.

    .venv/bin/python scripts/draw_architecture.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tools/ is a development package at the repository root

from tools import architecture as arch  # noqa: E402

OUT = ROOT / "book" / "_static"


def main() -> int:
    graph = arch.import_graph()
    (OUT / "architecture.json").write_text(json.dumps(arch.summary_data(graph), indent=1) + "\n")
    fig = arch.architecture_figure(graph)
    fig.savefig(OUT / "architecture.png", dpi=90, bbox_inches="tight", metadata={"Software": None})
    print(f"wrote {OUT / 'architecture.png'} and {OUT / 'architecture.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
