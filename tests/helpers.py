"""Small helpers shared by the test modules."""

from __future__ import annotations

import torch


def rand(*shape: int, seed: int = 0, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A standard-normal tensor from its own seeded generator (independent of global RNG state)."""
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def toc_files(root=None) -> list[str]:
    """The files of ``_toc.yml`` in reading order (root page first), without suffix."""
    from pathlib import Path

    import yaml

    root = Path(root) if root is not None else Path(__file__).resolve().parents[1]
    toc = yaml.safe_load((root / "_toc.yml").read_text())
    files = [toc["root"]]
    for part in toc.get("parts", []):
        for ch in part.get("chapters", []):
            files.append(ch["file"])
            files.extend(s["file"] for s in ch.get("sections", []))
    return [f.removesuffix(".ipynb").removesuffix(".md") for f in files]
