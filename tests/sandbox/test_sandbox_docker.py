"""The Docker backend against a fake Docker client (this machine has no daemon): container
settings, the exec stream's framing, exit codes, and cleanup of what a run leaves behind."""

import socket as sockets
import struct
import threading

import pytest

pytest.importorskip("docker")

from agentgym.sandbox import Limits, Sandbox  # noqa: E402
from agentgym.sandbox.docker import DockerBackend  # noqa: E402


class FakeContainer:
    def __init__(self, settings):
        self.id = "c0ffee"
        self.settings = settings
        self.exec_runs = []
        self.removed = False

    def exec_run(self, cmd, user=None):
        self.exec_runs.append((cmd, user))

    def remove(self, force=False):
        self.removed = force


class FakeAPI:
    """``docker exec`` of a program that reports what it read, on stdout and stderr frames."""

    def __init__(self, exit_code):
        self.exit_code = exit_code
        self.commands = []

    def exec_create(self, container, cmd, **kwargs):
        self.commands.append((cmd, kwargs))
        return {"Id": "e1"}

    def exec_start(self, exec_id, socket=False):
        host, daemon = sockets.socketpair()
        threading.Thread(target=self._program, args=(daemon,), daemon=True).start()
        return host

    def _program(self, daemon):
        received = b""
        while chunk := daemon.recv(65536):
            received += chunk
        for stream, payload in ((1, b"read %d bytes\n" % len(received)), (2, b"warning\n"), (1, b"done\n")):
            daemon.sendall(struct.pack(">BxxxI", stream, len(payload)) + payload)
        daemon.close()

    def exec_inspect(self, exec_id):
        return {"ExitCode": self.exit_code, "Running": False}


class FakeClient:
    def __init__(self, exit_code=3):
        self.api = FakeAPI(exit_code)
        self.containers = self
        self.images = self
        self.created = []

    def ping(self):
        return True

    def get(self, image):
        return image

    def run(self, image, **settings):
        container = FakeContainer(settings)
        self.created.append((image, container))
        return container


def test_containers_are_locked_down():
    client = FakeClient()
    backend = DockerBackend(client=client)
    limits = Limits(memory_bytes=512 << 20, max_processes=32)
    with Sandbox(backend, limits):
        image, container = client.created[0]
    settings = container.settings
    assert image == "python:3.11-slim"
    assert settings["network_mode"] == "none" and settings["read_only"] is True
    assert settings["cap_drop"] == ["ALL"] and settings["security_opt"] == ["no-new-privileges"]
    assert settings["user"] == "65534:65534" and settings["environment"] == {}
    assert settings["mem_limit"] == 512 << 20 and settings["pids_limit"] == 32
    assert set(settings["tmpfs"]) == {"/workspace", "/tmp"}
    assert {u["Name"] for u in settings["ulimits"]} == {"cpu", "fsize", "nofile", "core"}
    assert container.removed  # closing the sandbox removes its container


def test_a_run_streams_frames_and_cleans_up():
    client = FakeClient(exit_code=3)
    with Sandbox(DockerBackend(client=client), Limits(wall_time_s=5)) as box:
        result = box.run("print(1)", stdin="input")
        container = client.created[0][1]
    command, options = client.api.commands[0]
    assert command[:4] == ["timeout", "-s", "KILL", "5"] and command[4:7] == ["python", "-I", "-c"]
    assert "def read_request" in command[7] and options["user"] == "65534:65534"
    assert result.stdout.startswith("read ") and result.stdout.endswith(" bytes\ndone\n") and result.stderr == "warning\n"
    assert result.returncode == 3 and not result.timed_out
    assert container.exec_runs == [(["kill", "-9", "-1"], "65534:65534")]  # leftovers of the run


def test_signal_exit_codes_map_to_negative_returncodes():
    with Sandbox(DockerBackend(client=FakeClient(exit_code=137)), Limits(wall_time_s=30)) as box:
        result = box.run("pass")
    assert result.returncode == -9 and not result.timed_out  # killed, but not by the wall clock
