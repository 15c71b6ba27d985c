"""While the workers run: the worker group, the supervisor and its watchdogs, what counts as
progress, the stacks read on a stall, and the workers' output on its way to the cell."""
