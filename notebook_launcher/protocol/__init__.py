"""What the kernel and the workers exchange, imported by both sides and importing neither.

``events`` are the records workers send (and the kernel makes of their output and exits);
``channel`` carries them; ``context`` and ``spec`` are what a worker is told about its job;
``failure`` is the record of a failed rank; ``names`` the signals and entry points both sides
agree on; ``shared_files`` the life cycle of shared-memory files; ``results`` how return values
travel; ``session_messages`` what a session's kernel and ranks say to each other;
``remote_link`` the socket of a rank on another machine; ``node_environment`` what a node must
have to run a rank.
"""
