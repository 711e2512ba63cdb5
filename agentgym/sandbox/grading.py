"""Grading submitted code against hidden tests, in a way the submission cannot fool.

The submission runs in a fresh sandbox workspace holding only grader-written files, started
like ``python -I`` (nothing in the workspace can shadow a module), under the role
``serve`` of :mod:`agentgym.sandbox._harness`: it only ever receives the *inputs* of the tests.
Its answers come back as typed JSON, and:

- function tests (:class:`FunctionTests`) are compared on the host with
  :func:`agentgym.sandbox._harness.same`: exact builtin types, floats within 1e-9;
- assertion tests (:class:`CheckTests` for HumanEval, :class:`AssertTests` for MBPP) run in a
  second sandbox that holds the test code but never the submission, calling it by proxy. That
  test driver runs only trusted test code and sees submissions only as encoded data, so a
  grader keeps its drivers and reuses them (each test specification in a fresh namespace): a
  grading starts one sandbox, the submission's, which is always new. On the local backend the
  driver calls the submission directly: the grader passes it the submission's standard input and
  output for that grading (descriptors over a socket), and the driver checks every answer as the
  grader would; elsewhere the grader relays each call and answer.

Neither the submission's exit status nor anything it prints counts; every test needs its own
answer. The score is the fraction of tests passed, in [0, 1]; a submission that crashes, exits
or times out before any test runs (while loading, or on the very first call, before giving a
single answer) scores -1.

Grading fails closed: when grading itself fails, for whatever reason (a sandbox that cannot
start, output the protocol cannot carry), the submission scores 0 like a wrong one, with one
fixed reason. The words never depend on what went wrong, so a submission cannot steer them with
the hidden inputs it receives.

One cause is told apart, from what the host saw of the backend alone: when the backend's machinery
failed during the grading (the local fork server stopped, or no backend can run), the grade also
says so in :attr:`Grade.infra_error`, so that the episode is not scored as the model's failure.
Nothing a submission does inside its sandbox can stop the fork server (see docs/security.md), so
a submission that breaks its own grading (kills itself, exhausts its limits, attacks the harness)
stays a failed one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import socket
import threading
import time
import weakref
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, NamedTuple

from agentgym.sandbox._harness import Callee, encode, same
from agentgym.sandbox.backend import Backend, SandboxProcess
from agentgym.sandbox.limits import Limits
from agentgym.sandbox.result import SandboxError, SandboxLost
from agentgym.sandbox.sandbox import Sandbox, get_backend

__all__ = ["CRASH_SCORE", "GRADING_FAILED", "GRADING_LIMITS", "AssertTests", "CheckTests", "FunctionTests", "Grade", "Grader", "IOCase", "TestSpec"]

CRASH_SCORE = -1.0
GRADING_FAILED = "the submission could not be graded, so it counts as failed"
GRADING_LIMITS = Limits(wall_time_s=10.0, cpu_time_s=10, max_output_bytes=8 << 20)
_HARNESS = (resources.files("agentgym.sandbox") / "_harness.py").read_text(encoding="utf-8")
_SOLUTION = "solution.py"


@dataclass(frozen=True)
class IOCase:
    """One hidden test of a function: encoded positional arguments and the encoded expected
    value (see :func:`agentgym.sandbox._harness.encode`), or ``{"raises": "ValueError"}``."""

    args: list[Any]
    expected: Any

    @classmethod
    def of(cls, args: Sequence[Any], expected: Any) -> IOCase:
        """A case from plain values; ``expected`` may be an exception class the call must raise."""
        if isinstance(expected, type) and issubclass(expected, BaseException):
            return cls(encode(list(args)), {"raises": expected.__name__})
        return cls(encode(list(args)), encode(expected))


@dataclass(frozen=True)
class FunctionTests:
    """Call ``entry_point`` with each case's arguments; one point per matching answer."""

    entry_point: str
    cases: tuple[IOCase, ...]

    @property
    def names(self) -> list[str]:
        return [self.entry_point]


@dataclass(frozen=True)
class CheckTests:
    """HumanEval's format: ``test`` defines ``check(candidate)``; one point iff it passes.

    ``prompt`` (trusted dataset text) is executed first in the test's sandbox, so helpers it
    defines (``poly``, ``encode_cyclic``...) come from the dataset, not from the submission.
    """

    prompt: str
    test: str
    entry_point: str

    @property
    def names(self) -> list[str]:
        return [self.entry_point]


