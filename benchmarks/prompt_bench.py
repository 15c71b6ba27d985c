"""How long a pdb command on a rank takes, from the line typed in the cell to the rank's next
prompt: a launch of 2 ranks, rank 1 stopped at ``breakpoint()``, answered ``p 1`` N times.

    python benchmarks/prompt_bench.py [N]

Prints the median and 90th percentile of the round trips, in milliseconds. The answers come from
a script standing in for the cell (the kernel's ``input()`` adds the frontend's own round trip).
"""

from __future__ import annotations

import os
import statistics
import sys
import time

from notebook_launcher import notebook_launcher
from notebook_launcher.launch.supervision import supervisor
from notebook_launcher.launch.supervision.prompting import Answerer


def stopped():
    if os.environ["RANK"] == "1":
        breakpoint()
    return 0


def main(count: int) -> None:
    asked: list[float] = []

    def typed(prompt: str, password: bool) -> str:
        asked.append(time.perf_counter())
        return "p 1" if len(asked) <= count else "c"

    supervisor.cell_answerer = lambda: Answerer(typed)
    notebook_launcher(stopped, num_processes=2, ui="none", output="main")
    trips = [(b - a) * 1000 for a, b in zip(asked, asked[1:], strict=False)][:count]
    trips.sort()
    print(
        f"{len(trips)} commands: median {statistics.median(trips):.1f} ms, "
        f"p90 {trips[int(len(trips) * 0.9)]:.1f} ms"
    )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 50)
