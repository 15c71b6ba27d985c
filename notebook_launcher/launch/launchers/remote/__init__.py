"""What every launcher of ranks on other machines (Ray, Slurm) shares: the launcher and attempt
bases (``launcher``), the kernel's listener with its handshake limits (``gate``) and the relay that
turns each rank's socket into the pipes a local worker has (``links``)."""
