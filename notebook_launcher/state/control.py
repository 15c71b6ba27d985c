"""Process control: which process runs a block or a function, and in what order."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ..utils.validation import check_int, invalid
from .split import split_between


def _skipped(function: Callable[..., Any]) -> Callable[..., None]:
    """A stand-in for ``function`` on processes that must not run it: returns None."""

    @functools.wraps(function)
    def skipped(*args: Any, **kwargs: Any) -> None:
        return None

    return skipped


class ProcessControl:
    """Mixin for the state classes: context managers and decorators built on who this process is.

    The class provides ``process_index``, ``local_process_index``, ``num_processes``,
    ``is_main_process``, ``is_local_main_process``, ``is_last_process``, ``use_distributed``,
    ``initialized``, ``_local_num_processes`` and ``wait_for_everyone()``.

    Decorators decide when they are applied, as Accelerate's do: the decorated name is the
    function itself on the chosen process and, elsewhere, a function that does nothing and
    returns None. In a single process every decorated function runs.
    """

    @contextmanager
    def main_process_first(self) -> Iterator[None]:
        """Run the block on the main process first; the others enter it once the main one left.

        Example:
            >>> with state.main_process_first():
            ...     dataset = load_and_cache()  # the main process builds the cache, others read it
        """
        yield from self._goes_first(self.is_main_process)

    @contextmanager
    def local_main_process_first(self) -> Iterator[None]:
        """Run the block on each node's main process first, then on that node's others."""
        yield from self._goes_first(self.is_local_main_process)

    def _goes_first(self, first: bool) -> Iterator[None]:
        if not first:
            self.wait_for_everyone()
        yield
        if first:
            self.wait_for_everyone()

    def _require_initialized(self) -> None:
        if not self.initialized:
            raise ValueError(
                f"{type(self).__name__} is not initialised: create PartialState() (or an "
                "Accelerator) before using its decorators."
            )

    def _choose(self, function: Any, selected: bool) -> Callable[..., Any]:
        if not callable(function):
            raise invalid("function", function, "expected a function to decorate", TypeError)
        return function if selected or not self.use_distributed else _skipped(function)

    def on_main_process(self, function: Callable[..., Any] | None = None) -> Callable[..., Any]:
        """Decorator: run the function on the main process only.

        Example:
            >>> @state.on_main_process
            ... def save_report():
            ...     ...

        Note:
            ``@state.on_main_process()`` (with parentheses) works too; in Accelerate it does not.
        """
        self._require_initialized()
        if function is None:
            return self.on_main_process
        return self._choose(function, self.is_main_process)

    def on_local_main_process(
        self, function: Callable[..., Any] | None = None
    ) -> Callable[..., Any]:
        """Decorator: run the function on the main process of each node only."""
        self._require_initialized()
        if function is None:
            return self.on_local_main_process
        return self._choose(function, self.is_local_main_process)

    def on_last_process(self, function: Callable[..., Any]) -> Callable[..., Any]:
        """Decorator: run the function on the last process only."""
        self._require_initialized()
        return self._choose(function, self.is_last_process)

    def on_process(
        self, function: Callable[..., Any] | None = None, process_index: int | None = None
    ) -> Callable[..., Any]:
        """Decorator: run the function on the process ``process_index`` only.

        Example:
            >>> @state.on_process(process_index=1)
            ... def report():
            ...     print("only rank 1")

        Note:
            ``process_index`` is required and, in a job of several processes, must name one of
            them (a ValueError otherwise); Accelerate silently runs such a function nowhere.
        """
        self._require_initialized()
        if function is None:
            return functools.partial(self.on_process, process_index=process_index)
        index = self._check_index("process_index", process_index, self.num_processes)
        return self._choose(function, self.process_index == index)

    def on_local_process(
        self, function: Callable[..., Any] | None = None, local_process_index: int | None = None
    ) -> Callable[..., Any]:
        """Decorator: run the function on the process ``local_process_index`` of each node only.

        Note:
            ``local_process_index`` is checked as ``process_index`` is in :meth:`on_process`.
        """
        self._require_initialized()
        if function is None:
            return functools.partial(self.on_local_process, local_process_index=local_process_index)
        index = self._check_index(
            "local_process_index", local_process_index, self._local_num_processes
        )
        return self._choose(function, self.local_process_index == index)

    def _check_index(self, name: str, value: Any, count: int) -> int:
        if value is None:
            raise TypeError(
                f"{name}=None is not valid: say which process runs the function, e.g. "
                f"@state.{'on_process' if name == 'process_index' else 'on_local_process'}"
                f"({name}=0)."
            )
        index = check_int(name, value, 0)
        if self.use_distributed and index >= count:
            raise invalid(name, value, f"this job's processes are numbered 0 to {count - 1}")
        return index

    @contextmanager
    def split_between_processes(self, inputs: Any, apply_padding: bool = False) -> Iterator[Any]:
        """Give this process its contiguous share of ``inputs`` for the block.

        Args:
            inputs: a list, tuple, tensor (split along the first dimension), dataset with
                ``select()``, or a dict of those whose values all have the same length.
            apply_padding: repeat the last item so that every process gets the same number of
                items (``ceil(len / num_processes)``), handy before ``gather``; drop the
                padding afterwards.

        Example:
            >>> with state.split_between_processes(["A", "B", "C"]) as part:
            ...     print(part)  # rank 0: ['A', 'B'], rank 1: ['C']
            >>> with state.split_between_processes(["A", "B", "C"], apply_padding=True) as part:
            ...     print(part)  # rank 0: ['A', 'B'], rank 1: ['C', 'C']

        Note:
            Unlike Accelerate, padding also works for tuples, for empty inputs (every share is
            empty) and for fewer items than processes; the input dict is not modified; padded
            tensors stay on their own device; and in a job of several processes an unsupported
            type (a str, a set ...) is a TypeError instead of being handed whole to every
            process. With one process ``inputs`` comes back as it is, whatever its type, as in
            Accelerate.
        """
        yield split_between(inputs, self.num_processes, self.process_index, apply_padding)
