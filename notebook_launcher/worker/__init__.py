"""Everything that runs in a worker process around the user's function.

``bootstrap`` sets a local worker up and reports its result or failure; ``session_loop`` is what
a session's workers run between calls; ``remote_rank`` is a rank's Ray actor on another machine;
``xla_replica`` runs the bootstrap in replicas that ``xmp.spawn`` starts; ``stopping``,
``exit_barrier``, ``regroup`` and ``reporting`` are the bootstrap's parts; ``torchrun`` is the
command that runs a function under torchrun instead. (What the function itself calls to show
metrics and progress in the kernel is :mod:`notebook_launcher.live`.)
"""
