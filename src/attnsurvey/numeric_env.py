"""The pinned numeric environment: one place that says how every stored output is computed.

Trained experiments are chaotic: a one-ulp difference in a matrix product can
move a model to another local optimum. Which CPU kernels run depends on the
machine (PyTorch's ATen picks AVX-512, AVX2 or plain code at start-up; MKL and
oneDNN pick their own instruction sets; the number of threads changes the order
of floating-point sums). Left alone, a notebook stored on one machine does not
reproduce on another. So the project's own commands run every kernel, test and
notebook with the settings in :data:`PINNED_ENV`, whatever the caller's
environment says:

* ``ATEN_CPU_CAPABILITY=default``: ATen's portable kernels (no AVX2/AVX-512
  code paths that exist on some machines only).
* ``MKL_CBWR=COMPATIBLE``: MKL's conditional numerical reproducibility on its
  SSE2 code path, documented by Intel to give the same results on Intel and
  compatible CPUs.
* ``ONEDNN_MAX_CPU_ISA=SSE41`` (and the older name ``DNNL_MAX_CPU_ISA``): caps
  oneDNN (convolutions, some fused ops) at an instruction set every x86-64 CPU has.
* one thread for OpenMP, MKL and torch's intra-op pool: a fixed summation order.
* ``PYTHONHASHSEED=0``: stable ``set``/``dict`` iteration of strings.
* inside the process, :func:`apply_torch` calls ``torch.set_num_threads(1)``
  and turns on deterministic algorithms (:func:`deterministic_algorithms`, what
  ``torch.use_deterministic_algorithms(True)`` does, without loading Inductor).

Environment variables must be set *before* torch is imported, because ATen,
MKL and oneDNN read them once when they load. The project applies them in
four ways, all from this module:

* ``python -m attnsurvey.numeric_env exec -- CMD ...`` runs ``CMD`` with the
  pinned environment (the Makefile wraps pytest and the execute script in it);
* ``python -m attnsurvey.numeric_env install-kernel --prefix VENV`` installs the
  Jupyter kernel ``attnsurvey`` whose kernel spec carries the same variables
  (they override the launching process's) and calls :func:`apply_torch` before
  the first cell; every chapter notebook names this kernel, so JupyterLab, the
  execute script and nbval all start notebooks the same way;
* :func:`pin` pins the running process itself, when it is called before torch
  is first imported: every chapter's first code cell calls it, so a chapter run
  in any Jupyter kernel (a plain ``python3`` kernel, Colab, VS Code) computes
  what the ``attnsurvey`` kernel computes; what a running process can no longer
  change (``PYTHONHASHSEED``, or torch loaded before the pin) it names in one
  printed warning;
* :func:`problems` lists every way the running process differs from the pin
  (:func:`check` raises on any; ``tests/conftest.py`` refuses to start
  an unpinned pytest run unless ``ATTNSURVEY_ALLOW_UNPINNED=1`` is set).

Cost: the portable kernels are slower than the native ones, by how much
depends on the work (``benchmarks/pin_cost.py``; the book's Reproducibility
page quotes its figures: little for the book's small models, about 2.7 times
for large matrix products), which is why benchmarks are exempt:
``benchmarks/`` scripts measure native speed and do not use this module.

Two kernels need more than environment variables, because under the pin they
still run an instruction whose bits differ between CPU vendors: MKL's vector
math (VML), which ``torch.sqrt`` calls on CPU, seeds the square root with the
approximate ``rsqrtps`` instruction, and Intel and AMD implement it
differently; the result is not correctly rounded (about one float32 in six is
one ulp off on the AMD EPYC where this was measured), so its last bit depends
on the vendor. torch's default CPU Adam takes that square root thousands of
times per run. The package therefore computes square roots with
:func:`portable_sqrt` (correctly rounded, from IEEE operations only) and trains with
:func:`portable_adam` (PyTorch's fused CPU Adam, whose square root is the IEEE
instruction). ``tests/test_numeric_env.py`` keeps ``torch.sqrt`` and
``torch.optim.Adam`` out of the package's source.

Kernels that the project's own tools start (nbval, the execute and autograde
scripts, tests) talk to their client over private Unix sockets rather than TCP
ports, which another process can take while a kernel starts: see
:func:`kernel_sockets`.

``scripts/numeric_fingerprint.py`` prints digests of primitive results under
the pin, so that two machines can find a kernel family that differs.

This module imports nothing heavy at import time, so it can run before torch loads.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jupyter_client.manager import KernelManager
    from nbclient import NotebookClient
    from nbformat import NotebookNode
    from torch import Tensor
    from torch.optim import Optimizer
    from traitlets.config import Config

#: Environment variables that fix the numerics of every stored output.
PINNED_ENV: dict[str, str] = {
    "ATEN_CPU_CAPABILITY": "default",
    "MKL_CBWR": "COMPATIBLE",
    "ONEDNN_MAX_CPU_ISA": "SSE41",
    "DNNL_MAX_CPU_ISA": "SSE41",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "PYTHONHASHSEED": "0",
    "MPLBACKEND": "Agg",
}

#: What ``torch.backends.cpu.get_cpu_capability()`` reports under the pin.
EXPECTED_CPU_CAPABILITY = "DEFAULT"
#: The names torch gives the pinned (portable) kernel path: ``"NO AVX"`` in torch 2.5, ``"DEFAULT"`` later.
PORTABLE_CPU_CAPABILITIES = frozenset({EXPECTED_CPU_CAPABILITY, "NO AVX"})

#: Variables that a library reads once, when it first initialises, and that no later call of this module
#: verifies (ATen's CPU capability and the thread counts are checked directly): MKL's and oneDNN's
#: instruction sets (torch), OpenBLAS's threads (NumPy). :func:`pin` names them if that library loaded first.
READ_ONCE_BY: dict[str, str] = {
    "MKL_CBWR": "torch",
    "ONEDNN_MAX_CPU_ISA": "torch",
    "DNNL_MAX_CPU_ISA": "torch",
    "OPENBLAS_NUM_THREADS": "numpy",
}

#: The line :func:`check` and :func:`pin` return in a pinned process (each chapter's first cell prints it).
PINNED_LINE = "numeric environment: pinned (portable CPU kernels, 1 thread, deterministic)"
#: The line :func:`pin` returns when the numerics could not be pinned in the running process.
NOT_PINNED_LINE = "numeric environment: NOT pinned (see the warning above): results may differ from the book's"
#: How the one warning line that :func:`pin` prints starts (``tests/nbval_sanitize.cfg`` matches it).
WARNING_PREFIX = "numeric environment warning: "

#: ``PYTHONHASHSEED`` as this interpreter found it when this module was first imported (for messages only).
_HASHSEED_AT_IMPORT = os.environ.get("PYTHONHASHSEED")

#: Name of the Jupyter kernel that carries the pin (chapters' kernelspec name).
KERNEL_NAME = "attnsurvey"
KERNEL_DISPLAY_NAME = "Python 3 (attnsurvey, pinned numerics)"


def pinned_environ(base: dict[str, str] | None = None) -> dict[str, str]:
    """A copy of ``base`` with :data:`PINNED_ENV` applied.

    Args:
        base: the environment to start from (default: ``os.environ``).

    Returns:
        A new dict; ``base`` is not changed.
    """
    env = dict(os.environ if base is None else base)
    env.update(PINNED_ENV)
    return env


def apply_torch() -> None:
    """Pin torch's in-process settings: one intra-op thread, deterministic algorithms.

    Call it after the environment variables are in place (the ``attnsurvey``
    kernel does this before the first cell). Importing torch here is the point.
    It also lets the allocator reuse freed memory (:func:`keep_freed_memory`, speed only).
    """
    import torch

    torch.set_num_threads(1)
    deterministic_algorithms()
    keep_freed_memory()


def deterministic_algorithms() -> None:
    """Turn on torch's deterministic algorithms, as ``torch.use_deterministic_algorithms(True)`` does.

    An operation without a deterministic algorithm raises (``warn_only=False``), and Inductor's
    ``deterministic`` option is on. torch's own function sets that option by importing
    ``torch._inductor.config``, which loads the compiler stack (about 1.3 s of CPU on the 2-core CI
    machine in every kernel, test worker and child interpreter; a process that builds a ``torch.optim``
    optimizer still pays it there, because torch's optimizers import ``torch._dynamo``). Where Inductor is
    not loaded yet, this sets the same flag in ATen and ``TORCHINDUCTOR_DETERMINISTIC=1``, from which
    Inductor's config takes ``deterministic`` when it is first imported (child processes inherit it, as
    they inherit the rest of the pin); where it is loaded, it calls torch's function.
    ``tests/test_numeric_env.py`` checks both paths against torch's function.
    """
    import torch

    if "torch._inductor.config" in sys.modules:
        torch.use_deterministic_algorithms(True)
    else:
        os.environ["TORCHINDUCTOR_DETERMINISTIC"] = "1"
        torch._C._set_deterministic_algorithms(True, warn_only=False)


def keep_freed_memory() -> bool:
    """Let the C allocator keep the memory of freed tensors for the next ones (glibc on Linux; elsewhere nothing).

    Speed only: no result depends on where a tensor lives. By default glibc's ``malloc``
    serves each large block (above 32 MiB at most) with a fresh ``mmap`` and returns it
    to the system when it is freed, so the next tensor of that size starts on untouched
    pages and the kernel zeroes every page on first touch: for attention weights of a
    few hundred MiB (the long-context evaluations) that system time was as large as the
    arithmetic. Here large blocks come from the heap (``M_MMAP_MAX = 0``) and up to 1 GiB of
    free memory at its top is kept (``M_TRIM_THRESHOLD``), so freed blocks are reused;
    the process holds on to its peak memory. :func:`apply_torch` calls it.

    Returns:
        Whether the allocator took both settings (False off glibc).
    """
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)  # glibc's; musl has none
    if mallopt is None:
        return False
    m_trim_threshold, m_mmap_max = -1, -4  # glibc's <malloc.h>
    return bool(mallopt(m_mmap_max, 0)) and bool(mallopt(m_trim_threshold, 1 << 30))


def portable_sqrt(x: Tensor) -> Tensor:
    """Element-wise, differentiable square root; for float32 and narrower, the same bits on every x86-64 CPU.

    ``x``: a floating tensor of any shape. A float32, float16 or bfloat16 input
    is rooted in float64 and rounded back to its dtype. The square root of a
    float32 never lies closer than four float64 ulps to a float32 rounding
    boundary, and the float64 root (VML's high-accuracy mode) is off by less
    than one, so rounding gives the correctly rounded (IEEE 754) square root
    whatever the CPU did in the last float64 bit. A float64 input goes through
    ``torch.sqrt`` itself (its last bit may depend on the vendor). Negative
    entries give NaN and the gradient at 0 is infinite, as with
    ``torch.sqrt``.

    Args:
        x: a floating tensor of any shape.

    Shape:
        any; the output has the shape of ``x``.

    Returns:
        The element-wise square root, in the dtype of ``x``.

    Raises:
        TypeError: a non-floating tensor.
    """
    import torch

    if not x.is_floating_point():
        raise TypeError(f"portable_sqrt needs a floating tensor, got dtype {x.dtype} of shape {tuple(x.shape)}")
    if x.dtype == torch.float64:
        return torch.sqrt(x)
    return torch.sqrt(x.double()).to(x.dtype)


def portable_adam(params: Iterable[Tensor], lr: float = 1e-3) -> Optimizer:
    """The optimizer of every trained result: ``torch.optim.Adam(params, lr=lr, fused=True)``.

    ``params``: floating tensors that require gradients (as for any fused
    optimizer); ``lr``: the learning rate; betas and eps are Adam's defaults.
    The fused CPU kernel takes the square root of the second-moment estimate
    with the IEEE instruction; the default implementation calls
    ``torch.sqrt`` (MKL VML, see the module docstring), whose last bit differs
    between Intel and AMD CPUs, and training magnifies such a bit into
    different printed results.

    Args:
        params: floating tensors that require gradients.
        lr: the learning rate (betas and eps are Adam's defaults).

    Shape:
        any; each parameter keeps its shape.

    Returns:
        The fused ``torch.optim.Adam`` optimizer.
    """
    import torch

    return torch.optim.Adam(params, lr=lr, fused=True)


def problems() -> list[str]:
    """Every way the running process differs from the pinned environment (empty if none).

    Checks the environment variables and, if torch is loaded, the CPU
    capability ATen actually uses, the thread count and deterministic mode.

    Returns:
        One line per difference; an empty list in a pinned process.
    """
    found = [
        f"{key}={os.environ.get(key)!r} (pinned: {value!r})"
        for key, value in PINNED_ENV.items()
        if os.environ.get(key) != value
    ]
    if os.environ.get("PYTHONHASHSEED") == PINNED_ENV["PYTHONHASHSEED"] and _hash_seed_differs():
        found.append(_hash_seed_problem())
    torch = sys.modules.get("torch")
    if torch is not None:
        capability = torch.backends.cpu.get_cpu_capability()
        if capability not in PORTABLE_CPU_CAPABILITIES:
            found.append(f"ATen CPU capability {capability} (pinned: {EXPECTED_CPU_CAPABILITY})")
        if torch.get_num_threads() != 1:
            found.append(f"torch.get_num_threads()={torch.get_num_threads()} (pinned: 1)")
        if not torch.are_deterministic_algorithms_enabled():
            found.append("torch.use_deterministic_algorithms is off (pinned: on)")
        elif torch.is_deterministic_algorithms_warn_only_enabled():
            found.append("torch.use_deterministic_algorithms only warns (pinned: warn_only=False)")
    return found


def _hash_seed_differs() -> bool:
    """Whether this interpreter hashes strings with another seed than 0 (fixed when it started)."""
    return sys.flags.hash_randomization != 0


def _hash_seed_problem() -> str:
    started = _HASHSEED_AT_IMPORT if _HASHSEED_AT_IMPORT not in (None, "", "0", "random") else None
    seed = f"seed {started}" if started else "a random seed"
    return (
        f"PYTHONHASHSEED: this interpreter hashes strings with {seed} (pinned: 0), "
        "and only a new interpreter can change that"
    )


def check() -> str:
    """Confirm that the process is pinned, or raise.

    Chapters print the confirmation in their first cell, so a stored output records
    that it was produced under the pin.

    Returns:
        A one-line confirmation.

    Raises:
        RuntimeError: the process is not pinned; the message lists :func:`problems`.
    """
    found = problems()
    if found:
        raise RuntimeError(
            "this process does not run in the pinned numeric environment, so its "
            "results may differ from the stored outputs: "
            + "; ".join(found)
            + ". Start notebooks with the 'attnsurvey' kernel (make env installs it) "
            "or run commands through `python -m attnsurvey.numeric_env exec -- ...`."
        )
    return PINNED_LINE


def pin() -> str:
    """Pin the running process to the numeric environment, as far as a running process can be pinned.

    Sets every variable of :data:`PINNED_ENV` in ``os.environ``, overriding what
    the process inherited; switches matplotlib to the pinned backend if it is
    already imported; then imports torch and calls :func:`apply_torch`. Called
    before torch's first operation (every chapter's first code cell calls it
    before importing anything else), this computes the same bits as ``exec`` and
    the ``attnsurvey`` kernel: ATen, MKL and oneDNN read their variables lazily
    (``scripts/numeric_fingerprint.py`` gives the same digests in every family).

    What the process can no longer change, it names in ONE printed line that
    starts with :data:`WARNING_PREFIX`, and goes on (it never raises for an
    unpinned process):

    * ``PYTHONHASHSEED``: an interpreter's string-hash seed is fixed when it
      starts. This alone leaves the numerics pinned: no stored output depends on
      the order in which a ``set`` of strings is iterated;
    * torch (or NumPy) loaded and used before ``pin()``: the variables of
      :data:`READ_ONCE_BY` that differed then may not have taken effect, and
      :func:`problems` names a CPU capability ATen has already chosen.

    Returns:
        :data:`PINNED_LINE` if the numerics are pinned (the hash seed aside), else
        :data:`NOT_PINNED_LINE`.
    """
    late = [
        f"{key}={os.environ.get(key)!r} when {module} was imported (pinned: {PINNED_ENV[key]!r})"
        for key, module in READ_ONCE_BY.items()
        if module in sys.modules and os.environ.get(key) != PINNED_ENV[key]
    ]
    os.environ.update(PINNED_ENV)
    if "matplotlib" in sys.modules:
        import matplotlib

        matplotlib.use(PINNED_ENV["MPLBACKEND"])
    apply_torch()
    numeric = late + problems()
    hash_seed = [_hash_seed_problem()] if _hash_seed_differs() else []
    numeric = [p for p in numeric if not p.startswith("PYTHONHASHSEED")]
    if numeric:
        print(
            WARNING_PREFIX
            + "this process may not be pinned: "
            + "; ".join(numeric + hash_seed)
            + ". Restart the kernel and run this cell first (before anything imports torch), or use the "
            "'attnsurvey' kernel."
        )
        return NOT_PINNED_LINE
    if hash_seed:
        print(
            WARNING_PREFIX
            + hash_seed[0]
            + ". The book's outputs do not depend on it (no output iterates a set of strings); "
            "your own code might. Start the kernel (or python) with PYTHONHASHSEED=0 to pin it too."
        )
    return PINNED_LINE


def kernel_spec(python: str) -> dict:
    """The kernel.json of the ``attnsurvey`` kernel.

    Args:
        python: the interpreter the kernel runs.

    Returns:
        The kernel spec as a dict (argv, display name, the pinned environment).
    """
    return {
        "argv": [
            python,
            "-m",
            "ipykernel_launcher",
            "-f",
            "{connection_file}",
            "--IPKernelApp.exec_lines=import attnsurvey.numeric_env as _ne; _ne.apply_torch(); del _ne",
        ],
        "display_name": KERNEL_DISPLAY_NAME,
        "language": "python",
        "env": dict(PINNED_ENV),
        "metadata": {"debugger": True},
    }


def install_kernel(prefix: str | Path) -> Path:
    """Write the ``attnsurvey`` kernel spec under ``prefix/share/jupyter/kernels``.

    Args:
        prefix: the environment's prefix (e.g. ``.venv``).

    Returns:
        The kernel's folder.
    """
    prefix = Path(prefix).resolve()
    python = prefix / "bin" / "python"
    folder = prefix / "share" / "jupyter" / "kernels" / KERNEL_NAME
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "kernel.json").write_text(json.dumps(kernel_spec(str(python)), indent=1) + "\n")
    return folder


#: Longest path a Unix socket may have on Linux (``sun_path`` holds 108 bytes with the final NUL).
_UNIX_SOCKET_PATH_MAX = 107


def kernel_sockets() -> Config:
    """jupyter_client settings (a traitlets config) under which a kernel talks over private Unix sockets.

    By default a kernel manager picks five free TCP ports, writes them to the
    connection file and starts the kernel, which binds them about a second later.
    Any other process that takes one of those ports in between (another test
    worker's kernel or client, the browser test's connections: ephemeral ports
    come from the same range) makes the kernel fail: with the shell or control
    port it dies, with the IOPub port it stays alive and never answers, so
    nbval waits its 60 s and reports "Kernel didn't respond" (this failed one CI run of
    ``make test``, two test workers on 2 cores; ``tests/test_kernels.py`` reproduces it). IPC
    transport has no ports to race for: the sockets are files whose names start
    with a fresh random prefix in the temporary folder (the manager removes
    them when the kernel shuts down). Every kernel the project's own tools start
    uses these settings (:func:`kernel_manager`, :func:`notebook_client`);
    kernels that JupyterLab starts are unaffected.

    Returns:
        A traitlets ``Config`` for a kernel manager's or notebook client's ``config=``.

    Raises:
        ValueError: the temporary folder's path is too long for a Unix socket.
    """
    import tempfile
    import uuid

    from traitlets.config import Config

    prefix = os.path.join(tempfile.gettempdir(), f"attnsurvey-kernel-{uuid.uuid4().hex[:16]}")
    if len(os.fsencode(prefix)) + 3 > _UNIX_SOCKET_PATH_MAX:
        raise ValueError(
            f"the kernel's socket paths would start with {prefix!r}, longer than a Unix socket allows "
            f"({_UNIX_SOCKET_PATH_MAX} bytes); point TMPDIR at a shorter folder"
        )
    return Config({"KernelManager": {"transport": "ipc", "ip": prefix}})


def kernel_manager(**kwargs: Any) -> KernelManager:
    """A ``jupyter_client.KernelManager`` with :func:`kernel_sockets`'s settings.

    The project's pytest setup (``conftest.py``) makes nbval start its kernels with this.

    Args:
        **kwargs: passed on to ``KernelManager``.

    Returns:
        The kernel manager (not started).
    """
    from jupyter_client.manager import KernelManager

    return KernelManager(config=kernel_sockets(), **kwargs)


def notebook_client(nb: NotebookNode, **kwargs: Any) -> NotebookClient:
    """An ``nbclient.NotebookClient`` whose kernel uses :func:`kernel_sockets`'s settings.

    This is how the project's scripts and tests execute a notebook.

    Args:
        nb: the notebook to execute.
        **kwargs: passed on to ``NotebookClient``.

    Returns:
        The client (call ``execute()``).
    """
    from nbclient import NotebookClient

    return NotebookClient(nb, config=kernel_sockets(), **kwargs)


def main(argv: list[str] | None = None) -> int:
    """The command line: ``exec`` a command pinned, ``install-kernel``, or ``show`` the pinned variables.

    Args:
        argv: the arguments (``sys.argv[1:]`` when ``None``).

    Returns:
        The exit status, 0 (``exec`` replaces this process with the command).
    """
    parser = argparse.ArgumentParser(prog="python -m attnsurvey.numeric_env", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("exec", help="run a command in the pinned environment")
    run.add_argument("cmd", nargs=argparse.REMAINDER)
    kern = sub.add_parser("install-kernel", help="install the 'attnsurvey' Jupyter kernel")
    kern.add_argument("--prefix", default=sys.prefix)
    sub.add_parser("show", help="print the pinned variables as shell assignments")
    args = parser.parse_args(argv)
    if args.command == "exec":
        cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
        if not cmd:
            parser.error("exec needs a command")
        os.execvpe(cmd[0], cmd, pinned_environ())
    if args.command == "install-kernel":
        print(f"installed kernel '{KERNEL_NAME}' in {install_kernel(args.prefix)}")
        return 0
    for key, value in PINNED_ENV.items():
        print(f"{key}={value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