@dataclass(frozen=True)
class AssertTests:
    """MBPP's format: one point per assert statement, each calling functions in ``names``.

    ``setup`` runs before the asserts; ``reference`` (trusted dataset code) runs before that so
    the setup can use classes it defines.
    """

    asserts: tuple[str, ...]
    names: tuple[str, ...]
    setup: str = ""
    reference: str = ""


TestSpec = FunctionTests | CheckTests | AssertTests


@dataclass(frozen=True)
class Grade:
    """A graded submission.

    Attributes:
        score: ``passed / total`` in [0, 1], or -1 when no test ran (see ``crashed``).
        passed: tests passed.
        total: tests in the specification.
        crashed: the submission crashed, exited or timed out before any test ran.
        reason: one sentence for people; never quotes hidden test data.
        details: failure notes and the submission's standard error tail (for logs, not for the model).
        infra_error: set when the backend's machinery failed during the grading (what failed); the
            grade is then a failed grading (score 0, ``GRADING_FAILED``) that says nothing about
            the submission. None otherwise.
    """

    score: float
    passed: int
    total: int
    crashed: bool
    reason: str
    details: dict[str, Any] = field(default_factory=dict)
    infra_error: str | None = None


class Grader:
    """Grades submissions in sandboxes of ``backend`` under ``limits`` (per sandbox).

    Safe to use from several threads. Keeps idle test drivers between gradings, and sandboxes for
    the next submissions, prepared while the current one is graded; background threads prepare
    those sandboxes and end each graded submission, so neither waits on the grading's path.
    :meth:`close` (or the end of a ``with`` block, or garbage collection) waits for those threads
    and stops the drivers and the prepared sandboxes.
    """

    def __init__(self, backend: str | Backend = "auto", limits: Limits = GRADING_LIMITS):
        self.backend = backend
        self.limits = limits
        self._drivers = _Drivers(backend, limits)
        self._chores = _Chores(_SPARES)
        self._finalizer = weakref.finalize(self, _close, self._chores, self._drivers)

    def close(self) -> None:
        """Finish the background work, then stop the idle test drivers and the prepared sandboxes
        (a later grading starts new ones)."""
        _close(self._chores, self._drivers)

    def __enter__(self) -> Grader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def grade(self, code: str, tests: TestSpec) -> Grade:
        """Grade ``code`` (a module's source) against ``tests``."""
        if not isinstance(code, str):
            raise TypeError(f"code must be a str; got {type(code).__name__}")
        total = len(tests.cases) if isinstance(tests, FunctionTests) else len(tests.asserts) if isinstance(tests, AssertTests) else 1
        try:
            backend = self.backend if isinstance(self.backend, Backend) else get_backend(self.backend)
            generation = backend.generation()
        except SandboxError as exc:  # no backend can run: the machinery's failure
            return Grade(0.0, 0, total, False, GRADING_FAILED, {"error": str(exc)}, infra_error=str(exc))
        try:
            grade = self._grade(code, tests, total)
        except Exception as exc:  # noqa: BLE001 - fail closed, in words that do not depend on the failure (see the module docstring)
            infra = str(exc) if isinstance(exc, SandboxLost) else None
            grade = Grade(0.0, 0, total, False, GRADING_FAILED, {"error": f"{type(exc).__name__}: {exc}"}, infra_error=infra)
        if backend.generation() != generation:  # whatever the grading saw, its sandboxes died under it
            return Grade(0.0, 0, total, False, GRADING_FAILED, grade.details, infra_error="the sandbox's fork server stopped during the grading")
        return grade

    def _grade(self, code: str, tests: TestSpec, total: int) -> Grade:
        with contextlib.ExitStack() as stack:
            # A new sandbox for every submission; a prepared one has only set up its isolation.
            box = stack.enter_context(self._chores.take_spare() or Sandbox(self.backend, self.limits))
            process = box.start(_program(box.backend, "serve", _SOLUTION, list(tests.names)), files={_SOLUTION: code}, isolated=True)
            stack.callback(process.kill)
            self._chores.prepare_spares(self.backend, self.limits)  # while this submission loads
            deadline = time.monotonic() + self.limits.wall_time_s + 1.0
            submission = _Submission(process, deadline)
            driving = None if isinstance(tests, FunctionTests) else self._begin_drive(tests, deadline)
            passed = 0
            notes: list[str] = []
            try:
                ready = submission.message()
            except BaseException:
                if driving is not None:  # a driver holding the specification waits for the submission's pipes
                    self._drivers.give_back(driving.driver, healthy=False)
                raise
            loaded = bool(ready and ready.get("ready") is True)
            if driving is not None:
                passed, total, notes = self._drive(driving, submission, loaded, total)
            elif loaded and isinstance(tests, FunctionTests):
                passed, notes = _run_cases(submission, tests)
            if loaded and not submission.stopped:
                # It answered every call, so everything it wrote to standard error before its last
                # answer has been read; stopping it and deleting its workspace happen off this path.
                stderr = process.stderr_so_far()[-2000:]
                self._chores.finish(box, process, stack.pop_all())
            else:
                process.kill()
                stderr = process.wait().stderr[-2000:]
        if not loaded:
            raised = ready.get("raised") if ready else None
            what = f"{raised}: {str(ready.get('message', ''))[:200]}" if ready and isinstance(raised, str) else "it exited or timed out while loading"
            return Grade(CRASH_SCORE, 0, total, True, f"the submission crashed before any test ran ({what})", {"stderr_tail": stderr})
        if submission.stopped and submission.answers == 0:
            # Dying on the first call scores like dying while loading, so printing a fake
            # "ready" line before crashing gains nothing.
            reason = "the submission crashed, exited or timed out before answering any test"
            return Grade(CRASH_SCORE, 0, total, True, reason, {"stderr_tail": stderr})
        reason = f"{passed} of {total} hidden tests passed"
        return Grade(passed / total if total else 0.0, passed, total, False, reason, {"notes": notes, "stderr_tail": stderr})

    def _begin_drive(self, tests: CheckTests | AssertTests, deadline: float) -> _Driving:
        driving = _Driving(self._drivers.take(), _driver_spec(tests), deadline, time.monotonic())
        if driving.driver.peer is not None:
            try:
                driving.sent = driving.driver.send_spec(driving.spec, deadline)
            except BaseException:
                self._drivers.give_back(driving.driver, healthy=False)
                raise
        return driving

    def _drive(self, driving: _Driving, submission: _Submission, loaded: bool, total: int) -> tuple[int, int, list[str]]:
        """Finish ``driving`` once the submission has loaded (or failed to): a connected driver calls
        it directly, other drivers through this process. (passed, total, notes)."""
        driver, healthy = driving.driver, False
        try:
            if not loaded:  # nothing to test; a driver holding the specification is told so
                if driver.peer is None:
                    healthy = True  # a relaying driver has not been sent anything yet
                elif driving.sent and driver.connect(None, driving.deadline):
                    verdict = driver.verdict(driving.deadline, submission)
                    healthy = verdict is not None and verdict.get("done") is True
                return 0, total, []

            def connected(driver: _Driver) -> bool:  # a relaying driver needs no pipes
                return driver.peer is None or driver.connect(submission.pipes(), driving.deadline)

            # A connected driver has its specification already (unless sending it failed); a relaying
            # driver gets it now.
            sent = driving.sent if driver.peer is not None else driver.send_spec(driving.spec, driving.deadline)
            started = sent and connected(driver)
            if not started and driver.gradings > 0:
                # A reused driver that died while idle (its backend restarted, say) has asked the
                # submission nothing yet: the grading goes on with a new one.
                self._drivers.give_back(driver, healthy=False)
                driver = driving.driver = self._drivers.take(new=True)
                started = driver.send_spec(driving.spec, driving.deadline) and connected(driver)
            direct = driver.peer is not None
            if not started:
                return 0, total, ["the test driver could not start (broken sandbox backend)"]
            if direct:
                first = driver.verdict(driving.deadline, submission)
            else:
                first = _message(driver.process, driving.deadline)
            result, healthy = _run_driver(submission, driver.process, first, total, driving.deadline, direct=direct)
            return result
        finally:
            driver.gradings += 1
            driver.busy_seconds += time.monotonic() - driving.started
            self._drivers.give_back(driver, healthy=healthy)


