"""Attention across machines: sequence-parallel ring attention (beyond the survey).

The sequence is cut into ``P`` equal chunks; rank ``r`` of a ``torch.distributed``
process group holds chunk ``r`` of the queries, keys and values. In ``P`` steps
every rank computes the online-softmax statistics of its queries against the
key/value chunk it currently holds (:func:`attnsurvey.beyond.tiled.attention_stats`),
merges them into its running ``(m, l, acc)`` with
:func:`attnsurvey.beyond.tiled.online_softmax_merge`, and passes the chunk on
to rank ``r + 1`` while it receives the next one from rank ``r - 1`` (sending
and receiving overlap the computation). After ``P`` steps every rank has seen
every key exactly once and holds the exact context of its own queries. Besides
its own K and V, a rank holds two key/value buffers of the same size: the chunk it
computes with and the one arriving.

With ``is_causal`` the chunk from rank ``s`` is fully visible to rank ``r`` if
``s < r``, triangular if ``s == r`` and invisible (skipped, but still passed
on) if ``s > r``. Forward pass only (no backward across ranks).

Run it:

* inside an initialised process group: :func:`ring_attention` on each rank;
* on one machine, from Python: :func:`run_ring` spawns ``P`` local processes
  (gloo on 127.0.0.1, meeting through a file, with a timeout) and returns the whole context;
* ``python -m attnsurvey.beyond.ring --demo`` checks P = 2 against one process;
* ``torchrun --nproc-per-node P -m attnsurvey.beyond.ring`` (add ``--nnodes``,
  ``--rdzv-backend c10d --rdzv-endpoint HOST:PORT`` for several hosts) runs
  seeded data and reports the error on rank 0.
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from .._checks import as_tensor, check_dim_equal, check_min_rank
from ..catalog import catalogued
from .tiled import Stats, attention_stats, check_qkv, finalize, online_softmax_merge

CHAPTER = "chapters/ch06_3_ring_attention.ipynb"
#: Data for seeded runs is generated in this many units, so it is the same for P = 1, 2, 4.
UNITS = 4


@catalogued("extra:ring-attention")
def ring_step_bytes(n: int, d_k: int, d_v: int, P: int, itemsize: int = 4, batch: int = 1) -> dict:
    """Communication of ring attention per rank (analytic): one K and one V chunk per step.

    Each of the ``P - 1`` steps sends ``batch * (n / P) * (d_k + d_v) * itemsize``
    bytes from every rank to the next. Returns ``{"per_step": ..., "per_rank":
    (P - 1) * per_step, "total": P * per_rank}`` in bytes (total over all ranks).
    Raises ``ValueError`` unless ``P`` divides ``n``.
    """
    if P < 1 or n % P:
        raise ValueError(f"ring attention needs P >= 1 dividing n, got n={n}, P={P}")
    per_step = batch * (n // P) * (d_k + d_v) * itemsize
    return {"per_step": per_step, "per_rank": (P - 1) * per_step, "total": P * (P - 1) * per_step}


def _check_same_shape_on_all_ranks(x: Tensor, group: Any) -> None:
    shape = torch.tensor(list(x.shape), dtype=torch.long, device=x.device)  # NCCL reduces device tensors
    lo, hi = shape.clone(), shape.clone()
    dist.all_reduce(lo, op=dist.ReduceOp.MIN, group=group)
    dist.all_reduce(hi, op=dist.ReduceOp.MAX, group=group)
    if not torch.equal(lo, hi):
        raise ValueError(
            f"ring attention needs equal chunks on every rank; shapes range from {lo.tolist()} to {hi.tolist()}"
        )


@catalogued(
    "extra:ring-attention",
    title="Ring attention: the sequence split across processes, K/V chunks passed around a ring, merged online",
)
def ring_attention(
    Q: Tensor,
    K: Tensor,
    V: Tensor,
    is_causal: bool = False,
    group: dist.ProcessGroup | None = None,
    block_q: int = 256,
    block_k: int = 1024,
) -> Tensor:
    """Exact scaled dot-product attention over a sequence split across the ranks of ``group``.

    Call on every rank with that rank's chunk: Q ``(..., c, d_k)``, K
    ``(..., c, d_k)``, V ``(..., c, d_v)``, where ``c = n / P`` and rank ``r``
    holds positions ``r c ... (r + 1) c - 1``; all ranks pass equal shapes.
    ``is_causal``: position ``i`` attends to positions ``j <= i`` of the whole
    sequence. Returns this rank's context ``(..., c, d_v)``, equal to the
    rows ``r c ... (r + 1) c - 1`` of single-process attention up to rounding.
    Raises ``ValueError`` on shape problems or unequal chunks across ranks and
    ``RuntimeError`` if no process group is initialised.
    """
    if not dist.is_initialized():
        raise RuntimeError("ring_attention needs an initialised torch.distributed process group")
    check_qkv(Q, K, V, "ring attention", "c", "c")
    check_dim_equal(Q.shape[-2], K.shape[-2], "ring attention", "chunk length of Q", "chunk length of K")
    rank, P = dist.get_rank(group), dist.get_world_size(group)
    kv = torch.cat([K, V], -1).contiguous()  # one message per step
    _check_same_shape_on_all_ranks(kv, group)
    d_k = K.shape[-1]
    # neighbours on the ring, as global ranks (what isend/irecv address)
    nxt, prv = ((dist.get_global_rank(group, (rank + k) % P) if group else (rank + k) % P) for k in (1, -1))
    buf = torch.empty_like(kv)
    run: Stats | None = None
    for step in range(P):
        src = (rank - step) % P  # the rank whose chunk we hold in this step
        pending: list[Any] = []  # dist.Work handles
        if step < P - 1:
            # one batched call: with NCCL, separate blocking sends could wait on each other around the ring
            ops = [dist.P2POp(dist.isend, kv, nxt, group), dist.P2POp(dist.irecv, buf, prv, group)]
            pending = dist.batch_isend_irecv(ops)
        if not (is_causal and src > rank):
            part = attention_stats(
                Q, kv[..., :d_k], kv[..., d_k:], is_causal=is_causal and src == rank, block_q=block_q, block_k=block_k
            )
            run = part if run is None else online_softmax_merge(*run, *part)
        for req in pending:
            req.wait()
        if pending:
            kv, buf = buf, kv
    assert run is not None  # step 0 always attends to the rank's own chunk
    return finalize(*run)[0]


# --------------------------------------------------------------------------- local launcher


def seeded_chunk(which: str, rank: int, P: int, n: int, d: int, seed: int = 0, batch: int = 1) -> Tensor:
    """Rank ``rank``'s chunk of a seeded ``(batch, n, d)`` tensor named ``which`` ("Q", "K" or "V").

    The tensor is drawn in ``UNITS`` row blocks with their own seeds, so the
    whole sequence is identical for every ``P`` dividing ``UNITS``.
    Raises ``ValueError`` unless ``P`` divides ``UNITS`` and ``UNITS`` divides ``n``.
    """
    if UNITS % P or n % UNITS:
        raise ValueError(f"seeded chunks need P dividing {UNITS} and n divisible by {UNITS}, got P={P}, n={n}")
    per = UNITS // P
    units = [
        torch.randn(
            batch, n // UNITS, d, generator=torch.Generator().manual_seed(seed * 1000 + "QKV".index(which) * 10 + u)
        )
        for u in range(rank * per, (rank + 1) * per)
    ]
    return torch.cat(units, -2)


def _memory_bytes(field: str) -> int:
    """``VmRSS`` (now) or ``VmHWM`` (peak) of this process from ``/proc/self/status``, in bytes.

    ``VmHWM`` belongs to the process image, so unlike ``ru_maxrss`` it does not
    inherit the parent's peak through fork and exec.
    """
    with open("/proc/self/status") as f:
        line = next(line for line in f if line.startswith(field + ":"))
    return int(line.split()[1]) * 1024


def _measure(Q: Tensor, K: Tensor, V: Tensor, job: dict) -> dict:
    """The benchmark's part of a rank: peak memory of one ring pass, then the median time of ``repeats``."""
    ring_attention(Q[..., :2, :], K[..., :2, :], V[..., :2, :], is_causal=job["is_causal"])  # warm up gloo
    dist.barrier()
    before = _memory_bytes("VmRSS")
    out = ring_attention(Q, K, V, is_causal=job["is_causal"])
    report = {"out": out, "peak_bytes": _memory_bytes("VmHWM") - before}
    times = []
    for _ in range(job.get("repeats", 0)):
        dist.barrier()
        t0 = time.perf_counter()
        ring_attention(Q, K, V, is_causal=job["is_causal"])
        times.append(time.perf_counter() - t0)
    report["seconds"] = statistics.median(times) if times else None
    return report


