"""Kernel tests of collector/bpf/swap.py: when the dashboard's request (the ingest answer's
"tracing" member, kept by the HTTP sink) changes what runs, the new programs are loaded
while the old ones run; a request that cannot be traced is said once and changes nothing.
The whole path through `nettrail up` is tests/test_nettrail_up.py's
test_staff_change_what_the_local_collector_traces_from_the_dashboard."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from collector.bpf.loader import KernelSession, Options
from collector.bpf.swap import COMMAND_LINE, DASHBOARD, Swap
from tests.kernel_support import kernel

pytestmark = kernel


@dataclass
class Answers:
    """What the HTTP sink keeps of its newest 200: (answered, the "tracing" member)."""

    tracing: tuple[bool, Any] = (False, None)


def test_nothing_is_prepared_until_a_request_differs_from_what_runs(capsys: pytest.CaptureFixture[str]) -> None:
    own = Options(providers=("tcp",))
    answers = Answers()
    swap = Swap(answers, own)
    assert not swap.due(own)  # no answer yet
    answers.tracing = (True, None)  # the collector's own choice: runs already
    assert not swap.due(own)
    answers.tracing = (True, {"providers": ["tcp"], "skb_sample": None})  # the same set
    assert not swap.due(own)
    assert swap.take() is None and capsys.readouterr().err == ""


@pytest.mark.matrix  # the swap on Debian 12's 6.1 and 6.12 too (tests/kernel_matrix.py)
def test_a_changed_request_is_loaded_but_runs_only_once_attached() -> None:
    own = Options(providers=("tcp",))
    answers = Answers((True, {"providers": ["tcp", "udp"], "skb_sample": None}))
    swap = Swap(answers, own)
    with KernelSession(own) as running:
        assert swap.due(running.opts) and swap.origin == DASHBOARD
        following = swap.next
        assert following is not None
        try:
            assert following.opts.providers == ("tcp", "udp")
            assert following.links == {} and following.reader is None  # loaded, not attached
            assert "udp_fail_queue_rcv_skb" in following.program_ids()
            assert running.links  # the old programs still run
            swap.switch(running)
            assert running.links == {} and set(following.links) == set(following.loaded_names())
            assert running.reader is not None  # the old ring stays readable for its drain
            assert swap.untraced_ns > 0 and not swap.failed
            assert swap.take() is following and swap.take() is None
        finally:
            following.close()
    answers.tracing = (True, None)  # back to the command line's set
    assert swap.due(Options(providers=("tcp", "udp"))) and swap.origin == COMMAND_LINE
    back = swap.take()
    assert back is not None
    back.close()


def test_a_request_that_cannot_be_traced_is_said_once_and_changes_nothing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    own = Options(providers=("tcp",), object_path=Path("/nonexistent/nettrail.bpf.o"))
    answers = Answers((True, {"providers": ["tcp", "udp"]}))
    swap = Swap(answers, own)
    assert not swap.due(own) and swap.take() is None
    err = capsys.readouterr().err
    assert "cannot trace tcp,udp as the dashboard asks: failed to open /nonexistent/nettrail.bpf.o" in err
    assert "still tracing tcp" in err
    assert not swap.due(own) and capsys.readouterr().err == ""  # not tried (nor said) again
    answers.tracing = (True, {"providers": ["tcp", "everything"]})
    assert not swap.due(own)
    assert "ignoring the server's tracing request: providers: unknown everything" in capsys.readouterr().err
