"""The pinned numeric environment is applied by the project's commands, whatever the caller sets."""

from __future__ import annotations

import inspect
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from attnsurvey import numeric_env
from attnsurvey.training import seed_everything

from .conftest import ALLOW_UNPINNED, pytest_report_header, refuse_unpinned
from .helpers import vendor_dependent_calls

#: The settings the module docstring and book/reproducibility.md document, written out here (not read from
#: PINNED_ENV), so that a setting dropped from or changed in PINNED_ENV fails the tests below.
DOCUMENTED = {
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
#: A caller's environment that contradicts every documented setting.
HOSTILE = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "MKL_CBWR": "AVX2",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "DNNL_MAX_CPU_ISA": "AVX2",
    "OMP_NUM_THREADS": "2",
    "MKL_NUM_THREADS": "2",
    "OPENBLAS_NUM_THREADS": "2",
    "PYTHONHASHSEED": "7",
    "MPLBACKEND": "pdf",
}
PROBE = (
    "import json, os, torch, attnsurvey.numeric_env as ne; ne.apply_torch(); "
    "print(json.dumps({'cap': torch.backends.cpu.get_cpu_capability(), 'problems': ne.problems(), "
    f"'env': {{k: os.environ.get(k) for k in {sorted(DOCUMENTED)!r}}}}}))"
)


def test_the_hostile_environment_contradicts_every_documented_setting():
    assert HOSTILE.keys() == DOCUMENTED.keys()
    assert all(HOSTILE[k] != v for k, v in DOCUMENTED.items())
    assert numeric_env.PINNED_ENV == DOCUMENTED


def _run(cmd, env):
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_exec_overrides_a_hostile_caller_environment():
    env = {**os.environ, **HOSTILE}
    got = _run([sys.executable, "-m", "attnsurvey.numeric_env", "exec", "--", sys.executable, "-c", PROBE], env)
    assert got["env"] == DOCUMENTED  # every hostile value replaced by the documented one
    assert got["cap"] in numeric_env.PORTABLE_CPU_CAPABILITIES
    assert got["problems"] == []


def test_problems_reports_an_unpinned_process():
    env = {**os.environ, **HOSTILE}
    got = _run([sys.executable, "-c", PROBE], env)
    assert got["env"] == HOSTILE  # the probe sees the caller's environment, untouched
    for key, value in HOSTILE.items():
        assert f"{key}={value!r} (pinned: {DOCUMENTED[key]!r})" in got["problems"]


DETERMINISTIC_PROBE = (
    "import json, os, sys, torch, attnsurvey.numeric_env as ne; {before}; ne.deterministic_algorithms(); "
    "got = {{'aten': torch.are_deterministic_algorithms_enabled(), 'warn_only': "
    "torch.is_deterministic_algorithms_warn_only_enabled(), 'inductor_loaded': 'torch._inductor' in sys.modules}}; "
    "import torch._inductor.config as c; got['inductor'] = c.deterministic; print(json.dumps(got))"
)


@pytest.mark.parametrize("inductor_first", [False, True])
def test_deterministic_algorithms_makes_torchs_settings_without_loading_the_compiler(inductor_first):
    """The pin's deterministic mode: ATen's flag on (not warn-only) and the compiler's setting on, whether the
    compiler's configuration is imported after the call (it reads the variable) or was loaded before (set there);
    torch's compiler stack stays unloaded when nothing else loaded it."""
    env = {k: v for k, v in numeric_env.pinned_environ().items() if k != "TORCHINDUCTOR_DETERMINISTIC"}
    before = "import torch._inductor.config as c0; c0.deterministic = False" if inductor_first else "pass"
    got = _run([sys.executable, "-c", DETERMINISTIC_PROBE.format(before=before)], env)
    assert got == {"aten": True, "warn_only": False, "inductor_loaded": inductor_first, "inductor": True}
    torchs = _run([sys.executable, "-c", DETERMINISTIC_PROBE.format(before="pass").replace(
        "ne.deterministic_algorithms()", "torch.use_deterministic_algorithms(True)")], env)  # fmt: skip
    assert torchs == {**got, "inductor_loaded": True}  # torch's own call: the same settings, compiler loaded


