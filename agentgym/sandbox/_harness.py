"""Grading programs that run inside sandboxes, and the typed value encoding they speak.

Two roles, each a separate sandbox and interpreter, one JSON object per line between them:

- :func:`serve` runs next to the submission. It loads ``solution.py`` as a module, says
  ``{"ready": true}``, then answers call requests ``{"call": name, "args": [...], "kwargs": {...}}``
  with ``{"value": ...}`` or ``{"raised": type name, "message": text, "classes": [...]}``
  (``classes``: the exception's class hierarchy as ``module.qualname``, most derived first).
- :func:`drive` runs assertion-style tests (HumanEval's ``check``, MBPP's asserts) with no
  submitted code in its interpreter: the function under test is a proxy whose calls go to the
  submission's sandbox and whose results come back through :func:`decode` as plain builtin
  values. Each test specification (one input line) ends with ``{"done": true, "passed": n,
  "total": m}``; one driver runs many, each in a fresh namespace. The calls either go through the
  grader on the host, or (local backend) straight to the submission over its standard input and
  output, whose pipe ends the grader passes to the driver for one specification. An exception the function
  raised is raised again in the test's interpreter with its own class when that class is a
  builtin or belongs to a module the test code imported (``statistics.StatisticsError``), else
  as a stand-in class of the same name under its nearest builtin base, so ``except ValueError``
  and ``pytest.raises`` in test code see what an honest solution raised.

Expected values therefore never enter the submission's interpreter, and whatever the
submission returns reaches a comparison only as data: exact builtin types, no user classes, no
``__eq__`` of its choosing. Both roles talk on a private duplicate of the original standard
output; anything the code prints goes to standard error instead.

The host imports this module for :func:`encode`/:func:`decode` and ships its source into the
sandbox (stdlib only, self-contained).
"""

from __future__ import annotations

import base64
import json
import math
import os
import random
import select
import signal
import socket
import sys
import time
import types
from collections.abc import Callable
from typing import Any

MAX_DEPTH = 64
_SCALARS = (type(None), bool, int, str)
_BUILTIN_TYPES = {t.__name__: t for t in (bool, int, float, str, bytes, complex, list, tuple, dict, set, frozenset, object, type)}


class Unencodable(TypeError):
    """A value has a type the encoding does not carry (including subclasses of builtins)."""


def encode(value: Any, depth: int = 0) -> Any:
    """A JSON-ready tree for ``value`` that records exact builtin types.

    ``None``/``bool``/``int``/``str`` stay JSON scalars, ``list`` a JSON array; finite floats
    are ``{"float": repr}``; everything else is a one-key object naming its type: ``tuple``,
    ``dict`` (a list of key/value pairs), ``set``, ``frozenset``, ``bytes`` (base64),
    ``complex``, ``type`` (builtin types by name) or ``object`` (class name and attributes).
    Instances of subclasses of builtins (``Counter``, a namedtuple, an ``int`` whose ``__eq__``
    always says yes) are encoded as their builtin base's data, read through the base type's own
    methods: whatever the subclass overrides never reaches a comparison.
    """
    if depth > MAX_DEPTH:
        raise Unencodable("value nested too deeply")
    if value is None or type(value) is bool:
        return value
    if isinstance(value, int):
        return int.__index__(value)
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, float):
        return {"float": float.__repr__(value)}
    if isinstance(value, list):
        return [encode(v, depth + 1) for v in list.__iter__(value)]
    if isinstance(value, tuple):
        return {"tuple": [encode(v, depth + 1) for v in tuple.__iter__(value)]}
    if isinstance(value, dict):
        return {"dict": [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in dict.items(value)]}
    if isinstance(value, set):
        return {"set": [encode(v, depth + 1) for v in set.__iter__(value)]}
    if isinstance(value, frozenset):
        return {"frozenset": [encode(v, depth + 1) for v in frozenset.__iter__(value)]}
    if isinstance(value, bytes):
        return {"bytes": base64.b64encode(memoryview(value)).decode("ascii")}
    if isinstance(value, complex):
        number = complex.__complex__(value)
        return {"complex": [float.__repr__(number.real), float.__repr__(number.imag)]}
    if isinstance(value, type):
        name = value.__name__
        if _BUILTIN_TYPES.get(name) is value:
            return {"type": name}
        raise Unencodable(f"the class {name} cannot be passed or returned")
    attributes = getattr(value, "__dict__", None)
    if type(attributes) is dict and type(value).__module__ != "builtins":
        return {"object": [type(value).__name__, {k: encode(v, depth + 1) for k, v in attributes.items() if type(k) is str}]}
    raise Unencodable(f"values of type {type(value).__name__} cannot be passed or returned")


