"""Takes a Slurm job with the kernel when the kernel dies: waits until its stdin (a pipe whose
only writer is the kernel) ends, then ends the ``srun`` processes whose pids the kernel wrote
into it (one per line, unless it wrote "x" after them: they ended) and cancels the jobs named on its command line. Run by path in an
interpreter of its own (``-I -S``), importing nothing of this package:
``python -I -S reaper.py [JOB ...]``.

A kernel that ends a launch normally closes the pipe too: what was already cancelled is gone,
and cancelling it again does nothing."""

import os
import signal
import subprocess
import sys

LIMIT = 30  # seconds scancel may take


def main(argv):
    told = b""
    try:
        while chunk := os.read(0, 4096):
            told += chunk
    except OSError:
        pass
    # "x" last: the kernel saw its srun processes end (their pids may be reused by now).
    for pid in [] if told.endswith(b"x") else told.split():
        try:
            os.kill(int(pid), signal.SIGTERM)  # srun ends its job step
        except (OSError, ValueError):
            pass
    for job in argv:
        try:
            subprocess.run(["scancel", job], timeout=LIMIT, check=False, capture_output=True)
        except (OSError, subprocess.SubprocessError):
            pass


if __name__ == "__main__":
    main(sys.argv[1:])
