"""MockAPI-v0's HTTP server: one shared server, isolated sessions, a clean stop with nothing left
running or listening, concurrent episodes, and hostile traffic on the wire."""

import gc
import http.client
import json
import multiprocessing
import os
import socket
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from agentgym.envs.mock_api.env import MockApiEnv
from agentgym.envs.mock_api.server import THREAD_PREFIX, acquire_server, server_status
from agentgym.rollouts.io import to_json_line
from agentgym.rollouts.scripted import make_policy, run_episode


def _server_threads():
    return [t.name for t in threading.enumerate() if t.name.startswith(THREAD_PREFIX)]


def _open_sockets():
    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("needs /proc to count sockets")
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
        except OSError:
            pass  # the fd of the listing itself
    return count


@pytest.fixture
def idle_server():
    """No env of another test may hold the server: lifecycle checks need a clean start."""
    assert server_status()["leases"] == 0, "an earlier test left a MockAPI env open"
    assert _server_threads() == []
    yield


def _login(base_url, api_key):
    host, port, path = _split(base_url)
    connection = http.client.HTTPConnection(host, port, timeout=10)
    connection.request("POST", f"{path}/auth/token", json.dumps({"api_key": api_key}), {"Content-Type": "application/json"})
    token = json.loads(connection.getresponse().read())["access_token"]
    connection.close()
    return token


def _split(base_url):
    rest = base_url.removeprefix("http://")
    hostport, _, path = rest.partition("/")
    host, _, port = hostport.partition(":")
    return host, int(port), "/" + path


def _get(base_url, path, token=None):
    host, port, prefix = _split(base_url)
    connection = http.client.HTTPConnection(host, port, timeout=10)
    connection.request("GET", prefix + path, headers={"Authorization": f"Bearer {token}"} if token else {})
    response = connection.getresponse()
    body = json.loads(response.read())
    connection.close()
    return response.status, body


def test_one_server_for_many_envs_and_a_clean_stop(idle_server):
    sockets_before = _open_sockets()
    restarts = server_status()["restarts"]  # process-wide: an earlier test (the chaos suite) may have restarted it
    envs = [MockApiEnv(split="val") for _ in range(5)]
    assert not server_status()["running"]  # made, not reset: nothing started yet
    infos = [env.reset(seed=i, options={"task_id": env.task_ids[0]})[1] for i, env in enumerate(envs)]
    urls = [info["api_base_url"] for info in infos]
    port = _split(urls[0])[1]
    assert {_split(u)[1] for u in urls} == {port} and len(set(urls)) == 5
    assert server_status() == {"running": True, "port": port, "leases": 5, "sessions": 5, "restarts": restarts}
    # Isolation: same world, but a change in one session is invisible in the others, and a
    # token is only good in the session that issued it.
    first, second = urls[0], urls[1]
    token = _login(first, envs[0].api_key)
    assert _get(second, "/tickets/5001", token)[1]["error"]["code"] == "invalid_token"
    envs[0].session.world.tickets.pop(5001)
    assert _get(first, "/tickets/5001", token)[0] == 404
    assert _get(second, "/tickets/5001", _login(second, envs[1].api_key))[0] == 200
    for env in envs:
        env.close()
        env.close()  # twice is fine
    assert server_status() == {"running": False, "port": None, "leases": 0, "sessions": 0, "restarts": restarts}
    assert _server_threads() == []
    assert _open_sockets() == sockets_before
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=2)


def test_a_closed_env_can_start_again_and_its_old_url_is_gone(idle_server):
    env = MockApiEnv(split="val")
    old = env.reset(seed=0)[1]["api_base_url"]
    other = MockApiEnv(split="val")
    other.reset(seed=0)  # keeps the server up across env's restart
    env.close()
    assert _get(old, "/openapi.json")[1]["error"]["code"] == "unknown_session"
    new = env.reset(seed=0)[1]["api_base_url"]
    assert new != old and _get(new, "/openapi.json")[0] == 200
    env.close()
    other.close()
    assert _server_threads() == []


def test_an_env_dropped_without_close_gives_its_lease_back(idle_server):
    env = MockApiEnv(split="val")
    env.reset(seed=0)
    assert server_status()["leases"] == 1
    del env
    gc.collect()
    assert server_status()["leases"] == 0 and _server_threads() == []


def test_an_external_client_holding_a_connection_does_not_block_the_stop(idle_server):
    lease = acquire_server()
    connection = socket.create_connection(("127.0.0.1", lease.server.port), timeout=5)
    connection.sendall(b"GET /s/x/ HTTP/1.1\r\nHost: a\r\n\r\n")
    connection.recv(65536)  # answered; the keep-alive connection stays open
    lease.release()
    assert _server_threads() == []
    assert connection.recv(65536) == b""  # the server hung up
    connection.close()


