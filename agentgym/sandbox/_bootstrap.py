"""The first code that runs inside a sandbox: read the request, lay out its files, run it like ``python -c``.

A request arrives on standard input as ``b"<length>\\n"`` followed by that many bytes of JSON:
``{"code": str, "files": {relative path: base64}, "isolated": bool}``. Whatever follows the
request on standard input is the program's own input, so the same stream serves one-shot runs
(the host writes the input and closes) and interactive ones (the host keeps talking).

Both backends use this module: the local fork server calls :func:`execute` in a forked child of
its warm interpreter (after dropping privileges), and the Docker backend ships this file's source
to ``python -I -c``. It is therefore stdlib-only and self-contained.
"""

from __future__ import annotations

import atexit
import base64
import builtins
import io
import json
import os
import sys
import traceback
import types
from typing import Any, NoReturn

WORKSPACE = "/workspace"
MAX_REQUEST_BYTES = 1 << 30
SETUP_FAILED = 125  # exit status of a sandbox whose request could not be set up
SANDBOX_ENV = {"HOME": WORKSPACE, "LANG": "C.UTF-8", "PYTHONHASHSEED": "0", "USER": "sandbox"}


class RequestError(Exception):
    """The request on standard input is malformed (a host-side bug, never the submitted code)."""


def read_request(fd: int = 0) -> dict[str, Any]:
    """Read one length-prefixed JSON request from ``fd`` without reading past its end."""
    digits = b""
    while not digits.endswith(b"\n"):
        byte = os.read(fd, 1)
        if not byte or len(digits) > 20:
            raise RequestError("request length prefix missing or malformed")
        digits += byte
    try:
        size = int(digits)
    except ValueError:
        raise RequestError("request length prefix is not a number") from None
    if not 0 <= size <= MAX_REQUEST_BYTES:
        raise RequestError(f"request of {size} bytes is out of range")
    chunks, left = [], size
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise RequestError("standard input ended inside the request")
        chunks.append(chunk)
        left -= len(chunk)
    request = json.loads(b"".join(chunks))
    if not isinstance(request, dict) or not isinstance(request.get("code"), str):
        raise RequestError("request must be a JSON object with a string 'code'")
    return request


def write_files(files: dict[str, str], root: str = WORKSPACE) -> None:
    """Write base64-encoded files under ``root``, replacing whatever (link, file) had the name."""
    for relative, encoded in files.items():
        path = os.path.join(root, relative)
        parent = os.path.dirname(path)
        os.makedirs(parent, exist_ok=True)
        if os.path.lexists(path) and not os.path.isdir(path):
            os.unlink(path)  # a link left by earlier code must not redirect the write
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        try:
            # Plain writes, not a file object: in a freshly forked run every new code path costs
            # copy-on-write faults, and the io stack is a long one.
            data = memoryview(base64.b64decode(encoded))
            while data:
                data = data[os.write(fd, data) :]
        finally:
            os.close(fd)


Streams = tuple[io.TextIOWrapper, io.TextIOWrapper, io.TextIOWrapper]


def settle(*, environment: bool = True, streams: Streams | None = None) -> None:
    """Make this process look like ``python -c`` started in the workspace: everything that does not
    depend on the request, so a run prepared ahead of its request has done it already.

    ``environment=False`` leaves the environment variables alone, for a process that inherited
    them from one that called :func:`set_environment` (the local fork server does, once).
    ``streams``: standard streams from :func:`standard_streams` that nothing has read or written
    yet (the local fork server builds them once, for every run); new ones otherwise.
    """
    os.chdir(WORKSPACE)
    if environment:
        set_environment()
    sys.argv = ["-c"]
    # typeshed declares sys.__stdin__ and its siblings Final; replacing them is the point here.
    sys.stdin, sys.stdout, sys.stderr = sys.__stdin__, sys.__stdout__, sys.__stderr__ = streams or standard_streams()  # type: ignore[misc]


def set_environment() -> None:
    """Replace the environment variables with the sandbox's (:data:`SANDBOX_ENV` and ``PATH``)."""
    os.environ.clear()
    os.environ.update(SANDBOX_ENV, PATH=os.path.dirname(sys.executable))


def prepare(request: dict[str, Any]) -> None:
    """Write the request's files and set ``sys.path`` as ``python -c`` (or ``-I``) would."""
    write_files(request.get("files") or {})
    # Like `python -c`, the working directory leads sys.path; isolated runs (`-I`) leave it out so
    # files in the workspace cannot shadow modules.
    base = [p for p in sys.path if p not in ("", WORKSPACE)]
    sys.path[:] = base if request.get("isolated") else ["", *base]


def execute(code: str) -> NoReturn:
    """Run ``code`` as ``__main__`` and exit with its status: 0, the ``SystemExit`` code, or 1
    after an uncaught exception (whose traceback goes to standard error, as Python prints it)."""
    os._exit(_run(code) & 0xFF)


def standard_streams() -> Streams:
    """New stream objects over fds 0-2, as ``python -c`` has them: nothing buffered by another
    process can leak in. A stream caches whether its descriptor can seek when it is built, so
    build them while 0-2 are what the program will have (pipes, in a sandbox)."""
    return (
        io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)), encoding="utf-8", errors="surrogateescape"),
        io.TextIOWrapper(io.BufferedWriter(io.FileIO(1, "w", closefd=False)), encoding="utf-8", errors="surrogateescape"),
        io.TextIOWrapper(io.BufferedWriter(io.FileIO(2, "w", closefd=False)), encoding="utf-8", errors="backslashreplace", line_buffering=True),
    )


def _run(code: str) -> int:
    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = builtins
    sys.modules["__main__"] = main
    try:
        exec(compile(code, "<string>", "exec"), main.__dict__)
        status = 0
    except SystemExit as exc:
        status = _exit_status(exc)
    except BaseException as exc:  # noqa: BLE001 - the interpreter's own behaviour: print the traceback, exit 1
        _print_exception(exc)
        status = 1
    return _finish(status)


def _finish(status: int) -> int:
    # What interpreter shutdown does before exiting: join non-daemon threads, run atexit
    # handlers, flush the streams. A SystemExit raised from any of them is ignored, as CPython does.
    # Like CPython, it looks for threads only if the code imported threading: this module does not
    # import it, because in a fork server's children its at-fork hook costs some forty copy-on-write
    # page faults per run.
    threading = sys.modules.get("threading")
    for step in (getattr(threading, "_shutdown", None), atexit._run_exitfuncs):
        if step is None:
            continue
        try:
            step()
        except BaseException as exc:  # noqa: BLE001 - reported like CPython, never fatal here
            if not isinstance(exc, SystemExit):
                _print_exception(exc)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001 - a closed or broken stream loses its output
            status = status or 120  # CPython's status when flushing stdout fails at exit
    return status


def _exit_status(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    try:
        print(exc.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - an unprintable exit message still means status 1
        pass
    return 1


def _print_exception(exc: BaseException) -> None:
    # Drop this module's frame so the traceback starts at the submitted code, as `python -c` does.
    tb = exc.__traceback__.tb_next if exc.__traceback__ is not None else None
    try:
        traceback.print_exception(type(exc), exc, tb, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - a hostile __str__ must not hide the exit status
        pass


def main() -> NoReturn:
    """Entry point of the Docker backend: limits and user come from the container's settings."""
    try:
        settle()
        request = read_request(0)
        prepare(request)
    except (RequestError, ValueError, OSError) as exc:
        print(f"agentgym sandbox: setup failed: {exc}", file=sys.stderr)
        os._exit(SETUP_FAILED)
    execute(request["code"])
