"""Everything that runs in a worker process around the user's function.

``bootstrap`` sets a worker up and reports its result or failure; ``live`` is what the function
calls to show metrics, progress and a status in the kernel; ``xla_replica`` runs the bootstrap
in replicas that ``xmp.spawn`` starts; ``torchrun`` is the command that runs a function under
torchrun instead.
"""