def test_concurrent_episodes_are_isolated_and_deterministic(idle_server):
    env_count, fault_rate = 16, 0.5
    probe = MockApiEnv(split="test")
    task_ids = probe.task_ids[:env_count]
    probe.close()

    def play(index):
        env = MockApiEnv(split="test", fault_rate=fault_rate)
        try:
            return to_json_line(run_episode(env, make_policy(env, "oracle", index), seed=index, task_id=task_ids[index]))
        finally:
            env.close()

    with ThreadPoolExecutor(env_count) as pool:
        concurrent = list(pool.map(play, range(env_count)))
    sequential = [play(i) for i in range(env_count)]
    assert concurrent == sequential
    assert all(json.loads(line)["success"] for line in concurrent)
    assert _server_threads() == []


def _raw(port, data):
    """Send raw bytes; return the status code and the decoded JSON error of the answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:
        connection.sendall(data)
        chunks = []
        while True:
            chunk = connection.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
            head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
            length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")), None)
            if length is not None and len(body) >= length:
                break
    head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), json.loads(body)


HOSTILE = {
    "unknown session": (b"GET /s/not-a-session/tickets HTTP/1.1\r\nHost: a\r\n\r\n", 404, "unknown_session"),
    "outside the sessions": (b"GET /etc/passwd HTTP/1.1\r\nHost: a\r\n\r\n", 404, "unknown_session"),
    "garbage request line": (b"GARBAGE\r\n\r\n", 400, "http_400"),
    "unknown method": (b"BREW /s/x/ HTTP/1.1\r\nHost: a\r\n\r\n", 404, "unknown_session"),
    "bad content length": (b"GET /s/x/ HTTP/1.1\r\nHost: a\r\nContent-Length: nope\r\n\r\n", 400, "http_400"),
    "broken absolute target": (b"GET http://[::1/s/x/ HTTP/1.1\r\nHost: a\r\n\r\n", 400, "http_400"),
    "no host header": (b"GET /s/x/ HTTP/1.1\r\n\r\n", 400, "http_400"),
    "endless header": (b"GET /s/x/ HTTP/1.1\r\nHost: a\r\nX-Big: " + b"a" * 100_000, 431, "http_431"),
    "chunked body": (b"POST /s/x/tickets HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 411, "http_411"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_wire_traffic_gets_json_errors(idle_server, case):
    request_bytes, status, code = HOSTILE[case]
    lease = acquire_server()
    try:
        got_status, body = _raw(lease.server.port, request_bytes)
        assert got_status == status and body["error"]["code"] == code and body["error"]["message"]
    finally:
        lease.release()


def test_traversal_and_oversized_bodies_on_the_wire(idle_server):
    env = MockApiEnv(split="val")
    url = env.reset(seed=0)[1]["api_base_url"]
    host, port, prefix = _split(url)
    other = MockApiEnv(split="val")
    other_sid = other.reset(seed=0)[1]["api_base_url"].rsplit("/", 1)[1]
    try:
        for path in (f"{prefix}/../{other_sid}/openapi.json", f"{prefix}/%2e%2e/{other_sid}/openapi.json"):
            status, body = _raw(port, f"GET {path} HTTP/1.1\r\nHost: a\r\n\r\n".encode())
            assert status == 404 and body["error"]["code"] == "not_found"
        big = b"x" * 200_000
        status, body = _raw(
            port, f"POST {prefix}/auth/token HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\nContent-Length: {len(big)}\r\n\r\n".encode() + big
        )
        assert status == 413 and body["error"]["code"] == "payload_too_large"
        status, body = _raw(port, f"POST {prefix}/auth/token HTTP/1.1\r\nHost: a\r\nContent-Length: 999999999\r\n\r\n".encode())
        assert status == 413
        assert _get(url, "/openapi.json")[0] == 200  # still serving
    finally:
        env.close()
        other.close()


def _play_in_child(queue):
    env = MockApiEnv(split="val", fault_rate=0.5)
    record = run_episode(env, make_policy(env, "oracle", 0), seed=0, task_id=env.task_ids[0])
    url = env.reset(seed=1)[1]["api_base_url"]
    env.close()
    queue.put((record["success"], _split(url)[1], server_status()["running"], _server_threads()))


def test_a_forked_worker_runs_its_own_server(idle_server):
    if "fork" not in multiprocessing.get_all_start_methods():
        pytest.skip("needs the fork start method")
    parent = MockApiEnv(split="val")
    port = _split(parent.reset(seed=0)[1]["api_base_url"])[1]
    try:
        context = multiprocessing.get_context("fork")
        queue = context.Queue()
        child = context.Process(target=_play_in_child, args=(queue,))
        child.start()
        child.join(60)
        solved, child_port, child_running, child_threads = queue.get(timeout=10)
        assert child.exitcode == 0 and solved and child_port != port and not child_running and child_threads == []
        record = run_episode(parent, make_policy(parent, "oracle", 0), seed=0, task_id=parent.task_ids[0])
        assert record["success"] and server_status()["port"] == port
    finally:
        parent.close()