def decode(tree: Any, classes: Callable[[str], Any] | None = None, depth: int = 0) -> Any:
    """The value :func:`encode` described, built from builtin types only.

    ``classes`` maps a class name to a class for ``object`` entries; without it (or when it
    returns ``None``) they become :class:`types.SimpleNamespace`.
    """
    if depth > MAX_DEPTH:
        raise ValueError("value nested too deeply")
    if type(tree) in _SCALARS:
        return tree
    if type(tree) is list:
        return [decode(v, classes, depth + 1) for v in tree]
    if type(tree) is not dict or len(tree) != 1:
        raise ValueError(f"malformed encoded value {str(tree)[:80]}")
    ((tag, body),) = tree.items()
    if tag == "float" and type(body) is str:
        return float(body)
    if tag == "tuple" and type(body) is list:
        return tuple(decode(v, classes, depth + 1) for v in body)
    if tag == "dict" and type(body) is list and all(type(p) is list and len(p) == 2 for p in body):
        return {decode(k, classes, depth + 1): decode(v, classes, depth + 1) for k, v in body}
    if tag in ("set", "frozenset") and type(body) is list:
        items = (decode(v, classes, depth + 1) for v in body)
        return set(items) if tag == "set" else frozenset(items)
    if tag == "bytes" and type(body) is str:
        return base64.b64decode(body)
    if tag == "complex" and type(body) is list and len(body) == 2:
        return complex(float(body[0]), float(body[1]))
    if tag == "type" and body in _BUILTIN_TYPES:
        return _BUILTIN_TYPES[body]
    if tag == "object" and type(body) is list and len(body) == 2 and type(body[1]) is dict:
        cls = classes(body[0]) if classes is not None else None
        known: type[object] | None = cls if isinstance(cls, type) else None
        instance = types.SimpleNamespace() if known is None else known.__new__(known)
        for key, item in body[1].items():
            setattr(instance, key, decode(item, classes, depth + 1))
        return instance
    raise ValueError(f"malformed encoded value {str(tree)[:80]}")


# ------------------------------------------------------------------------ the two roles


def _channel() -> tuple[Any, Any]:
    """The protocol's reader and writer; the code's own prints are sent to standard error."""
    reader = os.fdopen(os.dup(0), "r", encoding="utf-8")
    writer = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    return reader, writer


def _say(writer: Any, message: dict[str, Any]) -> None:
    writer.write(json.dumps(message) + "\n")
    writer.flush()


MAX_CLASSES = 16  # entries of an exception's "classes", each at most MAX_CLASS_NAME characters
MAX_CLASS_NAME = 200


def _describe(exc: BaseException) -> dict[str, Any]:
    try:
        text = str(exc)[:500]
    except BaseException:  # noqa: BLE001 - a hostile __str__ still yields a reply
        text = ""
    classes = [f"{c.__module__}.{c.__qualname__}"[:MAX_CLASS_NAME] for c in type(exc).__mro__ if issubclass(c, BaseException)]
    return {"raised": type(exc).__name__, "message": text, "classes": classes[:MAX_CLASSES]}


def well_formed_answer(message: Any) -> dict[str, Any] | None:
    """``message`` if it is a well-formed answer of the submission (a value, or an exception's
    name, text and classes within bounds), else None."""
    if not isinstance(message, dict):
        return None
    if set(message) == {"value"}:
        return message
    if set(message) == {"raised", "message", "classes"} and isinstance(message["raised"], str) and isinstance(message["message"], str):
        classes = message["classes"]
        if isinstance(classes, list) and len(classes) <= MAX_CLASSES and all(isinstance(c, str) and len(c) <= MAX_CLASS_NAME for c in classes):
            return message
    return None