def _driver_spec(tests: CheckTests | AssertTests) -> dict[str, Any]:
    if isinstance(tests, CheckTests):
        return {"kind": "check", "prompt": tests.prompt, "test": tests.test, "entry_point": tests.entry_point}
    return {"kind": "asserts", "asserts": list(tests.asserts), "names": list(tests.names), "setup": tests.setup, "reference": tests.reference}


def _close(chores: _Chores, drivers: _Drivers) -> None:
    chores.close()
    drivers.close()


class _Chores:
    """A grader's background threads: one prepares the next submissions' sandboxes, the other ends
    graded submissions (kill, reap, delete the workspace); each does its jobs in the order asked.
    Two lanes, so that preparing the next sandbox never waits behind ending the last one."""

    def __init__(self, most_spares: int) -> None:
        self._lock = threading.Lock()
        self._lanes: dict[str, ThreadPoolExecutor] = {}
        self._pid = os.getpid()
        self._spares: deque[Future[_Spare | None]] = deque()  # oldest first
        self._most = most_spares
        self._wanted = 1
        self._waiting = 0  # graded submissions handed over to be ended, not yet being ended
        self._idle_priority_box: Sandbox | None = None  # the one being ended on idle CPU time, if any

    def take_spare(self) -> Sandbox | None:
        """The oldest prepared sandbox (waiting for it if it is still being prepared), or None; one
        whose backend's machinery stopped since it was prepared is closed instead (it is lost).

        How many are kept ahead follows the pace of gradings: one more (up to the most) each time
        a grading has to wait for its sandbox; back to one when a sandbox waited long for its
        grading."""
        self._forget_after_fork()
        with self._lock:
            future = self._spares.popleft() if self._spares else None
        if future is None:
            return None
        if not future.done():
            with self._lock:
                self._wanted = min(self._most, self._wanted + 1)
        spare = future.result()
        if spare is None:
            return None
        if spare.box.backend.generation() != spare.generation:
            _close_spare(future)
            return None
        if time.monotonic() - spare.ready_at > _SPARE_IDLE_S:
            with self._lock:
                self._wanted = 1
        return spare.box

    def prepare_spares(self, backend: str | Backend, limits: Limits) -> None:
        """Prepare sandboxes for the next submissions in the background, as many as are missing."""

        def prepare() -> _Spare | None:
            try:
                box = Sandbox(backend, limits)
            except SandboxError:
                return None  # the next grading makes its own sandbox
            generation = box.backend.generation()
            try:
                box.prepare()
            except SandboxError:
                box.close()
                return None
            return _Spare(box, time.monotonic(), generation)

        self._forget_after_fork()
        with self._lock:  # counted and queued at once, so threads grading together add no extra
            lane = self._lane("prepare")
            while len(self._spares) < self._wanted:
                try:
                    self._spares.append(lane.submit(prepare))
                except RuntimeError:  # closed meanwhile: the next grading makes its own sandbox
                    return

    def finish(self, box: Sandbox, process: SandboxProcess, cleanup: contextlib.ExitStack) -> None:
        """Kill ``process`` (of ``box``), reap it and run ``cleanup`` (its sandbox's close) in the
        background; on idle CPU time while the ends asked for keep up."""

        def end() -> None:
            with self._lock:
                self._waiting -= 1
                # Tearing down a run's memory costs about a millisecond of CPU, which the next
                # grading needs more: the kernel does it on idle CPU time, unless another graded
                # submission already waits to be ended behind this one.
                if self._waiting == 0:
                    with contextlib.suppress(Exception):  # best effort
                        box.set_idle_priority(True)
                    self._idle_priority_box = box
            with contextlib.suppress(Exception):  # a backend that died has stopped everything already
                process.kill()
                process.wait()
            with self._lock:
                if self._idle_priority_box is box:
                    self._idle_priority_box = None
            with contextlib.suppress(Exception):
                cleanup.close()

        self._forget_after_fork()
        with self._lock:
            lane = self._lane("finish")
            self._waiting += 1
            # Two submissions wait behind the one being torn down on idle time: idle time is too
            # scarce, and it goes back to its usual share, so that graded submissions never pile up.
            if self._idle_priority_box is not None and self._waiting >= 2:
                with contextlib.suppress(Exception):
                    self._idle_priority_box.set_idle_priority(False)
                self._idle_priority_box = None
        try:
            lane.submit(end)
        except RuntimeError:  # closed meanwhile: the caller does the work itself
            end()

    def close(self) -> None:
        """Run the jobs asked for so far, close the prepared sandboxes and stop the threads."""
        self._forget_after_fork()
        with self._lock:
            lanes, self._lanes = self._lanes, {}
            spares, self._spares = self._spares, deque()
        for spare in spares:
            try:
                lanes["prepare"].submit(_close_spare, spare)  # after the job preparing it
            except (KeyError, RuntimeError):  # at interpreter exit the lanes have done their jobs and stopped
                if spare.done():
                    _close_spare(spare)
        # Garbage collection may close a grader from a chores thread, which must not wait for itself.
        wait = not threading.current_thread().name.startswith(_CHORES_THREAD)
        for lane in lanes.values():
            lane.shutdown(wait=wait)

    def _lane(self, name: str) -> ThreadPoolExecutor:
        # The caller holds the lock.
        if name not in self._lanes:
            self._lanes[name] = ThreadPoolExecutor(1, thread_name_prefix=f"{_CHORES_THREAD}-{name}")
        return self._lanes[name]

    def _forget_after_fork(self) -> None:
        # A forked child has none of its parent's threads (their jobs would never run there), and
        # the parent's spares belong to the parent's fork server: drop them without closing anything.
        # The lock may have been held by another thread at fork time, so the child gets a new one.
        if self._pid != os.getpid():
            self._pid, self._lanes, self._lock = os.getpid(), {}, threading.Lock()
            self._waiting, self._idle_priority_box = 0, None
            spares, self._spares = self._spares, deque()
            for future in spares:
                if future.done() and (spare := future.result()) is not None:
                    spare.box.abandon()


