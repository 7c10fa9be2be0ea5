"""The job process's own deadline: a kernel timer that kills it at MAX_RUNTIME + grace.

The job process's alarm (SIGALRM at MAX_RUNTIME, `jobprocess.run_one`) needs the handler's
help: a handler that blocks SIGALRM (`signal.pthread_sigmask`), or that is stuck in C code
holding the interpreter (`sum(range(10**12))`), never sees it. Its worker then kills the
process `KILL_GRACE_SECONDS` later, unless the worker is frozen itself (`kill -STOP`, a
stuck host): the job ran on while its lease ran out and recover-stale gave the row to
another worker, two runs of one row at once. So each job process also holds a POSIX timer
(`timer_create` on `CLOCK_MONOTONIC`) that delivers SIGKILL, which no handler can block,
catch or delay: armed for MAX_RUNTIME + `KILL_GRACE_SECONDS` before each job, disarmed
after it, it ends the process by the kernel's hand when its worker would have killed it,
whatever the handler or the worker does. No thread, and two system calls per job.

POSIX timers are not inherited by `fork()`: a handler's own child processes are not
killed by it (they end with the job process, `PR_SET_PDEATHSIG` aside, as before).
Linux and other C libraries with `timer_create` only; elsewhere `KillTimer.create()`
returns None and a job process has its alarm and its worker's kill, as before. Importing
this module imports nothing else (`ctypes` is loaded on first use).
"""

from __future__ import annotations

import functools
import signal
import time
from typing import Any

__all__ = ["KILL_GRACE_SECONDS", "KillTimer"]

KILL_GRACE_SECONDS = 2.0  # after MAX_RUNTIME, the alarm's turn before SIGKILL
_SIGEV_SIGNAL = 0  # sigevent.sigev_notify: deliver sigev_signo to the process


@functools.cache
def _functions() -> tuple[Any, Any, type, type] | None:
    """`(timer_create, timer_settime, sigevent, itimerspec)` of the C library, loaded
    once (in the fork server: its job processes share them); None without them."""
    import ctypes

    class Timespec(ctypes.Structure):
        _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]

    class Itimerspec(ctypes.Structure):
        _fields_ = [("it_interval", Timespec), ("it_value", Timespec)]

    class Sigevent(ctypes.Structure):  # the value union, signo, notify, padding to 64 bytes
        _fields_ = [("sigev_value", ctypes.c_void_p), ("sigev_signo", ctypes.c_int),
                    ("sigev_notify", ctypes.c_int), ("_rest", ctypes.c_byte * 48)]

    for name in ("libc.so.6", "librt.so.1"):  # glibc < 2.34 keeps them in librt
        try:
            lib = ctypes.CDLL(name, use_errno=True)
            create, settime = lib.timer_create, lib.timer_settime
        except (OSError, AttributeError):
            continue
        create.argtypes = [ctypes.c_int, ctypes.POINTER(Sigevent),
                           ctypes.POINTER(ctypes.c_void_p)]
        settime.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(Itimerspec),
                            ctypes.c_void_p]
        return create, settime, Sigevent, Itimerspec
    return None


def load() -> bool:
    """Load the C library's timer functions now (the fork server does, once); returns
    whether this system has them."""
    return _functions() is not None


class KillTimer:
    """One POSIX timer of this process that SIGKILLs it when it expires. Made by `create`;
    `arm` and `disarm` cost one system call each."""

    def __init__(self, timer_id: Any, settime: Any, spec: Any) -> None:
        self._id, self._settime, self._spec = timer_id, settime, spec
        self._value = spec.it_value  # a view into `spec`: set per arm, no new object

    @classmethod
    def create(cls) -> KillTimer | None:
        """A disarmed timer of this process (timers are per process: call it in the
        process it must kill); None where the C library has no POSIX timers or the
        kernel refuses one."""
        import ctypes

        functions = _functions()
        if functions is None:
            return None
        create, settime, sigevent, itimerspec = functions
        event = sigevent(sigev_signo=signal.SIGKILL, sigev_notify=_SIGEV_SIGNAL)
        timer_id = ctypes.c_void_p()
        if create(time.CLOCK_MONOTONIC, ctypes.byref(event), ctypes.byref(timer_id)) != 0:
            return None
        return cls(timer_id, settime, itimerspec())

    def arm(self, seconds: float) -> bool:
        """Kill this process `seconds` from now (> 0) unless `disarm` (or another `arm`)
        comes first. Returns False when the kernel refused (a process forked by a handler
        has no such timer)."""
        whole = int(seconds)  # tv_nsec never 0: a value of all zeros disarms
        self._value.tv_sec, self._value.tv_nsec = whole, int((seconds - whole) * 1e9) or 1
        return self._settime(self._id, 0, self._spec, None) == 0

    def disarm(self) -> bool:
        """Cancel the pending kill. Returns False when the kernel refused (see `arm`)."""
        self._value.tv_sec = self._value.tv_nsec = 0
        return self._settime(self._id, 0, self._spec, None) == 0