def _worker(rank: int, P: int, job_dir: str, job: dict) -> None:
    """One rank of :func:`run_ring` / the benchmark: load or draw the chunk, run, save the result.

    The ranks meet through a file in ``job_dir`` (a file store), not a TCP port chosen in advance:
    a port found free before the processes start can be taken by another process before rank 0
    binds it, seconds later. Gloo's own connections bind ports the system gives them."""
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    torch.set_num_threads(job.get("threads", 1))
    dist.init_process_group(
        "gloo",
        init_method=(Path(job_dir) / "rendezvous").as_uri(),
        rank=rank,
        world_size=P,
        timeout=datetime.timedelta(seconds=job["timeout"]),
    )
    try:
        with torch.no_grad():
            if job["source"] == "file":
                Q, K, V = torch.load(Path(job_dir) / "inputs.pt")
                c = Q.shape[-2] // P
                Q, K, V = (x[..., rank * c : (rank + 1) * c, :].contiguous() for x in (Q, K, V))
                result = {"out": [ring_attention(Q, K, V, is_causal=flag) for flag in job["modes"]]}
            else:
                Q, K, V = (seeded_chunk(w, rank, P, job["n"], job["d"], job["seed"]) for w in "QKV")
                result = _measure(Q, K, V, job)
            torch.save(result, Path(job_dir) / f"out{rank}.pt")
    finally:
        dist.destroy_process_group()