_CHORES_THREAD = "agentgym-grader"


class _Spare(NamedTuple):
    """A prepared submission sandbox."""

    box: Sandbox
    ready_at: float  # time.monotonic() when its run was prepared
    generation: int  # its backend's (Backend.generation) when its workspace opened


def _close_spare(future: Future[_Spare | None]) -> None:
    with contextlib.suppress(Exception):
        spare = future.result()
        if spare is not None:
            spare.box.close()


# Submission sandboxes kept prepared ahead, at most. Setting one up takes longer than grading a
# quick submission (mostly waiting for a core the current grading uses): graded back to back,
# with one kept ahead 62 % of HumanEval gradings still waited for theirs, and three graded 7-11 %
# more tasks per second than one (docs/envs/code_exec.md). Each costs an idle process and a
# workspace, so a grader keeps more than one only while its gradings come back to back.
_SPARES = 3
_SPARE_IDLE_S = 1.0  # a spare that waited this long for its grading: one ahead is enough


# A driver retires after this many gradings or busy seconds (which also bound its CPU seconds),
# or when it nears its sandbox's wall-time limit, long before any limit could stop it mid-grading.
_DRIVER_GRADINGS = 500
_DRIVER_BUSY_SECONDS = 300.0
_DRIVER_LIFETIME_S = 3600.0


