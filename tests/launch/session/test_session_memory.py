"""Values a session call returned belong to the caller alone: once the caller drops them, the
kernel's memory is back where it was (nothing of them is kept until the next call)."""

from __future__ import annotations

from helpers.memory import held_then_left

from notebook_launcher import Session


def test_pulled_values_are_released_when_dropped():
    with Session(num_processes=2, ui="none") as session:
        held, left = held_then_left(session)
        print(f"local session, 2 x 200 MB pulled: {held:.0f} MB held, {left:.0f} MB after del")
        assert held > 300, "the values were not measured (every page read)"
        assert left < 100, f"{left:.0f} MB of dropped values still held by the kernel"
        assert session.exec("1").values == [1, 1]  # the next call after them
