"""Small helpers shared by the kernel side and the worker side."""
