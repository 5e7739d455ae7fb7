"""The exception tree. Model mistakes are data (signals); these are for program and setup faults.

    ReflexaError
    ├── ConfigError            bad flag, bad model spec, missing file
    ├── ModelError             the model backend failed
    │   ├── ModelNotInstalled  the backend's package or weights are missing
    │   └── ModelUnavailable   the server could not be reached or kept failing
    ├── StoreError             the trace store could not be read or written
    │   └── RunLeased          another live process holds the run
    └── SandboxError           the sandbox could not be set up (not: the code inside failed)

    KeyboardInterrupt
    └── RunInterrupted         Ctrl-C during a run: the run is stored as interrupted, and resumable

Every error carries a one-line message and, where one exists, a `hint` saying what to do next.
"""

from __future__ import annotations


class ReflexaError(Exception):
    """Base of every error reflexa raises on purpose."""

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint

    def explained(self) -> str:
        """The message with its hint, on one line: how a loop reports the error in its result."""
        return f"{self}" + (f" ({self.hint})" if self.hint else "")


class ConfigError(ReflexaError):
    """A flag, a model spec, a config file or an input file is wrong or missing."""


class ModelError(ReflexaError):
    """A model backend failed to answer."""


class ModelNotInstalled(ModelError):
    """The backend's Python package or its model weights are not installed."""


class ModelUnavailable(ModelError):
    """The model server could not be reached, or kept failing after retries."""


class StoreError(ReflexaError):
    """The trace store could not be opened, migrated, read or written."""


class RunLeased(StoreError):
    """Another live process holds the run's lease. The message names its pid, host and start time."""

    def __init__(self, message: str, *, run_id: str, pid: int, host: str, since: float) -> None:
        super().__init__(message, hint="wait for that process to finish, or stop it; a dead holder's lease "
                                       "is taken over")
        self.run_id, self.pid, self.host, self.since = run_id, pid, host, since


class SandboxError(ReflexaError):
    """The sandbox itself could not be set up. Failures of the code inside are signals, not errors."""


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped a run. The run is stored as INTERRUPTED; `reflexa resume RUN_ID` continues it."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"run {run_id} interrupted")
        self.run_id = run_id