@dataclass
class _Driver:
    box: Sandbox
    process: SandboxProcess
    peer: socket.socket | None  # where it receives submissions' pipes, when its backend can pass them
    started: float
    generation: int  # its backend's (Backend.generation) when it started
    gradings: int = 0
    busy_seconds: float = 0.0

    def send_spec(self, spec: dict[str, Any], deadline: float) -> bool:
        """Hand the driver ``spec``; a connected driver is told to call the submission directly and
        to give up on it before the grading's deadline. False if the driver does not take it."""
        if self.peer is not None:
            # The driver's own deadline comes first, so that a silent submission ends in a verdict.
            spec = spec | {"direct": True, "timeout_s": max(0.0, deadline - time.monotonic() - _DIRECT_MARGIN_S)}
        try:
            self.process.send(_line(spec), timeout=max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            return False
        return True

    def connect(self, pipes: tuple[int, int] | None, deadline: float) -> bool:
        """Pass a connected driver, once it has acknowledged its specification, the submission's
        pipes, or none if there is no submission to call (it did not load). False if the driver is
        gone (a driver that dies while idle is found out here, before it could ask anything)."""
        assert self.peer is not None
        if _message(self.process, deadline) != {"ack": True}:
            return False
        try:
            socket.send_fds(self.peer, [b"p"], list(pipes or ()))
        except OSError:
            return False
        return True

    def verdict(self, deadline: float, submission: _Submission) -> dict[str, Any] | None:
        """A connected driver's verdict; meanwhile the submission's standard error is drained, so
        that what it prints cannot fill its pipe and stall it."""
        while True:
            try:
                return _message(self.process, min(deadline, time.monotonic() + _STDERR_DRAIN_S), patient=False)
            except TimeoutError:
                submission.process.stderr_so_far()  # everything in the pipe, so it never stays full
                if time.monotonic() >= deadline:
                    return None

    def stop(self) -> None:
        with contextlib.suppress(Exception):  # a driver whose backend is gone is stopped already
            self.process.kill()
            self.process.wait()
        if self.peer is not None:
            self.peer.close()
        self.box.close()

    def abandon(self) -> None:
        """In a forked child: close this process's copies of the driver's descriptors, nothing more."""
        if self.peer is not None:
            self.peer.close()
        self.box.abandon()


@dataclass
class _Driving:
    """A test specification and the driver running it, from before the submission has loaded: a
    connected driver gets the specification at once and prepares the tests meanwhile."""

    driver: _Driver
    spec: dict[str, Any]
    deadline: float
    started: float
    sent: bool = False


# A directly connected driver stops waiting for answers this long before the grading's deadline,
# and meanwhile the grader drains the submission's standard error this often.
_DIRECT_MARGIN_S = 0.5
_STDERR_DRAIN_S = 0.005


class _Drivers:
    """A grader's idle test drivers: sandboxes running the harness's ``drive`` loop."""

    def __init__(self, backend: str | Backend, limits: Limits):
        self.backend = backend
        self.grading_wall_s = limits.wall_time_s
        # One driver serves many gradings, each under the grader's wall-time deadline on the host.
        self.limits = dataclasses.replace(limits, wall_time_s=_DRIVER_LIFETIME_S, cpu_time_s=int(_DRIVER_BUSY_SECONDS) + int(limits.cpu_time_s) + 1)
        self.idle: list[_Driver] = []
        self.lock = threading.Lock()
        self.pid = os.getpid()

    def forget_after_fork(self) -> None:
        """In a forked child: drop the parent's drivers (they serve the parent) without stopping them."""
        if self.pid != os.getpid():
            idle, self.idle, self.lock, self.pid = self.idle, [], threading.Lock(), os.getpid()
            for driver in idle:
                driver.abandon()

    def take(self, *, new: bool = False) -> _Driver:
        self.forget_after_fork()
        while not new:
            with self.lock:
                driver = self.idle.pop() if self.idle else None
            if driver is None:
                break
            if driver.box.backend.generation() == driver.generation:
                return driver
            driver.stop()  # its backend's machinery stopped meanwhile, and the driver with it
        box = Sandbox(self.backend, self.limits)
        generation = box.backend.generation()
        host_end, driver_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            try:
                process = box.start(_program(box.backend, "drive", True), isolated=True, peer=driver_end)
                peer: socket.socket | None = host_end
            except NotImplementedError:  # a backend that cannot pass descriptors: calls are relayed
                process, peer = box.start(_program(box.backend, "drive"), isolated=True), None
                host_end.close()
        except BaseException:
            host_end.close()
            box.close()
            raise
        finally:
            driver_end.close()
        return _Driver(box, process, peer, time.monotonic(), generation)

    def give_back(self, driver: _Driver, *, healthy: bool) -> None:
        retire = (
            driver.gradings >= _DRIVER_GRADINGS
            or driver.busy_seconds >= _DRIVER_BUSY_SECONDS
            or time.monotonic() - driver.started > _DRIVER_LIFETIME_S - 2 * self.grading_wall_s - 60
        )
        if healthy and not retire:
            with self.lock:
                self.idle.append(driver)
        else:
            driver.stop()

    def close(self) -> None:
        self.forget_after_fork()
        with self.lock:
            idle, self.idle = self.idle, []
        for driver in idle:
            driver.stop()


def _run_driver(
    submission: _Submission, driver: SandboxProcess, first: dict[str, Any] | None, total: int, deadline: float, *, direct: bool
) -> tuple[tuple[int, int, list[str]], bool]:
    """Relay the driver's calls to the submission (none when it calls the submission directly) until
    its verdict: ((passed, total, notes), whether the driver can serve another grading)."""
    message = first
    try:
        while True:
            if message is None:
                return (0, total, ["the test driver stopped (too slow, or broken test code)"]), False
            if message.get("done") is True:
                passed, count = message.get("passed"), message.get("total")
                if type(passed) is not int or type(count) is not int or not 0 <= passed <= count:
                    return (0, total, ["malformed verdict from the test driver"]), False
                if direct:
                    answers, stopped = message.get("answers"), message.get("stopped")
                    if type(answers) is not int or type(stopped) is not bool:
                        return (0, total, ["malformed verdict from the test driver"]), False
                    submission.answers, submission.stopped = answers, stopped
                return (passed, count, [str(n) for n in message.get("failures", [])][:5]), True
            if direct:
                return (0, total, ["malformed verdict from the test driver"]), False
            reply = submission.ask(message) if isinstance(message.get("call"), str) else None
            if reply is None:
                reply = {"raised": "SubmissionStopped", "message": "the submission crashed, exited or timed out", "classes": []}
            driver.send(_line(reply), timeout=max(0.0, deadline - time.monotonic()))
            message = _message(driver, deadline)
    except TimeoutError:
        return (0, total, ["the test driver stopped reading (timed out)"]), False


class _Submission(Callee):
    """The grader's end of the submission's sandbox."""

    def __init__(self, process: SandboxProcess, deadline: float):
        self.process = process
        self.deadline = deadline

    def message(self) -> dict[str, Any] | None:
        return _message(self.process, self.deadline)

    def pipes(self) -> tuple[int, int] | None:
        """The submission's standard input and output for a driver to call it directly, or None
        (a backend without such pipes, or a submission that has ended)."""
        try:
            return self.process.pipes()
        except (NotImplementedError, SandboxError):
            return None

    def exchange(self, request: dict[str, Any]) -> dict[str, Any] | None:
        self.process.send(_line(request), timeout=max(0.0, self.deadline - time.monotonic()))  # TimeoutError: it stopped reading
        return self.message()


def _run_cases(submission: _Submission, tests: FunctionTests) -> tuple[int, list[str]]:
    passed, notes = 0, []
    for index, case in enumerate(tests.cases):
        reply = submission.ask({"call": tests.entry_point, "args": case.args})
        if reply is None:
            notes.append(f"case {index}: no answer (crashed, exited or timed out)")
            break  # the remaining cases have no answer either
        expected = case.expected
        if isinstance(expected, dict) and set(expected) == {"raises"}:
            # The expected exception or a subclass of it, as ``except`` would catch it.
            ok = "raised" in reply and expected["raises"] in {c.rpartition(".")[2] for c in reply["classes"]}
        else:
            ok = "value" in reply and same(expected, reply["value"])
        if ok:
            passed += 1
        else:
            notes.append(f"case {index}: {'raised ' + str(reply['raised']) if 'raised' in reply else 'wrong answer'}")
    return passed, notes


# The harness's module name in a sandbox. Backends that list it in ``Backend.preloaded`` (the local
# one: its fork server loads the harness once) get a program that only looks it up; the others start a
# fresh interpreter, which compiles the shipped source (some 20 kB, about 0.4 ms in a run).
_HARNESS_MODULE = "agentgym_sandbox__harness"


def _program(backend: Backend, role: str, *args: Any) -> str:
    # repr() of str/list/dict/int/bool is a valid Python literal.
    call = f"harness.{role}(*{args!r})\n"
    if _HARNESS_MODULE in backend.preloaded:
        return f"import sys\nharness = sys.modules[{_HARNESS_MODULE!r}]\n" + call
    return (
        f"import sys, types\nharness = types.ModuleType({_HARNESS_MODULE!r})\nsys.modules[harness.__name__] = harness\n"
        f"exec(compile({_HARNESS!r}, 'harness', 'exec'), harness.__dict__)\n" + call
    )


def _line(message: dict[str, Any]) -> bytes:
    return json.dumps(message).encode() + b"\n"


def _message(process: SandboxProcess, deadline: float, *, patient: bool = True) -> dict[str, Any] | None:
    """The next protocol message, or None on end of output or anything malformed; on timeout None,
    or ``TimeoutError`` if not ``patient``."""
    try:
        line = process.readline(timeout=max(0.0, deadline - time.monotonic()))
    except TimeoutError:
        if patient:
            return None
        raise
    if not line.endswith(b"\n"):
        return None
    try:
        message = json.loads(line)
    except (ValueError, RecursionError):  # RecursionError: nested too deeply
        return None
    return message if isinstance(message, dict) else None
