"""FP8 training recipe settings (TransformerEngine or MS-AMP)."""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from typing import Any

from .dataclasses import KwargsHandler, env_default
from .validation import check_bool, check_choice, check_int, invalid

FP8_BACKENDS = ("MSAMP", "TE")
FP8_FORMATS = ("HYBRID", "E4M3", "E5M2")
AMAX_COMPUTE_ALGORITHMS = ("max", "most_recent")
OPT_LEVELS = ("O1", "O2")
_PREFIX = "ACCELERATE_FP8_"
_PACKAGES = {
    "TE": ("transformer_engine", "pip install transformer_engine[pytorch]"),
    "MSAMP": ("msamp", "see https://github.com/Azure/MS-AMP for the install steps"),
}


@dataclass
class FP8RecipeKwargs(KwargsHandler):
    """How FP8 mixed precision is set up, with TransformerEngine ("TE") or MS-AMP ("MSAMP").

    Every field left as None takes its value from the ``ACCELERATE_FP8_<NAME>`` environment
    variable (``..._FORMAT``, ``..._MARGIN``, ``..._OVERRIDE_FPROP`` ...), else the default below.

    Args:
        opt_level: MS-AMP optimisation level, "O1" or "O2" (default "O2").
        use_autocast_during_eval: use FP8 autocast in eval mode too (default False).
        margin: TE scaling-factor margin (default 0).
        interval: how often TE recomputes the scaling factor (default 1).
        fp8_format: "HYBRID" (E4M3 forward, E5M2 backward), "E4M3" or "E5M2" (default "HYBRID").
        amax_history_len: amax history length for TE scaling (default 1024).
        amax_compute_algo: "max" or "most_recent" (default "most_recent").
        override_linear_precision: run the (fprop, dgrad, wgrad) GEMMs in higher precision
            (default (False, False, False)).
        use_mxfp8_block_scaling: use MXFP8 block scaling in TE (default False).
        backend: "TE" or "MSAMP" (default "MSAMP" where MS-AMP is installed, else "TE").

    Note:
        Accelerate checks at construction that the backend's package is installed; here the
        settings are validated at construction and the package is needed by :meth:`build`.
        Accelerate also deprecates this class in favour of per-backend classes.

    Raises:
        ValueError: an unknown backend, format, algorithm or level, listing the choices.
    """

    opt_level: str | None = None
    use_autocast_during_eval: bool | None = None
    margin: int | None = None
    interval: int | None = None
    fp8_format: str | None = None
    amax_history_len: int | None = None
    amax_compute_algo: str | None = None
    override_linear_precision: tuple[bool, bool, bool] | None = None
    use_mxfp8_block_scaling: bool | None = None
    backend: str | None = None

    def __post_init__(self) -> None:
        default_backend = "MSAMP" if importlib.util.find_spec("msamp") else "TE"
        self.backend = self._pick("backend", "BACKEND", default_backend, FP8_BACKENDS, str.upper)
        self.opt_level = self._pick("opt_level", "OPT_LEVEL", "O2", OPT_LEVELS, str.upper)
        self.fp8_format = self._pick("fp8_format", "FORMAT", "HYBRID", FP8_FORMATS, str.upper)
        self.amax_compute_algo = self._pick(
            "amax_compute_algo",
            "AMAX_COMPUTE_ALGO",
            "most_recent",
            AMAX_COMPUTE_ALGORITHMS,
            str.lower,
        )
        for name, key, default, minimum in (
            ("margin", "MARGIN", 0, 0),
            ("interval", "INTERVAL", 1, 1),
            ("amax_history_len", "AMAX_HISTORY_LEN", 1024, 1),
        ):
            value = getattr(self, name)
            value = env_default(_PREFIX + key, default, int) if value is None else value
            setattr(self, name, check_int(name, value, minimum))
        for name, key in (
            ("use_autocast_during_eval", "USE_AUTOCAST_DURING_EVAL"),
            ("use_mxfp8_block_scaling", "USE_MXFP8_BLOCK_SCALING"),
        ):
            value = getattr(self, name)
            value = env_default(_PREFIX + key, False, bool) if value is None else value
            setattr(self, name, check_bool(name, value))
        self.override_linear_precision = self._override()

    def _pick(self, field: str, key: str, default: str, choices, normalize) -> str:
        value = getattr(self, field)
        name = field if value is not None else _PREFIX + key
        value = env_default(_PREFIX + key, default) if value is None else value
        return check_choice(name, value, choices, normalize)

    def _override(self) -> tuple[bool, bool, bool]:
        value = self.override_linear_precision
        if value is None:
            return tuple(
                env_default(_PREFIX + f"OVERRIDE_{gemm}", False, bool)
                for gemm in ("FPROP", "DGRAD", "WGRAD")
            )
        if not isinstance(value, (tuple, list)) or len(value) != 3:
            raise invalid(
                "override_linear_precision",
                value,
                "expected three bools (fprop, dgrad, wgrad)",
                TypeError,
            )
        return tuple(check_bool("override_linear_precision", v) for v in value)

    def build(self) -> Any:
        """The recipe for the backend: a TE ``DelayedScaling``, or MS-AMP's settings dict.

        Raises:
            ImportError: the backend's package is not installed, naming it and how to get it.
        """
        package, how = _PACKAGES[self.backend]
        if importlib.util.find_spec(package) is None:
            raise ImportError(
                f"FP8RecipeKwargs(backend={self.backend!r}) needs the {package} package, which "
                f"is not installed ({how})."
            )
        if self.backend == "MSAMP":
            return {"opt_level": self.opt_level}
        recipe = importlib.import_module("transformer_engine.common.recipe")
        return recipe.DelayedScaling(
            margin=self.margin,
            fp8_format=getattr(recipe.Format, self.fp8_format),
            amax_history_len=self.amax_history_len,
            amax_compute_algo=self.amax_compute_algo,
            override_linear_precision=self.override_linear_precision,
        )
