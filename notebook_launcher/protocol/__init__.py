"""What the kernel and the workers exchange, imported by both sides and importing neither.

``events`` are the records workers send (and the kernel makes of their output and exits);
``channel`` carries them; ``context`` and ``spec`` are what a worker is told about its job;
``failure`` is the record of a failed rank; ``names`` the signals, entry points and files both
sides must agree on.
"""
