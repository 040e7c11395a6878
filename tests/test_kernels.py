"""Kernels the project starts talk over private Unix sockets, not TCP ports (``numeric_env.kernel_sockets``).

The first test reproduces the failure that motivated this: a TCP port taken by another process between the
manager choosing it and the kernel binding it. The others check that nbval (through ``conftest.py``) and
the project's notebook client get IPC kernels, and that the choice holds inside the kernel itself.
"""

from __future__ import annotations

import os
import re
import socket
import time
from pathlib import Path

import nbformat
import nbval.kernel
import pytest
from jupyter_client.manager import KernelManager

from attnsurvey import numeric_env

ROOT = Path(__file__).resolve().parents[1]
#: A kernel with no torch to import: these tests are about sockets, not numerics.
KERNEL = "python3"


class _TakesIOPubPortFirst(KernelManager):
    """A TCP kernel manager under which another socket listens on the kernel's IOPub port before the kernel starts."""

    held: list[socket.socket]

    async def _async_launch_kernel(self, kernel_cmd, **kw):
        thief = socket.socket()
        thief.bind(("127.0.0.1", self.iopub_port))
        thief.listen()
        self.held = [thief]
        return await super()._async_launch_kernel(kernel_cmd, **kw)


def _wait_for(predicate, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.2)
    return predicate()


def test_a_tcp_kernel_whose_iopub_port_was_taken_stays_alive_and_never_answers(tmp_path):
    """What nbval reported as "Kernel didn't respond in 60 seconds" in CI: the bind fails, the process lives on."""
    km = _TakesIOPubPortFirst(kernel_name=KERNEL)
    err = tmp_path / "stderr.txt"
    with err.open("w") as stderr:
        km.start_kernel(cwd=str(tmp_path), stderr=stderr)
    try:
        assert km.transport == "tcp"
        assert _wait_for(lambda: "Address already in use" in err.read_text(), 60), err.read_text()
        kc = km.client()
        kc.start_channels()
        with pytest.raises(RuntimeError, match="didn't respond"):
            kc.wait_for_ready(timeout=3)
        kc.stop_channels()
        assert km.is_alive()
    finally:
        km.shutdown_kernel(now=True)
        km.held[0].close()


def test_kernel_sockets_are_fresh_files_in_the_temporary_folder(tmp_path, monkeypatch):
    a, b = numeric_env.kernel_sockets(), numeric_env.kernel_sockets()
    assert a["KernelManager"]["transport"] == "ipc"
    assert a["KernelManager"]["ip"] != b["KernelManager"]["ip"]
    import tempfile

    assert Path(a["KernelManager"]["ip"]).parent == Path(tempfile.gettempdir())
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / ("x" * 90)))
    with pytest.raises(ValueError, match="longer than a Unix socket allows.*TMPDIR"):
        numeric_env.kernel_sockets()


def test_an_ipc_kernel_runs_and_its_socket_files_go_with_it(tmp_path):
    km = numeric_env.kernel_manager(kernel_name=KERNEL)
    km.start_kernel(cwd=str(tmp_path))
    try:
        assert km.transport == "ipc"
        files = [f"{km.ip}-{port}" for port in (km.shell_port, km.iopub_port, km.stdin_port, km.control_port)]
        assert _wait_for(lambda: all(os.path.exists(f) for f in files), 60), files
        kc = km.client()
        kc.start_channels()
        kc.wait_for_ready(timeout=60)
        reply = kc.execute_interactive("x = 6 * 7", timeout=60)
        assert reply["content"]["status"] == "ok"
        kc.stop_channels()
    finally:
        km.shutdown_kernel(now=True)
    assert not any(os.path.exists(f) for f in files)


def test_nbval_starts_its_kernels_with_private_sockets(tmp_path):
    """conftest.py hands nbval numeric_env.kernel_manager; without it nbval's kernels would use TCP."""
    assert nbval.kernel.KernelManager is numeric_env.kernel_manager
    kernel = nbval.kernel.RunningKernel(KERNEL, cwd=str(tmp_path))
    try:
        assert kernel.km.transport == "ipc"
        assert kernel.km.ip.startswith(os.path.join(os.path.dirname(kernel.km.ip), "attnsurvey-kernel-"))
    finally:
        kernel.stop()


def test_the_notebook_client_kernel_binds_unix_sockets():
    """Asked from inside the kernel: the transport it bound is IPC."""
    nb = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_code_cell(
                "from ipykernel.kernelapp import IPKernelApp\nprint(IPKernelApp.instance().transport)"
            )
        ]
    )
    numeric_env.notebook_client(nb, kernel_name=KERNEL, timeout=60).execute()
    assert nb.cells[0].outputs[0]["text"].strip() == "ipc"


def test_every_notebook_the_project_executes_goes_through_notebook_client():
    """A NotebookClient built anywhere else would start a TCP kernel."""
    offenders = []
    for folder in ("src", "scripts", "tests", "benchmarks", "book/_ext"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path.name == "numeric_env.py" or path == Path(__file__):
                continue
            if re.search(r"\bNotebookClient\(|\bExecutePreprocessor\(|\bstart_new_kernel\(", path.read_text()):
                offenders.append(str(path.relative_to(ROOT)))
    assert offenders == []
