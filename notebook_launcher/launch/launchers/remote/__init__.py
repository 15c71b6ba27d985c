"""What every launcher of ranks on other machines shares: the kernel's listener and the relay that
turns each rank's socket into the pipes a local worker has."""