def _exception_like(raised: str, message: str, classes: list[str]) -> Exception:
    """The exception to raise in the test's interpreter for one the submission raised (see the
    module docstring). Only ``Exception`` subclasses: a stand-in for ``SystemExit`` must not stop
    the test driver."""
    for qualified in classes:
        module, _, name = qualified.rpartition(".")
        owner = sys.modules.get(module)  # never imports: only what the test code already loaded
        found = getattr(owner, name, None) if owner is not None and "." not in name else None
        if isinstance(found, type) and issubclass(found, Exception):
            if found.__name__ == raised or module != "builtins":
                try:
                    return found(message)
                except Exception:  # noqa: BLE001 - a class that needs other arguments: its stand-in
                    pass
            return type(raised, (found,), {"__module__": "submission"})(message)  # a stand-in under that base
    return CandidateError(f"{raised}: {message}")


def serve(path: str, names: list[str]) -> None:
    """Load the submission at ``path`` and answer calls to the functions in ``names``."""
    reader, writer = _channel()
    speaker = os.getpid()
    module = types.ModuleType("solution")
    module.__file__ = path
    sys.modules["solution"] = module
    try:
        with open(path, encoding="utf-8") as handle:
            source = handle.read()
        exec(compile(source, path, "exec"), module.__dict__)
    except BaseException as exc:  # noqa: BLE001 - SystemExit too: the submission never became ready
        ready = {"ready": False} | _describe(exc)
    else:
        ready = {"ready": True}
    _speak_alone(speaker)
    _say(writer, ready)
    if not ready["ready"]:
        return
    namespace = module.__dict__
    for line in reader:
        try:
            request = json.loads(line)
            name = request["call"]
            function = namespace.get(name) if name in names else None
            if not callable(function):
                raise NameError(f"the submission defines no function {name!r}")
            args = decode(request.get("args", []), namespace.get)
            kwargs = decode(request.get("kwargs", {"dict": []}), namespace.get)
            reply = {"value": encode(function(*args, **kwargs))}
        except BaseException as exc:  # noqa: BLE001 - whatever the code raises is its answer
            reply = _describe(exc)
        _say(writer, reply)


def _speak_alone(speaker: int) -> None:
    """Make the process that started loading the submission (``speaker``) the only one left.

    Processes the submission forked while loading come back here too (a fork bomb's children
    all do); each would answer calls on the same pipes, so which answer the grader read, and the
    grade, would depend on timing. They exit without a word. Where the harness is pid 1 of the
    run's own pid namespace (the local backend), it also stops everything else the submission
    started, and waits until those processes are gone, so that every call is answered by one
    process in a quiet sandbox, the same way every time.
    """
    if os.getpid() != speaker:
        os._exit(0)
    if speaker != 1:
        return
    try:
        os.kill(-1, signal.SIGKILL)  # every process of this pid namespace but pid 1 itself
    except ProcessLookupError:  # there was none
        return
    while True:  # orphans are re-parented to pid 1, so this waits for all of them
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


class CandidateError(Exception):
    """The function under test raised (in its own sandbox); carries the exception's name."""


def drive(connected: bool = False) -> None:
    """Run test specifications against proxies of the submission's functions, one per input line,
    each in a fresh namespace, until the input ends (one driver serves many gradings).

    ``spec["kind"]`` is ``"check"`` (HumanEval: ``prompt``, ``test``, ``entry_point``; passes
    iff ``check(candidate)`` returns) or ``"asserts"`` (MBPP: ``setup``, ``reference`` for the
    classes the setup needs, ``asserts``, ``names``; one point per assert). Each ends with one
    ``done`` message.

    Calls go out on standard output and their answers come back on standard input, relayed by the
    host; or, when the driver is ``connected`` (a peer socket on descriptor 4) and the spec says
    ``"direct": true``, straight to the submission over the two pipe ends the host passes on that
    socket (the submission's standard input and output), each answer due within the spec's
    ``timeout_s``; ``done`` then also says how many answers came and whether the submission stopped.
    A direct spec arrives while the submission is still loading, so the tests are compiled and set
    up meanwhile; the driver acknowledges it with ``{"ack": true}``, and the pipes follow once the
    submission has loaded (or a message without them if it did not).
    """
    reader, writer = _channel()
    peer = socket.socket(fileno=4) if connected else None
    for line in reader:
        spec = json.loads(line)
        if spec.get("direct") and peer is not None:
            _say(writer, {"ack": True})  # the host passes the pipes only to a driver that is alive
            submission = _Pipes(peer, deadline=time.monotonic() + float(spec["timeout_s"]))
            try:
                _say(writer, _run_spec(spec, submission.ask) | {"answers": submission.answers, "stopped": submission.stopped})
            finally:
                submission.close()
        else:
            _say(writer, _run_spec(spec, _relayed(reader, writer)))


