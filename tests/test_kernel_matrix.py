"""The kernel matrix: the guests' kernel tests (every `matrix` test and the `kernel` tests of
tests/kernel_matrix.py's GUEST_FILES), run inside Debian 12's 6.1 and 6.12 and Debian 11's 5.10
kernels booted under QEMU (tests/kernel_matrix.py), must pass there too.

Part of the README's test command (scripts/test, and so CI) whenever it runs as root with
the matrix's tools installed (scripts/install-system, scripts/python-env test); otherwise
skipped with the reason. Every failure inside a guest fails the test: there is no list of
tolerated failures, and no test may skip inside a guest. The guests boot at once when the
session's collection ends (this module registers tests/kernel_matrix.py as a plugin) and
run one after another beside the rest of the suite; these tests are moved to the session's end, and each
waits for its kernel's guest and fails with the guest's failing tests and log tail. ``NETTRAIL_MATRIX_KERNELS=6.1`` limits the
run, ``NETTRAIL_KERNEL_MATRIX=0`` skips it (a quick local run of the whole suite).
"""

from __future__ import annotations

import warnings

import pytest

from tests import kernel_matrix as km

pytestmark = [pytest.mark.kernel, pytest.mark.slow]
# The harness's hooks: the guests boot when collection ends and these tests run last.
pytest_plugins = ["tests.kernel_matrix"]
SKIP = km.skip_reason()


@pytest.mark.skipif(SKIP is not None, reason=str(SKIP))
# the default kernels, and any optional one NETTRAIL_MATRIX_KERNELS names
@pytest.mark.parametrize("name", [k.name for k in km.KERNELS] + [k.name for k in km.asked_optional()])
def test_the_matrix_kernel_tests_pass_inside_debians_kernel(name: str) -> None:
    if name not in {k.name for k in km.selected()}:
        pytest.skip(f"not in NETTRAIL_MATRIX_KERNELS={','.join(k.name for k in km.selected())}")
    run = km.session_run(name)
    print(km.summary(run))
    if run.earlier_death:  # shown in every run's summary, not only on failure
        warnings.warn(f"the {name} guest was booted twice: the first boot {run.earlier_death}", stacklevel=1)
    tail = "\n".join(run.log.splitlines()[-60:])
    if run.returncode is None:  # the guest died (panic=-1: a kernel panic ends QEMU): its console says why
        console = (run.rwdir / "console.log").read_text(errors="replace").splitlines()[-40:]
        raise AssertionError(
            f"the {name} guest never finished its tests ({run.seconds:.0f} s):\n{tail}\n--- console:\n"
            + "\n".join(console)
        )
    failed = run.failed_tests()
    assert not failed, f"inside {run.release}:\n" + "\n".join(failed.values())
    assert run.returncode in (0, 1) and (run.returncode == 0 or failed), f"pytest exited {run.returncode}:\n{tail}"
    counts = run.counts()
    # every matrix test ran: none may hide behind a skip inside the guest
    assert counts["tests"] > 0 and counts["skipped"] == 0, f"{counts} inside {run.release}:\n{tail}"
