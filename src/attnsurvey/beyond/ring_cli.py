"""The command line of ring attention (:mod:`attnsurvey.beyond.ring`) and its checks.

Kept apart from the algorithm: :func:`demo` checks ``P = 2`` local processes against
one process, :func:`seeded_error` is the check a ``torchrun`` launch reports, and
:func:`main` is the command line, ``python -m attnsurvey.beyond.ring`` (which runs this
module), also under ``torchrun``.
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist
from torch import Tensor

from .ring import UNITS, ring_attention, run_ring, seeded_chunk


def demo(P: int = 2, n: int = 64, d: int = 16) -> float:
    """Ring attention on ``P`` processes vs one process (SDPA): prints and returns the largest error.

    Args:
        P: the number of processes.
        n: the sequence length.
        d: the head size.

    Returns:
        The largest absolute difference of the contexts, over both masks.

    Raises:
        TimeoutError: if the processes take longer than 60 s.
    """
    import torch.nn.functional as F

    g = torch.Generator().manual_seed(0)
    Q, K, V = (torch.randn(2, n, d, generator=g) for _ in range(3))
    worst = 0.0
    for causal, c in zip((False, True), run_ring(Q, K, V, P, is_causal=(False, True))):
        err = float((c - F.scaled_dot_product_attention(Q, K, V, is_causal=causal)).abs().max())
        print(f"P = {P}, n = {n}, d = {d}, causal = {causal}: max |ring - one process| = {err:.1e}")
        worst = max(worst, err)
    return worst


def seeded_error(n: int, d: int, causal: bool, device: torch.device | None = None) -> Tensor:
    """This rank's largest error of :func:`ring_attention` on the seeded data of :func:`seeded_chunk`.

    Call on every rank of an initialised process group. The reference is SDPA on
    the whole sequence as a 4-D ``(1, 1, n, d)`` input, whose fused kernels never
    form the ``n x n`` matrix (a 3-D input would take SDPA's plain path and build it
    on every rank).

    Args:
        n: the sequence length (divisible by ``UNITS`` and by the world size).
        d: the width.
        causal: whether to use the causal mask.
        device: where to compute (default CPU).

    Shape:
        output: ``(1,)``.

    Returns:
        A one-element tensor on ``device``.

    Raises:
        RuntimeError: if no process group is initialised.
    """
    import torch.nn.functional as F

    rank, P = dist.get_rank(), dist.get_world_size()
    c = n // P
    full = [torch.cat([seeded_chunk(w, u, UNITS, n, d) for u in range(UNITS)], -2).to(device) for w in "QKV"]
    Q, K, V = (x[..., rank * c : (rank + 1) * c, :] for x in full)
    with torch.no_grad():
        out = ring_attention(Q, K, V, is_causal=causal)
    Q4, K4, V4 = (x[:, None] for x in full)  # (1, 1, n, d)
    ref = F.scaled_dot_product_attention(Q4, K4, V4, is_causal=causal)[:, 0, rank * c : (rank + 1) * c]
    return (out - ref).abs().max().reshape(1)


def _torchrun_main(n: int, d: int, causal: bool, backend: str = "gloo") -> None:
    """Entry for ``torchrun``: env:// rendezvous, :func:`seeded_error` on every rank, the largest printed by rank 0.

    ``backend="nccl"`` puts each rank on GPU ``LOCAL_RANK`` (not exercised by the book's CI, which has no GPU).
    """
    dist.init_process_group(backend)
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if backend == "nccl" else torch.device("cpu")
    if backend == "nccl":
        torch.cuda.set_device(device)
    err = seeded_error(n, d, causal, device)
    dist.reduce(err, 0, op=dist.ReduceOp.MAX)
    if dist.get_rank() == 0:
        print(
            f"P = {dist.get_world_size()}, n = {n}, d = {d}, causal = {causal}, backend = {backend}: max error {err.item():.1e}"
        )
    dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    """Command line: ``--demo`` (local processes) or a seeded check under ``torchrun``; returns the exit status.

    Args:
        argv: the arguments (default ``sys.argv[1:]``).

    Returns:
        0 on success, 1 if the demo's error exceeds 1e-5.

    Raises:
        SystemExit: (from argparse) on bad arguments, or without ``--demo`` outside ``torchrun``.
    """
    p = argparse.ArgumentParser(prog="python -m attnsurvey.beyond.ring", description=__doc__.split("\n")[0])
    p.add_argument("--demo", action="store_true", help="spawn P local processes and compare with one process")
    p.add_argument("-P", type=int, default=2)
    p.add_argument("-n", type=int, default=64)
    p.add_argument("-d", type=int, default=16)
    p.add_argument("--causal", action="store_true")
    p.add_argument(
        "--backend", default="gloo", choices=["gloo", "nccl"], help="under torchrun: gloo (CPU) or nccl (GPUs)"
    )
    args = p.parse_args(argv)
    if args.demo:
        return 0 if demo(args.P, args.n, args.d) <= 1e-5 else 1
    if "RANK" not in os.environ:
        p.error("run with --demo, or under torchrun (which sets RANK, WORLD_SIZE, MASTER_ADDR)")
    _torchrun_main(args.n, args.d, args.causal, args.backend)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