def _relayed(reader: Any, writer: Any) -> Callable[[dict[str, Any]], dict[str, Any] | None]:
    """Calls through the host, which checks each answer before passing it on."""

    def ask(request: dict[str, Any]) -> dict[str, Any] | None:
        _say(writer, request)
        reply = json.loads(reader.readline() or "null")
        return reply if isinstance(reply, dict) else None

    return ask


MAX_ANSWER_BYTES = 8 << 20  # a longer answer line counts as no answer


class Callee:
    """The submission as a caller sees it: one call, one answer, until it gives none (it exited,
    stayed silent past the deadline or broke the protocol); counts the answers. Subclasses say how
    a request travels (:meth:`exchange`): through the host's pipes, or the driver's own."""

    answers = 0
    stopped = False

    def ask(self, request: dict[str, Any]) -> dict[str, Any] | None:
        """Send one call; its well-formed answer, or None once the submission gave none."""
        if self.stopped:
            return None
        try:
            reply = well_formed_answer(self.exchange(request))
        except (OSError, TimeoutError, ValueError, RecursionError):  # RecursionError: JSON nested too deeply
            reply = None
        if reply is None:
            self.stopped = True
        else:
            self.answers += 1
        return reply

    def exchange(self, request: dict[str, Any]) -> Any:
        """Deliver ``request`` and return the decoded reply (raise or return None for no reply)."""
        raise NotImplementedError


class _Pipes(Callee):
    """The submission's standard input and output, talked to directly by the driver. The pipe
    ends come on ``peer`` when the first call needs them (or at :meth:`close`)."""

    def __init__(self, peer: socket.socket, deadline: float):
        self.peer = peer
        self.deadline = deadline
        self.fds: list[int] | None = None  # [to the submission, from the submission] once received
        self.buffer = bytearray()

    def exchange(self, request: dict[str, Any]) -> Any:
        if not self._connected():
            return None  # it never loaded
        self._write((json.dumps(request) + "\n").encode())
        return json.loads(self._line())

    def _connected(self) -> bool:
        if self.fds is None:
            # The host always sends one message per direct spec, so this waits for the submission to
            # load, never longer than the grading.
            _, fds, _, _ = socket.recv_fds(self.peer, 1, 2)
            self.fds = fds if len(fds) == 2 else []
            if len(fds) != 2:
                for fd in fds:
                    os.close(fd)
        return bool(self.fds)

    def _write(self, data: bytes) -> None:
        assert self.fds
        view = memoryview(data)
        while view:
            self._wait(select.POLLOUT, self.fds[0])
            view = view[os.write(self.fds[0], view) :]

    def _line(self) -> bytes:
        assert self.fds
        while b"\n" not in self.buffer:
            if len(self.buffer) > MAX_ANSWER_BYTES:
                raise ValueError("answer too long")
            self._wait(select.POLLIN, self.fds[1])
            chunk = os.read(self.fds[1], 1 << 16)
            if not chunk:
                raise OSError("the submission closed its output")
            self.buffer += chunk
        line, _, rest = bytes(self.buffer).partition(b"\n")
        self.buffer = bytearray(rest)
        return line

    def _wait(self, event: int, fd: int) -> None:
        poller = select.poll()
        poller.register(fd, event)
        left = self.deadline - time.monotonic()
        if left <= 0 or not poller.poll(left * 1000):
            raise TimeoutError("the submission did not answer in time")

    def close(self) -> None:
        self._connected()  # the host's message for this spec is taken even if no call needed it
        for fd in self.fds or ():
            os.close(fd)


_COMPILED: dict[str, types.CodeType] = {}
_MAX_COMPILED = 256


def _compiled(source: str) -> types.CodeType:
    """``source`` compiled once per driver: a GRPO group grades the same task many times over."""
    code = _COMPILED.get(source)
    if code is None:
        if len(_COMPILED) >= _MAX_COMPILED:
            _COMPILED.clear()
        code = _COMPILED[source] = compile(source, "<test>", "exec")
    return code


