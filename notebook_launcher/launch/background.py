"""Launching without blocking the kernel: the run is supervised from a background thread.

The thread that starts the workers also supervises them and tears them down, so it lives until
nothing of the run is left (workers die with the thread that forked them, by design).
"""

from __future__ import annotations

import atexit
import contextvars
import threading
import time
import warnings
import weakref
from collections.abc import Callable
from typing import Any

from ..ui import RunPanel, create_view
from .errors import LaunchStoppedError, shown_as_argument_errors
from .planning import exclusive
from .planning.entry import checked_plan, launch_named
from .planning.plan import LaunchPlan
from .planning.preflight import check_args, check_function
from .planning.settings import LaunchSettings
from .result import LaunchResult
from .supervision.prompting import background_answerer, cell_answerer, cell_takes_input
from .supervision.relay import Relay
from .supervision.runner import launch

EXIT_STOP_WAIT = 5.0  # seconds an exiting interpreter waits for each run it stops
_running: weakref.WeakSet[LaunchHandle] = weakref.WeakSet()


class LaunchHandle:
    """A launch running in the background.

    ``done`` says whether it ended; ``wait()`` blocks until it does and returns the
    :class:`LaunchResult` (or raises what the launch raised), answering meanwhile the prompts
    of ranks stopped in the debugger; ``stop()`` stops every worker.

    Attributes:
        model: the run's live :class:`~notebook_launcher.ui.RunModel`.
        view: the view drawing it (its ``widget`` is the status table and charts in widgets mode).
    """

    def __init__(self, view: Any, num_processes: int) -> None:
        self.view = view
        self.model = view.model
        self.num_processes = num_processes
        self._stop = threading.Event()
        self._done = threading.Event()
        self._result: LaunchResult | None = None
        self._exception: BaseException | None = None
        self._callbacks: list[Callable[[LaunchHandle], None]] = []
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        # Answers the ranks' prompts from the cell that waits (launched from a cell that takes
        # input); None: a prompt raises StdinUnavailableError on the rank.
        self._relay: Relay | None = None

    # -- state ------------------------------------------------------------------------------------

    @property
    def done(self) -> bool:
        """True once the run ended (finished, failed or stopped) and every worker is gone."""
        return self._done.is_set()

    @property
    def result(self) -> LaunchResult | None:
        """The :class:`LaunchResult` once the run finished; None while it runs or if it failed."""
        return self._result

    @property
    def exception(self) -> BaseException | None:
        """What the launch raised (a rank's exception, a timeout, LaunchStoppedError), or None."""
        return self._exception

    @property
    def status(self) -> str:
        """ "running", "finished", "failed" or "stopped"."""
        if not self.done:
            return "running"
        if self._exception is None:
            return "finished"
        return "stopped" if isinstance(self._exception, LaunchStoppedError) else "failed"

    @property
    def panel(self) -> RunPanel:
        """The run's status table and charts as a displayable RunPanel (live while it runs)."""
        return RunPanel(self.model)

    # -- control ----------------------------------------------------------------------------------

    def wait(self, timeout: float | None = None) -> LaunchResult:
        """Block until the run ends; return its result or raise what it raised.

        A rank that stops at a prompt (``breakpoint()``, ``input()``) while the launch runs in
        the background waits for a cell that calls ``wait()``: the prompt then opens in that
        cell, with the rank's lines since it stopped, as it would in the cell of a blocking
        launch, and the ranks' lines go to that cell (not under the panel) until it returns.
        Interrupting the cell leaves the rank waiting for the next one; a launch that ends
        while the cell waits for an answer (stopped, a rank failed) ends the wait at once.

        Args:
            timeout: seconds to wait at most; None waits as long as the run takes.

        Raises:
            TimeoutError: the run still runs after ``timeout`` seconds (it keeps running).
            Whatever the launch raised, as :func:`notebook_launcher` would have.
        """
        _check_timeout(timeout)
        end = None if timeout is None else time.monotonic() + timeout
        if self._relay is not None and threading.current_thread() is threading.main_thread():
            self._relay.serve(cell_answerer(), self._done, timeout)
        left = None if end is None else max(0.0, end - time.monotonic())
        if not self._done.wait(left):
            raise TimeoutError(f"the launch still runs after {timeout:g} s (it keeps running)")
        if self._exception is not None:
            raise self._exception
        assert self._result is not None
        return self._result

    def stop(self, timeout: float | None = 10.0) -> bool:
        """Stop every worker and wait until they are gone.

        Args:
            timeout: seconds to wait for the teardown; None waits until it is done.

        Returns:
            True once the run has ended (it may have ended on its own before).
        """
        _check_timeout(timeout)
        self._stop.set()
        if self._relay is not None:
            self._relay.wake()  # a prompt waiting for its cell ends now
        return self._done.wait(timeout)

    def add_done_callback(self, callback: Callable[[LaunchHandle], None]) -> None:
        """Call ``callback(handle)`` once the run ends (at once if it already has).

        Callbacks run in the supervising thread; what they raise is reported as a warning.
        """
        if not callable(callback):
            raise TypeError(f"callback={callback!r} is not valid: expected a callable")
        with self._lock:
            if not self.done:
                self._callbacks.append(callback)
                return
        _call_back(callback, self)

    def __repr__(self) -> str:
        return f"LaunchHandle({self.status}, {self.num_processes} processes)"

    # -- the supervising thread -------------------------------------------------------------------

    def _start(self, function: Callable[..., Any], args: tuple, plan: LaunchPlan) -> None:
        # Run in a copy of the caller's context, so the kernel attributes what the thread
        # shows to the cell that launched it.
        context = contextvars.copy_context()
        self._thread = threading.Thread(
            target=context.run,
            args=(self._supervise, function, args, plan),
            name="notebook_launcher-supervisor",
            daemon=True,
        )
        _running.add(self)
        self._thread.start()

    def _supervise(self, function: Callable[..., Any], args: tuple, plan: LaunchPlan) -> None:
        streams = self.view.streams
        if self._relay is not None:
            background_answerer.set(self._relay)
            streams = self._relay.streams(streams)  # to the cell that answers, while one does
        try:
            result = launch(
                function, args, plan, listeners=(self.view,), stop=self._stop, streams=streams
            )
            result.panel = RunPanel(self.model)
            self._result = result
        except BaseException as exc:  # kept for wait() and .exception
            self._exception = exc
        finally:
            exclusive.release()  # before done: a launch right after wait() is allowed
            self.view.finish()
            with self._lock:
                self._done.set()
                callbacks, self._callbacks = self._callbacks, []
            if self._relay is not None:
                self._relay.wake()  # the cell that waits returns now
            _running.discard(self)
            for callback in callbacks:
                _call_back(callback, self)


