"""Trackers for Weights & Biases and MLflow, selected by name as in Accelerate.

``Accelerator(log_with="wandb")`` and ``log_with="mlflow"`` start one run per job, from the main
process, with the same constructor arguments (``init_kwargs={"wandb": {...}}``) and the same
calls to the library as Accelerate's trackers of those names. Each library is imported only
when its tracker is created, so neither is a dependency of this package.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

from ..utils.environment import str_to_bool
from .tracker_base import GeneralTracker

logger = logging.getLogger(__name__)


class WandBTracker(GeneralTracker):
    """Logs to a Weights & Biases run (``wandb.init(project=run_name, **kwargs)``).

    Args:
        run_name: the W&B project.
        **kwargs: passed to ``wandb.init`` (``mode="offline"``, ``dir=...``, ``tags=...`` ...).
    """

    name = "wandb"
    requires_logging_directory = False

    def __init__(self, run_name: str, **kwargs: Any) -> None:
        super().__init__()
        self.run_name = run_name
        self.init_kwargs = kwargs
        self.run: Any = None

    def start(self) -> None:
        import wandb

        self.run = wandb.init(project=self.run_name, **self.init_kwargs)

    @property
    def tracker(self) -> Any:
        return self.run

    def store_init_configuration(self, values: dict) -> None:
        self.run.config.update(values, allow_val_change=True)

    def log(self, values: dict, step: int | None = None, **kwargs: Any) -> None:
        self.run.log(values, step=step, **kwargs)

    def finish(self) -> None:
        if self.run is not None:
            self.run.finish()


def _from_env(name: str, value: Any) -> Any:
    # MLflow's own variables win over the arguments, as in Accelerate's tracker.
    return os.environ.get(name, value)


class MLflowTracker(GeneralTracker):
    """Logs to an MLflow run, in the experiment named ``experiment_name``.

    Where runs are stored is MLflow's tracking URI (``MLFLOW_TRACKING_URI``, e.g.
    ``file:/path/mlruns``). The variables ``MLFLOW_EXPERIMENT_NAME``, ``MLFLOW_RUN_ID``,
    ``MLFLOW_TAGS`` (JSON) and ``MLFLOW_NESTED_RUN`` take precedence over the arguments.

    Args:
        experiment_name: the experiment (created if missing).
        logging_dir: the artifact location of a new experiment.
        run_id: resume this run instead of starting one.
        tags: tags of the experiment and run (a dict, or its JSON text).
        nested_run: start the run nested in the active one.
        run_name: the new run's name.
        description: the run's description.
    """

    name = "mlflow"
    requires_logging_directory = False

    def __init__(
        self,
        experiment_name: str | None = None,
        logging_dir: str | os.PathLike | None = None,
        run_id: str | None = None,
        tags: dict[str, Any] | str | None = None,
        nested_run: bool | None = False,
        run_name: str | None = None,
        description: str | None = None,
    ) -> None:
        super().__init__()
        tags = _from_env("MLFLOW_TAGS", tags)
        nested = _from_env("MLFLOW_NESTED_RUN", nested_run)
        self.experiment_name = _from_env("MLFLOW_EXPERIMENT_NAME", experiment_name)
        self.logging_dir = None if logging_dir is None else os.fspath(logging_dir)
        self.run_id = _from_env("MLFLOW_RUN_ID", run_id)
        self.tags = json.loads(tags) if isinstance(tags, str) else tags
        self.nested_run = str_to_bool(nested) if isinstance(nested, str) else bool(nested)
        self.run_name = run_name
        self.description = description
        self.active_run: Any = None

    def start(self) -> None:
        import mlflow

        found = mlflow.search_experiments(filter_string=f"name = '{self.experiment_name}'")
        if found:
            experiment_id = found[0].experiment_id
        else:
            experiment_id = mlflow.create_experiment(
                name=self.experiment_name, artifact_location=self.logging_dir, tags=self.tags
            )
        self.active_run = mlflow.start_run(
            run_id=self.run_id,
            experiment_id=experiment_id,
            run_name=self.run_name,
            nested=self.nested_run,
            tags=self.tags,
            description=self.description,
        )

    @property
    def tracker(self) -> Any:
        return self.active_run

    def store_init_configuration(self, values: dict) -> None:
        """Record ``values`` as the run's parameters (values longer than MLflow takes are
        left out, with a warning)."""
        import mlflow
        from mlflow.utils.validation import MAX_PARAM_VAL_LENGTH, MAX_PARAMS_TAGS_PER_BATCH

        kept = {}
        for key, value in values.items():
            if len(str(value)) > MAX_PARAM_VAL_LENGTH:
                logger.warning("mlflow: parameter %r is too long to record; left out", key)
            else:
                kept[key] = value
        items = list(kept.items())
        for start in range(0, len(items), MAX_PARAMS_TAGS_PER_BATCH):
            mlflow.log_params(dict(items[start : start + MAX_PARAMS_TAGS_PER_BATCH]))

    def log(self, values: dict, step: int | None = None, **kwargs: Any) -> None:
        """Record the numbers of ``values`` as metrics (MLflow's metrics are numbers only; other
        values are left out, with a warning)."""
        import mlflow

        metrics = {}
        for key, value in values.items():
            if isinstance(value, (int, float)):
                metrics[key] = value
            else:
                logger.warning("mlflow: %r is a %s, not a number; left out", key, type(value))
        mlflow.log_metrics(metrics, step=step, **kwargs)

    def finish(self) -> None:
        import mlflow

        mlflow.end_run()
