"""What several test folders share: worker stand-ins, process-tree checks, a real kernel driven
through jupyter_client, JupyterLab in Chromium, the loopback Ray cluster, and the steps the Ray
and Slurm lanes both take. Found through pytest's ``pythonpath`` (pyproject.toml)."""