def _call_back(callback: Callable[[LaunchHandle], None], handle: LaunchHandle) -> None:
    try:
        callback(handle)
    except Exception as exc:
        warnings.warn(
            f"notebook_launcher: a done callback raised {exc!r}", RuntimeWarning, stacklevel=2
        )


def _check_timeout(timeout: object) -> None:
    if timeout is None:
        return
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout < 0:
        raise ValueError(f"timeout={timeout!r} is not valid: expected seconds >= 0 or None")


def start_in_background(
    function: Callable[..., Any],
    args: tuple,
    settings: LaunchSettings,
    *,
    show: bool = True,
) -> LaunchHandle:
    """Plan ``settings`` and run the plan from a background thread; return its handle.

    The preflight checks run here, once, so a launch they refuse raises now, not later in the
    thread. ``show=False`` leaves placing the view's widget to the caller (the config panel).
    """
    named = launch_named("background", function)
    with checked_plan(function, args, settings, named, hand_over=True) as plan:
        view = create_view(
            settings.ui,
            plan.num_processes,
            plan.output,
            first_rank=plan.global_rank(0),
            background=True,
            show=show,
        )
        handle = LaunchHandle(view, plan.num_processes)
        if show and cell_takes_input():  # (the config panel's own cell has ended)
            handle._relay = Relay(handle._stop)
        handle._start(function, args, plan)  # the thread releases the kernel when it ends
    return handle


def launch_in_background(
    function: Callable[..., Any],
    args: tuple = (),
    num_processes: int | None = None,
    **options: Any,
) -> LaunchHandle:
    """Start ``function(*args)`` in ``num_processes`` workers and return at once.

    Takes every parameter of :func:`notebook_launcher` (``ui``, ``timeout``, ``output`` ...) and
    validates them the same way. The run is supervised from a background thread, so the kernel
    stays free (buttons, other cells) while it goes on. With widgets the status table and charts
    appear in the calling cell, with the last lines of worker output under them.

    Returns:
        A :class:`LaunchHandle`: ``wait()``, ``stop()``, ``result``, ``done``, ``exception``.

    Raises:
        TypeError, ValueError: as :func:`notebook_launcher`, before anything starts.

    Example:
        >>> handle = launch_in_background(train, args=(3e-4,), num_processes=2)
        >>> handle.stop()  # or handle.wait() for the LaunchResult
    """
    with shown_as_argument_errors():
        check_function(function)
        call_args = check_args(args)
        settings = LaunchSettings.from_options(num_processes=num_processes, **options)
    return start_in_background(function, call_args, settings)


@atexit.register
def _stop_running() -> None:
    """An exiting interpreter stops the runs still going, leaving no worker behind."""
    for handle in list(_running):
        handle.stop(EXIT_STOP_WAIT)