def _run_spec(spec: dict[str, Any], ask: Callable[[dict[str, Any]], dict[str, Any] | None]) -> dict[str, Any]:
    namespace: dict[str, Any] = {"__name__": "__test__"}
    # Test code that draws random inputs (HumanEval/50, say) draws the same ones in every grading,
    # whatever the driver graded before: the same submission gets the same grade.
    random.seed(0)

    def proxy(name: str) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            reply = ask({"call": name, "args": encode(list(args)), "kwargs": encode(kwargs)})
            if reply is None:
                raise CandidateError("the submission stopped answering")
            if "value" in reply:
                return decode(reply["value"], namespace.get)
            raise _exception_like(str(reply.get("raised")), str(reply.get("message")), reply.get("classes") or [])

        call.__name__ = name
        return call

    passed, total, failures = 0, 1, []
    try:
        if spec["kind"] == "check":
            exec(_compiled(spec["prompt"]), namespace)
            namespace[spec["entry_point"]] = proxy(spec["entry_point"])  # some checks call it by name
            exec(_compiled(spec["test"]), namespace)
            try:
                namespace["check"](proxy(spec["entry_point"]))
                passed = 1
            except Exception as exc:  # noqa: BLE001 - a failed check is a result
                failures.append(f"{type(exc).__name__}: {str(exc)[:200]}")
        else:
            if spec.get("reference"):
                exec(_compiled(spec["reference"]), namespace)
            if spec.get("setup"):
                exec(_compiled(spec["setup"]), namespace)
            for name in spec["names"]:
                namespace[name] = proxy(name)
            total = len(spec["asserts"])
            for index, statement in enumerate(spec["asserts"]):
                try:
                    exec(_compiled(statement), namespace)
                    passed += 1
                except Exception as exc:  # noqa: BLE001 - a failed assert is a result
                    failures.append(f"assert {index}: {type(exc).__name__}: {str(exc)[:200]}")
    except Exception as exc:  # noqa: BLE001 - broken test code fails everything
        passed, failures = 0, [f"test setup failed: {type(exc).__name__}: {str(exc)[:200]}"]
    return {"done": True, "passed": passed, "total": total, "failures": failures[:5]}


def canonical(tree: Any) -> str:
    """A canonical text of an encoded value (for order-free comparison of keys and set items)."""
    return json.dumps(tree, sort_keys=True, separators=(",", ":"))


def same(expected: Any, actual: Any, rel_tol: float = 1e-9, abs_tol: float = 1e-9) -> bool:
    """Whether two encoded values are equal: exact types, dicts and sets in any order, floats
    within a tolerance (NaN equals NaN). Works on the encoded trees, so nothing the submission
    returned is ever turned back into an object on the host."""
    if type(expected) is not type(actual):
        return False
    if type(expected) is list:
        return len(expected) == len(actual) and all(same(e, a, rel_tol, abs_tol) for e, a in zip(expected, actual, strict=False))
    if type(expected) is not dict:
        return bool(expected == actual)
    if len(expected) != 1 or expected.keys() != actual.keys():
        return False
    ((tag, want),) = expected.items()
    got = actual[tag]
    if tag == "float":
        return _close(want, got, rel_tol, abs_tol)
    if tag == "complex":
        return type(got) is list and len(got) == 2 and all(_close(w, g, rel_tol, abs_tol) for w, g in zip(want, got, strict=False))
    if tag == "tuple":
        return same(want, got, rel_tol, abs_tol)
    if tag in ("set", "frozenset"):
        return type(got) is list and sorted(map(canonical, want)) == sorted(map(canonical, got))
    if tag == "dict":
        if type(got) is not list or not all(type(p) is list and len(p) == 2 for p in got) or len(want) != len(got):
            return False
        by_key = {canonical(k): v for k, v in got}
        return len(by_key) == len(got) and all(canonical(k) in by_key and same(v, by_key[canonical(k)], rel_tol, abs_tol) for k, v in want)
    return canonical(want) == canonical(got)  # bytes, objects: exact


def _close(want: Any, got: Any, rel_tol: float, abs_tol: float) -> bool:
    if type(want) is not str or type(got) is not str:
        return False
    try:
        x, y = float(want), float(got)
    except ValueError:
        return False
    return (math.isnan(x) and math.isnan(y)) or math.isclose(x, y, rel_tol=rel_tol, abs_tol=abs_tol)
