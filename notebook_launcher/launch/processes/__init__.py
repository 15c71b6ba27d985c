"""The kernel's dealings with processes as such: waiting on pipes, killing a tree, the janitor
that outlives the kernel, the imports warmed before a fork, and signals held off mid-bookkeeping."""
