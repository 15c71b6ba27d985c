"""What ``srun`` says about the tasks of its step, read line by line from its stderr: each task's
end (exit code or signal) and Slurm's own reasons to end a step (time limit, cancelled, node
failure, memory), in words a report can use."""

from __future__ import annotations

import re
import signal

_TASKS = re.compile(r"srun: error: (?P<node>\S+): tasks? (?P<tasks>[\d,\-]+): (?P<how>.+)$")
_EXIT = re.compile(r"Exited with exit code (\d+)")
_CANCELLED = re.compile(
    r"\*\*\* (?P<what>JOB|STEP) (?P<id>\S+) ON (?P<node>\S+) CANCELLED AT \S+"
    r"(?: DUE TO (?P<why>[A-Z ]+?))?(?: \*\*\*|$)"
)
_NODE_FAILURE = re.compile(r"[Nn]ode failure on (?P<node>\S+)")
_MEMORY = re.compile(r"oom[-_ ]kill|exceeded (?:job |step )?memory limit|out of memory", re.I)
_STEPD = re.compile(r"^(?:\d+: )?slurmstepd-(?P<node>[^:\s]+): (?:error: )?")
FROM_OUTSIDE = "was cancelled from outside this kernel"
_SIGNALS = {signal.strsignal(s): -int(s) for s in signal.Signals if signal.strsignal(s)}
_SIGNALS["Killed"] = -int(signal.SIGKILL)
_SIGNALS["Terminated"] = -int(signal.SIGTERM)


def task_ends(line: str) -> tuple[str, list[int], int] | None:
    """``(node, tasks, exit code)`` from srun's report of tasks that ended ("srun: error: n2:
    task 1: Killed"; a signal as its negative number); None for any other line."""
    found = _TASKS.search(line)
    if found is None:
        return None
    how = found["how"].strip()
    exit_code = _EXIT.search(how)
    code = int(exit_code.group(1)) if exit_code else _SIGNALS.get(how.split(" (")[0], 1)
    return found["node"], _numbers(found["tasks"]), code


def slurm_ending(line: str) -> str | None:
    """Slurm's own reason to end the step, as a report says it, if ``line`` tells one."""
    found = _CANCELLED.search(line)
    if found is not None:
        what = "job" if found["what"] == "JOB" else "job step"
        why = (found["why"] or "").strip()
        job = found["id"].split(".")[0]
        if why == "TIME LIMIT":
            return f"Slurm ended job {job}: it reached its time limit"
        if why == "NODE FAILURE":  # said on every node of the step: which one failed is not
            return f"Slurm ended job {job}: one of its nodes failed"
        if why == "PREEMPTION":
            return f"Slurm ended the {what} {found['id']}: it was preempted"
        if why == "JOB REQUEUE":
            return requeued(job)
        if why:
            return f"Slurm ended the {what} {found['id']} ({why.lower()})"
        return f"the Slurm {what} {found['id']} {FROM_OUTSIDE} (scancel, or an administrator)"
    found = _NODE_FAILURE.search(line)
    if found is not None:
        return f"Slurm lost the node {found['node']} (its slurmd stopped answering, node DOWN)"
    if _MEMORY.search(line):
        stepd = _STEPD.search(line)
        where = f" on {stepd['node']}" if stepd else ""
        said = _STEPD.sub("", line.strip())
        return f"Slurm killed the job step for memory{where}: {said}"
    return None


def requeued(job: str) -> str:
    """The ending of a step whose job Slurm put back in the queue."""
    return (
        f"Slurm requeued job {job} (preempted, or scontrol requeue): it ended the ranks and "
        "put the job back in the queue"
    )


def lost_node(line: str) -> str | None:
    """The node Slurm lost, if ``line`` is srun's word that one failed."""
    found = _NODE_FAILURE.search(line)
    return found["node"] if found is not None else None


def more_telling(current: str | None, new: str) -> bool:
    """Whether ``new`` says more than ``current`` of why the step ended: nothing said yet, or
    only that it was cancelled (what Slurm also prints when it ends a step for a reason)."""
    return current is None or (FROM_OUTSIDE in current and FROM_OUTSIDE not in new)


def _numbers(text: str) -> list[int]:
    numbers: list[int] = []
    for part in text.split(","):
        low, _, high = part.partition("-")
        numbers.extend(range(int(low), int(high or low) + 1))
    return numbers
