"""Session calls are all or nothing: an interrupt at any moment of a push leaves every rank with
the same value, and a failed call says which ranks had completed it."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
import torch

from notebook_launcher import Session

TRIALS = 8


def test_an_interrupt_at_any_moment_of_a_large_push_leaves_the_ranks_agreeing():
    big = torch.ones(12_000_000)  # 48 MB: each rank takes a while to receive it
    with Session(num_processes=2, ui="none") as session:
        session.push(token=0)
        started = time.monotonic()
        session.push(payload=(0, big))
        took = time.monotonic() - started
        outcomes = set()
        for trial in range(1, TRIALS + 1):
            # Spread the interrupts over the whole push, from its first moments to its end.
            delay = took * (trial - 0.5) / TRIALS
            timer = threading.Timer(delay, os.kill, (os.getpid(), signal.SIGINT))
            timer.start()
            try:
                try:
                    session.push(token=trial, payload=(trial, big))
                finally:
                    timer.join()
                    time.sleep(0.05)  # a late interrupt lands here, after the push
            except KeyboardInterrupt as interrupt:
                # Bare: it came while the values were pickled, or after the push.
                if str(interrupt):
                    outcomes.add(str(interrupt))
            values = session.exec("token, payload[0]").values
            assert values[0] == values[1], f"trial {trial}: the ranks disagree: {values}"
            token, seen = values[0]
            assert token == seen, values  # the names of one push are bound together
            assert token in (trial - 1, trial), values
            session.push(token=trial, payload=(trial, big))  # the next trial starts agreed
        assert session.state == "alive"
        # Interrupts did land inside pushes, and said so.
        assert any("Nothing was pushed" in text for text in outcomes), outcomes


def test_a_failed_call_names_the_ranks_that_had_completed_it():
    with Session(num_processes=3, ui="none") as session:
        session.exec(
            "from notebook_launcher import PartialState\nrank = PartialState().process_index"
        )
        session.exec("done = False")
        with pytest.raises(ValueError) as info:
            session.exec(
                "import time\n"
                "if rank == 1:\n"
                "    time.sleep(0.5)\n"
                "    raise ValueError('rank 1 broke')\n"
                "elif rank == 2:\n"
                "    time.sleep(60)\n"
                "done = True\n"
            )
        notes = "\n".join(info.value.__notes__)
        assert "The call was stopped on rank 2; rank 0 has completed it." in notes, notes
        assert session.exec("done").values == [True, False, False]
