"""`--executor ray`: each task a Ray task, on a local Ray (started for the batch or eval) or a cluster
(`address`).

Workers open the batch's store themselves, so the store must be one they all reach: a PostgreSQL URL for
a cluster; a SQLite file serves a local Ray (one machine). A worker process that dies is retried by Ray
(RETRIES times); the retry finds the task's record in the store and resumes its run instead of starting
another. A task Ray gives up on has no result, and a re-run of the batch runs it. A worker Ray stops (SIGTERM: its
driver died, or Ray is shutting down) leaves its run as it is, to be resumed, rather than ending it as an
error.

Needs the `ray` extra: pip install 'reflexa[ray]'.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from ..errors import ConfigError

RETRIES = 3
"""Times Ray runs a task again after its worker process died."""


class WorkerStopped(BaseException):  # noqa: N818 - named for what happened to the worker
    """SIGTERM reached a Ray worker mid-task. Ray's own handler raises SystemExit there, which a run takes
    for a check that called sys.exit and ends as ERROR; this is not an Exception, so the run lets go of its
    lease and stays resumable."""


def stoppable(work: Callable[..., Any], *args: Any) -> Any:
    """`work(*args)` in a Ray worker, with SIGTERM raising WorkerStopped while it runs; the worker then exits
    as Ray asked."""
    if threading.current_thread() is not threading.main_thread():  # signal handlers live on the main thread
        return work(*args)

    def stopped(signum: int, frame: object) -> None:
        raise WorkerStopped

    previous = signal.signal(signal.SIGTERM, stopped)
    try:
        return work(*args)
    except WorkerStopped:
        raise SystemExit(1) from None
    finally:
        signal.signal(signal.SIGTERM, previous)


class RayExecutor:
    """Submits `work(*args)` to Ray; `submit` returns a concurrent.futures Future of its value."""

    def __init__(self, work: Callable[..., Any], concurrency: int, address: str | None) -> None:
        """`work` is what each Ray task calls (a batch's `run_task`, an eval's `run_eval_task`)."""
        try:
            import ray
        except ImportError:
            raise ConfigError("--executor ray needs Ray", hint="pip install 'reflexa[ray]'") from None
        self.ray = ray
        self.started = False
        if not ray.is_initialized():
            options: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False,
                                       "logging_level": "ERROR", "configure_logging": True}
            if address:
                options["address"] = address
            else:
                # A local Ray sized to the batch: one worker process per concurrent task. The workers find
                # reflexa through the driver's environment (PYTHONPATH included), which they inherit.
                options["num_cpus"] = concurrency
                if temp := os.environ.get("REFLEXA_RAY_TMPDIR"):
                    options["_temp_dir"] = temp
            try:
                ray.init(**options)
            except Exception as exc:  # noqa: BLE001 - Ray's own errors: cannot connect, cannot start
                raise ConfigError(f"cannot start Ray{f' at {address}' if address else ''}: {exc}",
                                  hint="is the cluster address right (ray://HOST:10001 or HOST:6379)?") from None
            self.started = True
        self.work = work
        self.remote = ray.remote(max_retries=RETRIES, num_cpus=1)(stoppable)

    def submit(self, *args: Any) -> Future[Any]:
        """`work(*args)` as a Ray task."""
        return self.remote.remote(self.work, *args).future()

    def cancel(self) -> None:
        """Stop the local Ray this driver started (its workers with it); a cluster is left running."""
        if self.started:
            self.ray.shutdown()
            self.started = False

    close = cancel
