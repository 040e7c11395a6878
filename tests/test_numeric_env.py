"""The pinned numeric environment is applied by the project's commands, whatever the caller sets."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from attnsurvey import numeric_env

HOSTILE = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2", "OMP_NUM_THREADS": "2", "PYTHONHASHSEED": "7"}
PROBE = (
    "import json, os, torch, attnsurvey.numeric_env as ne; ne.apply_torch(); "
    "print(json.dumps({'cap': torch.backends.cpu.get_cpu_capability(), 'problems': ne.problems(), "
    "'env': {k: os.environ.get(k) for k in ne.PINNED_ENV}}))"
)


def _run(cmd, env):
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_exec_overrides_a_hostile_caller_environment():
    env = {**os.environ, **HOSTILE}
    got = _run([sys.executable, "-m", "attnsurvey.numeric_env", "exec", "--", sys.executable, "-c", PROBE], env)
    assert got["env"] == numeric_env.PINNED_ENV
    assert got["cap"] == numeric_env.EXPECTED_CPU_CAPABILITY
    assert got["problems"] == []


def test_problems_reports_an_unpinned_process():
    env = {**os.environ, **HOSTILE}
    got = _run([sys.executable, "-c", PROBE], env)
    assert any(p.startswith("ATEN_CPU_CAPABILITY=") for p in got["problems"])
    assert any(p.startswith("MKL_CBWR=") for p in got["problems"])


def test_check_raises_with_instructions_when_unpinned(monkeypatch):
    monkeypatch.setenv("MKL_CBWR", "AVX2")
    with pytest.raises(RuntimeError, match="MKL_CBWR='AVX2'.*attnsurvey' kernel"):
        numeric_env.check()


def test_kernel_spec_carries_the_pin_and_applies_torch_settings(tmp_path):
    spec = numeric_env.kernel_spec("/x/bin/python")
    assert spec["env"] == numeric_env.PINNED_ENV
    assert any("apply_torch()" in a for a in spec["argv"])
    folder = numeric_env.install_kernel(tmp_path)
    assert json.loads((folder / "kernel.json").read_text())["argv"][0] == str(tmp_path / "bin" / "python")


def test_a_kernel_started_from_a_hostile_environment_is_pinned(tmp_path):
    """The kernel spec's env wins over the launching process's (what nbval and the execute script rely on)."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    from jupyter_client.kernelspec import KernelSpecManager

    if numeric_env.KERNEL_NAME not in KernelSpecManager().find_kernel_specs():
        pytest.skip("the attnsurvey kernel is not installed (make env installs it)")
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(PROBE)]
    old = {k: os.environ.get(k) for k in HOSTILE}
    os.environ.update(HOSTILE)
    try:
        nbclient.NotebookClient(nb, kernel_name=numeric_env.KERNEL_NAME, timeout=120).execute()
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    got = json.loads(nb.cells[0].outputs[0]["text"].strip().splitlines()[-1])
    assert got["problems"] == [] and got["cap"] == numeric_env.EXPECTED_CPU_CAPABILITY


def test_fingerprint_is_repeatable_under_the_pin_and_refused_outside_it():
    """scripts/numeric_fingerprint.py prints one 12-digit digest per family, the same on every run; unpinned, it refuses."""
    env = {**os.environ, **HOSTILE}
    script = str(Path(__file__).resolve().parents[1] / "scripts" / "numeric_fingerprint.py")
    pinned = [sys.executable, "-m", "attnsurvey.numeric_env", "exec", "--", sys.executable, script]
    runs = [subprocess.run(pinned, env=env, capture_output=True, text=True, check=True).stdout for _ in range(2)]
    assert runs[0] == runs[1]
    header, *rows = runs[0].strip().splitlines()
    assert header.startswith("numeric fingerprint (cpu: ")
    digests = dict(row.split() for row in rows)
    assert list(digests) == ["gemm", "gemv", "bmm", "libm32", "libm64", "random", "aten", "sdpa", "rnn", "train"]
    assert all(len(d) == 12 and int(d, 16) >= 0 for d in digests.values())
    assert len(set(digests.values())) == len(digests)  # each family digests different results
    refused = subprocess.run([sys.executable, script], env=env, capture_output=True, text=True)
    assert refused.returncode != 0 and "does not run in the pinned numeric environment" in refused.stderr
