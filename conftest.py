"""pytest setup for every path in the repository: the tests and the notebooks that nbval checks.

nbval starts each notebook's kernel with ``nbval.kernel.KernelManager``; here that name is replaced by
:func:`attnsurvey.numeric_env.kernel_manager`, so the kernel talks over private Unix sockets instead of TCP
ports that another process can take while the kernel starts (the function's docstring tells the failure).
``tests/test_kernels.py`` checks that nbval's kernels get these settings.
"""

from __future__ import annotations

import nbval.kernel

from attnsurvey import numeric_env

if not callable(getattr(nbval.kernel, "KernelManager", None)):
    raise RuntimeError(
        "nbval.kernel.KernelManager is gone (an nbval upgrade?): conftest.py can no longer give nbval's kernels "
        "private sockets; see attnsurvey.numeric_env.kernel_sockets"
    )
nbval.kernel.KernelManager = numeric_env.kernel_manager