FAULTS_PROBE = (
    "import json, resource, torch, attnsurvey.numeric_env as ne; kept = {call}; "
    "faults = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_minflt; "
    "x = torch.ones(2**24); del x; before = faults(); x = torch.ones(2**24 - 2**12); del x; "
    "print(json.dumps({{'kept': kept, 'faults': faults() - before}}))"
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc settings")
def test_keep_freed_memory_reuses_a_freed_tensors_pages():
    """After keep_freed_memory a 64 MiB tensor reuses the pages of one freed before it (no page faults to speak
    of); without it, glibc maps fresh pages for it (one fault per 4 KiB page), so the check can fail."""
    kept = _run([sys.executable, "-c", FAULTS_PROBE.format(call="ne.keep_freed_memory()")], dict(os.environ))
    fresh = _run([sys.executable, "-c", FAULTS_PROBE.format(call="None")], dict(os.environ))
    assert kept["kept"] is True
    assert kept["faults"] < 100
    thp = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    if not (thp.exists() and "[always]" in thp.read_text()):  # 2 MiB pages would fault 512 times less
        assert fresh["faults"] > 1000


def test_problems_reports_torch_settings_in_process():
    """Threads, deterministic mode and its warn-only variant are checked in the running process
    (seed_everything must not turn warn_only on, which would silently relax the pin)."""
    assert numeric_env.problems() == []
    try:
        torch.use_deterministic_algorithms(True, warn_only=True)
        assert numeric_env.problems() == ["torch.use_deterministic_algorithms only warns (pinned: warn_only=False)"]
        torch.use_deterministic_algorithms(False)
        assert numeric_env.problems() == ["torch.use_deterministic_algorithms is off (pinned: on)"]
        torch.set_num_threads(2)
        assert "torch.get_num_threads()=2 (pinned: 1)" in numeric_env.problems()
        numeric_env.apply_torch()
        assert numeric_env.problems() == []
        torch.use_deterministic_algorithms(False)  # loads Inductor's config and turns its flag off
        seed_everything(0)
        assert numeric_env.problems() == []
        import torch._inductor.config as inductor_config

        assert inductor_config.deterministic, "seed_everything sets Inductor's flag too, once Inductor is loaded"
    finally:
        numeric_env.apply_torch()


def test_check_raises_with_instructions_when_unpinned(monkeypatch):
    monkeypatch.setenv("MKL_CBWR", "AVX2")
    with pytest.raises(RuntimeError, match="MKL_CBWR='AVX2'.*attnsurvey' kernel"):
        numeric_env.check()


def test_an_unpinned_pytest_run_refuses_to_start():
    """tests/conftest.py stops a pytest run outside the pin with a usage error (exit status 4) that names what
    differs, the pinned command and the way to run unpinned on purpose; no test runs."""
    root = Path(__file__).resolve().parents[1]
    one_test = [sys.executable, "-m", "pytest", "-p", "no:xdist", f"tests/{Path(__file__).name}::{_SCAN_TEST}"]
    env = {k: v for k, v in os.environ.items() if k != ALLOW_UNPINNED} | HOSTILE
    refused = subprocess.run(one_test, cwd=root, env=env, capture_output=True, text=True)
    assert refused.returncode == pytest.ExitCode.USAGE_ERROR, refused.stdout + refused.stderr
    assert "this process is not pinned: ATEN_CPU_CAPABILITY='avx2' (pinned: 'default')" in refused.stderr
    assert "OMP_NUM_THREADS='2' (pinned: '1')" in refused.stderr
    assert "attnsurvey.numeric_env exec -- " in refused.stderr and f"{ALLOW_UNPINNED}=1" in refused.stderr
    assert "passed" not in refused.stdout


def test_refuse_unpinned_names_the_problems_and_can_be_waived(monkeypatch):
    """In-process: the check passes under the pin, refuses a differing variable, and
    ATTNSURVEY_ALLOW_UNPINNED=1 waives it (the report header then says the run is not pinned)."""
    monkeypatch.delenv(ALLOW_UNPINNED, raising=False)
    refuse_unpinned()  # this run is pinned
    assert pytest_report_header(None) == "numeric environment: pinned (attnsurvey.numeric_env)"
    monkeypatch.setenv("MKL_CBWR", "AVX2")
    with pytest.raises(pytest.UsageError, match=r"not pinned: MKL_CBWR='AVX2' \(pinned: 'COMPATIBLE'\)\. Run them"):
        refuse_unpinned()
    for value in ("0", "yes", ""):
        monkeypatch.setenv(ALLOW_UNPINNED, value)
        with pytest.raises(pytest.UsageError):
            refuse_unpinned()
    monkeypatch.setenv(ALLOW_UNPINNED, "1")
    refuse_unpinned()
    assert pytest_report_header(None) == (
        f"numeric environment: NOT pinned ({ALLOW_UNPINNED}=1): MKL_CBWR='AVX2' (pinned: 'COMPATIBLE')"
    )


# ------------------------------------------------------------------ pinning a running process (any kernel)
PIN_PROBE = (
    "import json, os, sys; BEFORE from attnsurvey import numeric_env as ne; line = ne.pin(); import torch; "
    "print(json.dumps({'line': line, 'cap': torch.backends.cpu.get_cpu_capability(), 'problems': ne.problems(), "
    f"'env': {{k: os.environ.get(k) for k in {sorted(DOCUMENTED)!r}}}}}))"
)


def _pin_in(env_update: dict[str, str], before: str = "") -> tuple[list[str], dict]:
    """(lines printed before the result, result) of numeric_env.pin() in a fresh interpreter."""
    env = {**os.environ, **env_update}
    out = (
        subprocess.run(
            [sys.executable, "-c", PIN_PROBE.replace("BEFORE", before)],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        .stdout.strip()
        .splitlines()
    )
    return out[:-1], json.loads(out[-1])


def test_importing_the_pin_does_not_import_torch():
    """pin() must run before torch loads, so neither attnsurvey nor numeric_env may import it."""
    probe = "import sys, attnsurvey.numeric_env; print(sorted({'torch', 'numpy'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_pin_overrides_a_hostile_environment_in_process():
    """Before torch loads, pin() replaces every variable the caller set: ATen takes its portable kernels, and
    nothing is printed but the pinned line (the hash seed here is the pinned one)."""
    printed, got = _pin_in({**HOSTILE, "PYTHONHASHSEED": "0"})
    assert printed == [] and got["line"] == numeric_env.PINNED_LINE
    assert got["env"] == DOCUMENTED and got["cap"] in numeric_env.PORTABLE_CPU_CAPABILITIES and got["problems"] == []


def test_pin_names_the_hash_seed_in_one_warning_and_goes_on():
    printed, got = _pin_in(HOSTILE)
    assert got["line"] == numeric_env.PINNED_LINE and got["cap"] in numeric_env.PORTABLE_CPU_CAPABILITIES
    assert got["env"] == DOCUMENTED  # child processes get the pinned seed
    (warning,) = printed
    assert warning.startswith(
        numeric_env.WARNING_PREFIX + "PYTHONHASHSEED: this interpreter hashes strings with seed 7"
    )
    assert got["problems"] == [warning[len(numeric_env.WARNING_PREFIX) :].split(". The book")[0]]


def test_pin_after_torch_ran_warns_and_says_not_pinned():
    """torch loaded and used under other settings: pin() cannot undo that; it says so in one line, no exception."""
    printed, got = _pin_in({**HOSTILE, "PYTHONHASHSEED": "0"}, before="import torch; torch.ones(2).sum(); ")
    assert got["line"] == numeric_env.NOT_PINNED_LINE
    (warning,) = printed
    assert warning.startswith(numeric_env.WARNING_PREFIX + "this process may not be pinned: ")
    assert "MKL_CBWR='AVX2' when torch was imported (pinned: 'COMPATIBLE')" in warning
    if "avx2" in Path("/proc/cpuinfo").read_text():
        assert got["cap"] == "AVX2" and "ATen CPU capability AVX2 (pinned: DEFAULT)" in warning
    assert "PYTHONHASHSEED" not in warning


def test_kernel_spec_carries_the_pin_and_applies_torch_settings(tmp_path):
    spec = numeric_env.kernel_spec("/x/bin/python")
    assert spec["env"] == DOCUMENTED
    assert any("apply_torch()" in a for a in spec["argv"])
    folder = numeric_env.install_kernel(tmp_path)
    assert json.loads((folder / "kernel.json").read_text())["argv"][0] == str(tmp_path / "bin" / "python")


def test_a_kernel_started_from_a_hostile_environment_is_pinned(tmp_path):
    """The kernel spec's env wins over the launching process's (what nbval and the execute script rely on)."""
    nbformat = pytest.importorskip("nbformat")
    pytest.importorskip("nbclient")
    from jupyter_client.kernelspec import KernelSpecManager

    if numeric_env.KERNEL_NAME not in KernelSpecManager().find_kernel_specs():
        pytest.skip("the attnsurvey kernel is not installed (make env installs it)")
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(PROBE)]
    old = {k: os.environ.get(k) for k in HOSTILE}
    os.environ.update(HOSTILE)
    try:
        numeric_env.notebook_client(nb, kernel_name=numeric_env.KERNEL_NAME, timeout=120).execute()
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    got = json.loads(nb.cells[0].outputs[0]["text"].strip().splitlines()[-1])
    assert got["problems"] == [] and got["cap"] in numeric_env.PORTABLE_CPU_CAPABILITIES
    assert got["env"] == DOCUMENTED


def test_fingerprint_is_repeatable_under_the_pin_and_refused_outside_it():
    """scripts/numeric_fingerprint.py prints one 12-digit digest per family, the same on every run; unpinned, it refuses.

    Two runs in two processes pinned by the two routes (``exec``, and ``pin()`` in the process) print the same
    digests: that shows both that the run repeats and that the routes pin alike."""
    env = {**os.environ, **HOSTILE}
    script = str(Path(__file__).resolve().parents[1] / "scripts" / "numeric_fingerprint.py")
    pinned = [sys.executable, "-m", "attnsurvey.numeric_env", "exec", "--", sys.executable, script]
    printed = subprocess.run(pinned, env=env, capture_output=True, text=True, check=True).stdout
    # the same digests, every family, from a process that pins itself before torch loads (a chapter's first cell)
    in_process = (
        "import runpy; from attnsurvey import numeric_env; numeric_env.pin(); runpy.run_path(%r, run_name='__main__')"
    )
    env_seed0 = {**env, "PYTHONHASHSEED": "0"}  # the fingerprint script refuses a process with another hash seed
    pinned_here = [sys.executable, "-c", in_process % script]
    assert subprocess.run(pinned_here, env=env_seed0, capture_output=True, text=True, check=True).stdout == printed
    header, *rows = printed.strip().splitlines()
    assert header.startswith("numeric fingerprint (cpu: ")
    digests = dict(row.split() for row in rows)
    assert list(digests) == ["gemm", "gemv", "bmm", "libm32", "libm64", "vml", "random", "aten", "sdpa", "rnn", "train"]
    assert all(len(d) == 12 and int(d, 16) >= 0 for d in digests.values())
    assert len(set(digests.values())) == len(digests)  # each family digests different results
    refused = subprocess.run([sys.executable, script], env=env, capture_output=True, text=True)
    assert refused.returncode != 0 and "does not run in the pinned numeric environment" in refused.stderr


# ------------------------------------------------------------------ routes around vendor-dependent kernels
def _ieee_sqrt_sweep() -> np.ndarray:
    """Every float32 in [1, 4) (all mantissas of two binades), the float32 subnormals in a stride, and edge values."""
    every = np.arange(0x3F800000, 0x40800000, dtype=np.uint32).view(np.float32)
    subnormal = np.arange(1, 0x00800000, 4099, dtype=np.uint32).view(np.float32)
    edges = np.array([0.0, -0.0, np.inf, np.finfo(np.float32).max, np.finfo(np.float32).tiny, 1e-30, 3e30], np.float32)
    return np.concatenate([every, subnormal, edges])


def test_sqrt_is_the_correctly_rounded_square_root():
    """portable_sqrt equals NumPy's square root (the IEEE instruction) bit for bit, in float32 and float16."""
    x = _ieee_sqrt_sweep()
    got = numeric_env.portable_sqrt(torch.from_numpy(x)).numpy()
    np.testing.assert_array_equal(got.view(np.uint32), np.sqrt(x).view(np.uint32))
    half = np.arange(0, 0x7C01, dtype=np.uint16).view(np.float16)  # every non-negative float16, up to inf
    np.testing.assert_array_equal(
        numeric_env.portable_sqrt(torch.from_numpy(half)).numpy().view(np.uint16), np.sqrt(half).view(np.uint16)
    )
    neg = numeric_env.portable_sqrt(torch.tensor([-1.0, float("nan")]))
    assert torch.isnan(neg).all()
    assert numeric_env.portable_sqrt(torch.tensor([2.0], dtype=torch.float64)).dtype == torch.float64


def test_torch_sqrt_is_not_correctly_rounded_in_the_pinned_build():
    """Why portable_sqrt exists: torch.sqrt (MKL VML under the pin) is one ulp off on part of the sweep.

    If this fails, the pinned torch build computes torch.sqrt exactly and the route can be retired.
    """
    x = _ieee_sqrt_sweep()
    off = torch.sqrt(torch.from_numpy(x)).numpy().view(np.uint32) != np.sqrt(x).view(np.uint32)
    assert off.mean() > 0.01, f"torch.sqrt disagreed with IEEE sqrt on only {off.sum()} of {x.size} inputs"


def test_sqrt_gradient_and_errors():
    x = torch.tensor([0.25, 2.0, 9.0], requires_grad=True)
    numeric_env.portable_sqrt(x).sum().backward()
    assert x.grad is not None
    torch.testing.assert_close(x.grad, 0.5 / torch.tensor([0.5, 2.0**0.5, 3.0]))
    with pytest.raises(TypeError, match=r"floating tensor, got dtype torch.int64 of shape \(3,\)"):
        numeric_env.portable_sqrt(torch.arange(3))


def test_adam_is_torch_adam_with_the_fused_kernel():
    """Fused, and the same algorithm: 20 steps agree with torch's default Adam to float32 rounding."""
    g = torch.Generator().manual_seed(0)
    start, grads = torch.randn(50, generator=g), torch.randn(20, 50, generator=g)
    results = []
    for make in (lambda p: numeric_env.portable_adam(p, lr=0.05), lambda p: torch.optim.Adam(p, lr=0.05)):
        w = torch.nn.Parameter(start.clone())
        opt = make([w])
        for grad in grads:
            w.grad = grad * (1 + w.detach() ** 2)
            opt.step()
        results.append(w.detach())
    assert numeric_env.portable_adam([torch.nn.Parameter(start)]).defaults["fused"] is True
    torch.testing.assert_close(results[0], results[1], rtol=1e-5, atol=1e-6)
    assert not torch.equal(results[0], start)


def test_package_avoids_vendor_dependent_kernels():
    """Square roots and Adam go through numeric_env (see its docstring); the chapters: test_chapter_conventions."""
    root = Path(__file__).resolve().parents[1]
    found = {
        str(path.relative_to(root)): calls
        for path in sorted((root / "src" / "attnsurvey").rglob("*.py"))
        if path.name != "numeric_env.py" and (calls := vendor_dependent_calls(path.read_text()))
    }
    assert not found, f"use numeric_env.portable_sqrt / numeric_env.portable_adam instead: {found}"


_SCAN_TEST = "test_the_source_scan_catches_each_route"


def test_the_source_scan_catches_each_route():
    assert vendor_dependent_calls("%matplotlib inline\ny = torch.sqrt(x) + x.sqrt()\nopt = torch.optim.Adam(p)") == [
        "line 2: torch.sqrt(...)",
        "line 2: x.sqrt(...)",
        "line 3: torch.optim.Adam(...)",
    ]
    assert (
        vendor_dependent_calls("y = numeric_env.portable_sqrt(x) + math.sqrt(2)\nopt = numeric_env.portable_adam(p)")
        == []
    )


def _pinned_table(page: str) -> str:
    return page.split("## What is pinned", 1)[1].split("\n## ", 1)[0]


def _table_settings(table: str) -> dict[str, str]:
    """``{setting: value}`` from the rows of the 'What is pinned' table (a row may name several settings)."""
    settings = {}
    for row in table.splitlines():
        if not row.startswith("| `"):
            continue
        names, value = row.split("|")[1:3]
        (val,) = re.findall(r"`([^`]+)`", value)
        settings.update(dict.fromkeys(re.findall(r"`([^`]+)`", names), val))
    return settings


def _unmatched(settings: dict[str, str]) -> tuple[list[str], list[str]]:
    """(settings of PINNED_ENV the table lacks or gives another value, settings the table lists that are not pinned).

    A table row is pinned if it is a PINNED_ENV variable with its value, or a ``torch.`` call that
    :func:`numeric_env.apply_torch` makes with that value (itself or through
    :func:`numeric_env.deterministic_algorithms`, whose equivalence to torch's call is tested above).
    """
    apply_torch = inspect.getsource(numeric_env.apply_torch) + inspect.getsource(numeric_env.deterministic_algorithms)
    missing = [f"{k}={v}" for k, v in numeric_env.PINNED_ENV.items() if settings.get(k) != v]
    extra = [
        f"{k}={v}"
        for k, v in settings.items()
        if numeric_env.PINNED_ENV.get(k) != v and not (k.startswith("torch.") and f"{k}({v})" in apply_torch)
    ]
    return missing, extra


def test_reproducibility_page_lists_every_pinned_setting():
    """The book's table of pinned settings and the pin agree both ways: every variable of PINNED_ENV with its
    value, and nothing else but the in-process settings of apply_torch."""
    table = _pinned_table((Path(__file__).parents[1] / "book" / "reproducibility.md").read_text())
    settings = _table_settings(table)
    missing, extra = _unmatched(settings)
    assert not missing, f"book/reproducibility.md 'What is pinned' lacks {missing}"
    assert not extra, f"book/reproducibility.md 'What is pinned' lists settings the pin does not make: {extra}"
    assert settings.keys() >= DOCUMENTED.keys() | {"torch.set_num_threads", "torch.use_deterministic_algorithms"}
    # the check can fail in either direction: a table without the matplotlib row, with a variable the pin
    # does not set, with another value, or with an in-process setting apply_torch does not make
    assert _unmatched({k: v for k, v in settings.items() if k != "MPLBACKEND"}) == (["MPLBACKEND=Agg"], [])
    assert _unmatched({**settings, "KMP_AFFINITY": "compact"}) == ([], ["KMP_AFFINITY=compact"])
    assert _unmatched({**settings, "OMP_NUM_THREADS": "2"}) == (["OMP_NUM_THREADS=1"], ["OMP_NUM_THREADS=2"])
    assert _unmatched({**settings, "torch.set_flush_denormal": "True"}) == ([], ["torch.set_flush_denormal=True"])
