"""An interrupt during a session call is noted, not raised mid-read, and it wakes the call's
wait for the workers at once (a real SIGINT to this process)."""

from __future__ import annotations

import os
import select
import signal

from notebook_launcher.launch.processes.signals import interrupts_noted


def test_a_real_sigint_sets_the_flag_and_makes_its_wake_descriptor_readable():
    before = signal.getsignal(signal.SIGINT)
    with interrupts_noted() as flag:
        fd = flag.wake_fd
        assert fd is not None and not flag.is_set()
        assert select.select([fd], [], [], 0)[0] == []  # nothing to wake for yet
        os.kill(os.getpid(), signal.SIGINT)  # handled on this thread, no KeyboardInterrupt
        assert flag.is_set()
        assert select.select([fd], [], [], 0)[0] == [fd]
        for _ in range(100_000):  # a burst of interrupts never blocks the handler
            flag.set()
    assert signal.getsignal(signal.SIGINT) is before
    try:  # closed with the context: no descriptor left behind
        os.fstat(fd)
    except OSError:
        pass
    else:
        raise AssertionError(f"the wake descriptor {fd} is still open")


def test_outside_the_main_thread_nothing_is_installed():
    import threading

    seen = []

    def body():
        with interrupts_noted() as flag:
            seen.append((flag.wake_fd, flag.is_set()))

    thread = threading.Thread(target=body)
    thread.start()
    thread.join(10)
    assert seen == [(None, False)]