def launch(P: int, job: dict, job_dir: str, timeout: float = 60.0) -> list[dict]:
    """Spawn ``P`` local ranks running ``job``; return each rank's saved result, in rank order.

    Raises ``TimeoutError`` (after stopping the processes) if they take longer
    than ``timeout`` seconds, and ``RuntimeError`` if a rank fails.
    """
    import torch.multiprocessing as mp

    job = {"timeout": timeout, **job}
    ctx = mp.start_processes(_worker, args=(P, job_dir, job), nprocs=P, join=False, start_method="spawn")
    deadline = time.monotonic() + timeout
    try:
        while not ctx.join(timeout=max(0.1, min(1.0, deadline - time.monotonic()))):
            if time.monotonic() > deadline:
                raise TimeoutError(f"ring attention with P={P} did not finish within {timeout} s")
    except mp.ProcessRaisedException as err:
        raise RuntimeError(f"a ring attention rank failed:\n{err}") from None
    finally:
        for proc in ctx.processes:
            if proc.is_alive():
                proc.terminate()
                proc.join(5)
    return [torch.load(Path(job_dir) / f"out{r}.pt") for r in range(P)]


@catalogued("extra:ring-attention")
def run_ring(
    Q: Tensor, K: Tensor, V: Tensor, P: int, is_causal: bool | Sequence[bool] = False, timeout: float = 60.0
) -> Tensor | list[Tensor]:
    """Ring attention over ``P`` local processes (gloo, 127.0.0.1): the whole context, gathered.

    Q, K: ``(..., n, d_k)``; V: ``(..., n, d_v)`` with ``n`` divisible by ``P``.
    Each spawned rank takes its ``n / P`` rows and runs :func:`ring_attention`;
    the chunks of the context are concatenated in rank order, ``(..., n, d_v)``.
    ``is_causal`` may be a sequence of flags: the same processes then run once
    per flag (starting processes is the slow part) and a list of contexts is returned.
    Raises ``ValueError`` if ``P`` does not divide ``n`` or the shapes differ,
    ``TimeoutError`` after ``timeout`` seconds.
    """
    for x, name in ((Q, "Q"), (K, "K"), (V, "V")):
        as_tensor(x, name)
        check_min_rank(x, 2, name, "(..., n, d)")
    check_dim_equal(Q.shape[-2], K.shape[-2], "ring attention (self-attention)", "n of Q", "n of K")
    check_dim_equal(K.shape[-2], V.shape[-2], "ring attention", "n of K", "n of V")
    if P < 1 or Q.shape[-2] % P:
        raise ValueError(f"ring attention needs P >= 1 dividing n, got n={Q.shape[-2]}, P={P}")
    modes = [bool(is_causal)] if isinstance(is_causal, bool) else [bool(f) for f in is_causal]
    with tempfile.TemporaryDirectory() as tmp:
        torch.save((Q, K, V), Path(tmp) / "inputs.pt")
        results = launch(P, {"source": "file", "modes": modes}, tmp, timeout)
    contexts = [torch.cat([r["out"][i] for r in results], -2) for i in range(len(modes))]
    return contexts[0] if isinstance(is_causal, bool) else contexts


def demo(P: int = 2, n: int = 64, d: int = 16) -> float:
    """Ring attention on ``P`` processes vs one process (SDPA): prints and returns the largest error."""
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
    on every rank). Returns a one-element tensor on ``device`` (default CPU).
    """
    import torch.nn.functional as F

    rank, P = dist.get_rank(), dist.get_world_size()
    c = n // P
    full = [torch.cat([seeded_chunk(w, u, UNITS, n, d) for u in range(UNITS)], -2).to(device) for w in "QKV"]
    Q, K, V = (x[..., rank * c : (rank + 1) * c, :] for x in full)
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
