"""The grader against the attack catalogue: every attack scores 0 or below, honest code scores 1.

Three small tasks, each with visible examples (what a prompt would show) and hidden cases that
share no input with them. Each attack targets one way a naive harness is fooled; here it must
gain nothing.
"""

import contextlib
import os
import threading
import time

import pytest

from agentgym.sandbox import Limits, grading
from agentgym.sandbox._harness import decode, encode, same
from agentgym.sandbox.grading import CRASH_SCORE, AssertTests, CheckTests, FunctionTests, Grader, IOCase
from agentgym.sandbox.local import LocalBackend, leftovers


def cases(pairs):
    return tuple(IOCase.of(args, out) for args, out in pairs)


TASKS = {
    "add": FunctionTests("add", cases([((2, 3), 5), ((-7, 24), 17), ((10**20, 1), 10**20 + 1), ((0, -4), -4), ((123, 877), 1000), ((-5, -6), -11)])),
    "is_palindrome": FunctionTests(
        "is_palindrome", cases([(("racecar",), True), (("ab",), False), (("",), True), (("Aa",), False), (("abba",), True), (("abc",), False)])
    ),
    "mean": FunctionTests(
        "mean",
        cases(
            [(([1.0, 2.0],), 1.5), (([0.1, 0.2, 0.3],), 0.2), (([-3.0],), -3.0), (([1, 2, 3, 4],), 2.5), (([],), ValueError), (([1e10, 1.0],), 5000000000.5)]
        ),
    ),
}
VISIBLE = {"add": [((1, 2), 3), ((4, 4), 8)], "is_palindrome": [(("aba",), True), (("xy",), False)], "mean": [(([2.0, 4.0],), 3.0)]}
HONEST = {
    "add": "def add(a, b):\n    return a + b\n",
    "is_palindrome": "def is_palindrome(s):\n    return s == s[::-1]\n",
    "mean": "def mean(xs):\n    if not xs:\n        raise ValueError('empty')\n    return sum(xs) / len(xs)\n",
}
LIMITS = Limits(wall_time_s=2.0, cpu_time_s=2, memory_bytes=256 << 20, max_output_bytes=1 << 20)

ATTACKS = {
    # exit-status tricks
    "sys_exit_zero_at_import": ("add", "import sys\nsys.exit(0)\n"),
    "os_exit_zero_at_import": ("add", "import os\nos._exit(0)\n"),
    "atexit_os_exit_zero": ("add", "import atexit, os\natexit.register(lambda: os._exit(0))\ndef add(a, b):\n    return 0\n"),
    "atexit_raise_systemexit": ("add", "import atexit\ndef bye():\n    raise SystemExit(0)\natexit.register(bye)\ndef add(a, b):\n    return None\n"),
    "excepthook_exit_zero": ("add", "import sys, os\nsys.excepthook = lambda *a: os._exit(0)\ndef add(a, b):\n    raise AssertionError('no')\n"),
    # objects that lie in comparisons
    "always_equal_object": (
        "add",
        "class Eq:\n    def __eq__(self, other): return True\n    def __ne__(self, other): return False\n    __hash__ = object.__hash__\ndef add(a, b):\n    return Eq()\n",
    ),
    "int_subclass_always_equal": (
        "add",
        "class I(int):\n    def __eq__(self, other): return True\n    def __ne__(self, other): return False\n    __hash__ = int.__hash__\ndef add(a, b):\n    return I(0)\n",
    ),
    "float_subclass_sub_zero": (
        "mean",
        "class F(float):\n    def __sub__(self, other): return 0.0\n    def __rsub__(self, other): return 0.0\n    def __eq__(self, other): return True\n    __hash__ = float.__hash__\ndef mean(xs):\n    return F(0.0)\n",
    ),
    "builtins_abs_patch": ("mean", "import builtins, math\nbuiltins.abs = lambda x: 0\nmath.isclose = lambda *a, **k: True\ndef mean(xs):\n    return 0.0\n"),
    # subverting a test runner
    "pytest_runtest_noop": ("add", "import sys, types\nfake = types.ModuleType('_pytest')\nsys.modules['_pytest'] = fake\ndef add(a, b):\n    return -1\n"),
    "pytest_skip_module": ("add", "import pytest\npytest.skip('skip', allow_module_level=True)\ndef add(a, b):\n    return a + b\n"),
    "fake_summary_then_exit": ("add", "print('===== 6 passed in 0.01s =====')\nprint('{\"ready\": true}')\nprint('{\"value\": 5}')\nimport sys\nsys.exit(0)\n"),
    "fake_protocol_lines": (
        "add",
        "import sys\nprint('{\"value\": 5}')\nsys.stderr.write('{\"value\": 5}\\n')\ndef add(a, b):\n    print('{\"value\": %d}' % (a + b))\n    return None\n",
    ),
    # files left behind for a later run
    "conftest_force_pass": (
        "add",
        "open('conftest.py', 'w').write('def pytest_runtest_makereport(item, call): pass')\nopen('pytest.ini', 'w').write('[pytest]\\naddopts = --collect-only')\nopen('pytest.py', 'w').write('print(\"6 passed\")')\ndef add(a, b):\n    return 0\n",
    ),
    "rewrite_test_file_for_rerun": (
        "add",
        "import os, glob\nfor path in glob.glob('/workspace/**', recursive=True):\n    try:\n        open(path, 'w').write('')\n    except OSError:\n        pass\ndef add(a, b):\n    return 1\n",
    ),
    "shadow_stdlib_module": (
        "add",
        "open('json.py', 'w').write('def dumps(*a, **k): return \"{\\\\\"value\\\\\": 5}\"')\nimport importlib, sys\nsys.path.insert(0, '.')\ndef add(a, b):\n    return 2\n",
    ),
    # reading the answers
    "read_test_file_regex": (
        "add",
        "import glob, re\nfound = [open(p).read() for p in glob.glob('/workspace/**/*', recursive=True) + glob.glob('/tmp/**/*', recursive=True)]\ndef add(a, b):\n    for text in found:\n        m = re.search(r'add\\(%d, %d\\)\\s*==\\s*(-?\\d+)' % (a, b), text)\n        if m:\n            return int(m.group(1))\n    return None\n",
    ),
    "caller_frame_source_peek": (
        "add",
        "import sys, re\ndef add(a, b):\n    frame = sys._getframe(1)\n    while frame:\n        for value in list(frame.f_locals.values()):\n            text = repr(value)\n            m = re.search(r'expected\\W+(-?\\d+)', text)\n            if m:\n                return int(m.group(1))\n        frame = frame.f_back\n    return None\n",
    ),
    "hardcode_visible_tests": ("add", "def add(a, b):\n    return {(1, 2): 3, (4, 4): 8}.get((a, b))\n"),
    # resources and escapes
    "infinite_loop": ("add", "def add(a, b):\n    while True:\n        pass\n"),
    "infinite_loop_at_import": ("add", "while True:\n    pass\n"),
    "sleep_forever": ("add", "import time\ndef add(a, b):\n    time.sleep(10**6)\n"),
    "ignore_sigalrm_then_loop": (
        "add",
        "import signal\nfor s in (signal.SIGALRM, signal.SIGTERM, signal.SIGINT, signal.SIGXCPU):\n    signal.signal(s, signal.SIG_IGN)\ndef add(a, b):\n    while True:\n        pass\n",
    ),
    "memory_bomb": ("add", "def add(a, b):\n    chunks = []\n    while True:\n        chunks.append(bytearray(32 << 20))\n"),
    "fork_bomb": (
        "add",
        "import os, time\ndef add(a, b):\n    while True:\n        try:\n            if os.fork() == 0:\n                time.sleep(20)\n                os._exit(0)\n        except OSError:\n            return None\n",
    ),
    "background_daemon": (
        "add",
        "import subprocess, sys\nsubprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'], start_new_session=True)\ndef add(a, b):\n    return 0\n",
    ),
    "output_flood": ("add", "import sys\ndef add(a, b):\n    for _ in range(4096):\n        sys.stdout.write('x' * 65536)\n    return None\n"),
    "network_exfil": (
        "add",
        "import socket\ndef add(a, b):\n    for host, port in [('127.0.0.1', 22), ('1.1.1.1', 53)]:\n        try:\n            socket.create_connection((host, port), timeout=0.5)\n            return 'NET_OK'\n        except OSError:\n            pass\n    return None\n",
    ),
    "env_secret_read": (
        "add",
        "import os\ndef add(a, b):\n    return ','.join(k for k in os.environ if 'SECRET' in k or 'TOKEN' in k or 'KEY' in k) or None\n",
    ),
    "read_outside_workspace": (
        "add",
        "import os\ndef add(a, b):\n    for path in ['/etc/passwd', '/root/.bashrc', '/proc/1/environ', '/work']:\n        try:\n            return open(path).read()\n        except OSError:\n            pass\n    return None\n",
    ),
}


@pytest.fixture(scope="module")
def grader(local_backend):
    return Grader(local_backend, LIMITS)


@pytest.mark.parametrize("task", sorted(HONEST))
def test_honest_solutions_score_one(grader, task):
    grade = grader.grade(HONEST[task], TASKS[task])
    assert grade.score == 1.0 and grade.passed == grade.total == 6, grade


def test_honest_code_may_print_import_and_take_its_time(grader):
    code = "import sys, os, json, collections\nprint('loading', file=sys.stderr)\nimport time\ndef add(a, b):\n    print('adding', a, b)\n    time.sleep(0.05)\n    return a + b\n"
    assert grader.grade(code, TASKS["add"]).score == 1.0


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_attack_gains_nothing(grader, name, monkeypatch):
    monkeypatch.setenv("AGENTGYM_TEST_SECRET", "s3cr3t")
    task, code = ATTACKS[name]
    start = time.monotonic()
    grade = grader.grade(code, TASKS[task])
    assert grade.score <= 0.0, (name, grade)
    assert time.monotonic() - start < 2 * LIMITS.wall_time_s + 5  # no attack stalls the grader


def test_visible_examples_never_appear_among_hidden_cases():
    for task, examples in VISIBLE.items():
        hidden = {repr(decode(c.args)) for c in TASKS[task].cases}
        assert not hidden & {repr(list(args)) for args, _ in examples}


@pytest.mark.parametrize(
    "name", ["sys_exit_zero_at_import", "os_exit_zero_at_import", "infinite_loop_at_import", "pytest_skip_module", "fake_summary_then_exit"]
)
def test_crash_before_any_test_scores_minus_one(grader, name):
    task, code = ATTACKS[name]
    grade = grader.grade(code, TASKS[task])
    assert grade.score == CRASH_SCORE and grade.crashed and grade.passed == 0


def test_a_forged_ready_line_does_not_hide_a_crash(grader):
    code = "import json, os\nfor fd in range(1, 8):\n    try:\n        os.write(fd, b'{\"ready\": true}\\n')\n    except OSError:\n        pass\nos._exit(0)\n"
    grade = grader.grade(code, TASKS["add"])
    assert grade.score == CRASH_SCORE and grade.crashed and "before answering any test" in grade.reason  # the fake line got through


def test_every_case_needs_its_own_answer(grader):
    code = "import os\ndef add(a, b):\n    if (a, b) == (2, 3):\n        return 5\n    os._exit(0)\n"
    grade = grader.grade(code, TASKS["add"])
    assert (grade.score, grade.passed, grade.crashed) == (pytest.approx(1 / 6), 1, False)


def test_grading_is_repeatable_and_ignores_what_the_submission_wrote(grader):
    _, code = ATTACKS["rewrite_test_file_for_rerun"]
    assert [grader.grade(code, TASKS["add"]).score for _ in range(2)] == [0.0, 0.0]
    assert grader.grade(HONEST["add"], TASKS["add"]).score == 1.0


def test_exact_types_are_required():
    assert not same(encode(True), encode(1)) and not same(encode(1), encode(1.0)) and not same(encode((1,)), encode([1]))
    assert same(encode(0.1 + 0.2), encode(0.3)) and same(encode({1: "a", 2: "b"}), encode({2: "b", 1: "a"}))
    assert same(encode({3, 1}), encode({1, 3})) and not same(encode({1}), encode(frozenset({1})))
    assert same(encode(float("nan")), encode(float("nan"))) and not same(encode(b"a"), encode("a"))


def test_returned_subclasses_count_as_their_builtin_data(grader):
    right_data = "def add(a, b):\n    class Liar(int):\n        def __eq__(self, other): return True\n    return Liar(a + b)\n"
    assert grader.grade(right_data, TASKS["add"]).score == 1.0  # right data passes...
    assert grader.grade(ATTACKS["int_subclass_always_equal"][1], TASKS["add"]).score == 0.0  # ...a lying __eq__ does not


HUMANEVAL_LIKE = CheckTests(
    prompt='def double(x):\n    """Return 2 * x."""\n',
    test="def check(candidate):\n    assert candidate(2) == 4\n    assert candidate(-1) == -2\n    assert double(5) == 10\n",
    entry_point="double",
)
MBPP_LIKE = AssertTests(
    asserts=("assert first([3, 1]) == 3", "assert first((9,)) == 9", "assert depth(tree) == 2"),
    names=("first", "depth"),
    setup="tree = Node(Node(None))",
    reference="class Node:\n    def __init__(self, child):\n        self.child = child\n",
)


def test_check_and_assert_formats(grader):
    assert grader.grade("def double(x):\n    return 2 * x\n", HUMANEVAL_LIKE).score == 1.0
    assert grader.grade(HUMANEVAL_LIKE.prompt, HUMANEVAL_LIKE).score == 0.0
    liar = "class Eq:\n    def __eq__(self, o): return True\ndef double(x):\n    return Eq()\n"
    assert grader.grade(liar, HUMANEVAL_LIKE).score == 0.0
    solution = "def first(xs):\n    return xs[0]\ndef depth(node):\n    return 0 if node is None else 1 + depth(node.child)\n"
    assert grader.grade(solution, MBPP_LIKE).score == 1.0
    assert grader.grade("def first(xs):\n    return xs[0]\n", MBPP_LIKE).score == pytest.approx(2 / 3)
    assert grader.grade("import sys\nsys.exit(0)", MBPP_LIKE).score == CRASH_SCORE


def test_a_failed_grading_is_a_failed_submission_in_fixed_words(grader, monkeypatch):
    from agentgym.sandbox import SandboxError
    from agentgym.sandbox.grading import GRADING_FAILED
    from agentgym.sandbox.sandbox import Sandbox

    unencodable = grader.grade("note = '\ud800'\n" + HONEST["add"], TASKS["add"])  # cannot be written into the sandbox

    def no_sandbox(*args, **kwargs):
        raise SandboxError("the sandbox could not start")

    monkeypatch.setattr(Sandbox, "start", no_sandbox)
    unavailable = grader.grade(HONEST["add"], TASKS["add"])
    for grade in (unencodable, unavailable):
        # Scored like a wrong answer, and the words do not say which failure it was.
        assert (grade.score, grade.passed, grade.crashed, grade.reason) == (0.0, 0, False, GRADING_FAILED)


def test_code_exec_submit_is_final_when_grading_fails(monkeypatch):
    import gymnasium as gym

    from agentgym.parsing import format_tool_call
    from agentgym.sandbox import SandboxError
    from agentgym.sandbox.sandbox import Sandbox

    def no_sandbox(*args, **kwargs):
        raise SandboxError("the sandbox could not start")

    env = gym.make("agentgym/CodeExec-v0")
    env.reset(seed=0)
    monkeypatch.setattr(Sandbox, "start", no_sandbox)
    observation, reward, terminated, _, info = env.step(format_tool_call("submit", {"code": "def f():\n    return 1\n"}))
    env.close()
    assert terminated and not info["success"] and info["reward_components"]["tests"] == 0.0
    assert "could not be graded" in observation[0]["content"] and "sandbox" not in observation[0]["content"]


def test_exceptions_keep_their_identity_across_the_sandbox(grader):
    # HumanEval-style checks that expect exceptions, as honest solutions raise them.
    check = CheckTests(
        prompt="def median(xs):\n    ...\n",
        test=(
            "import statistics\n"
            "def check(candidate):\n"
            "    assert candidate([3, 1, 2]) == 2\n"
            "    try:\n        candidate([])\n    except statistics.StatisticsError:\n        pass\n    else:\n        raise AssertionError('no error')\n"
            "    try:\n        candidate(None)\n    except TypeError:\n        pass\n    else:\n        raise AssertionError('no error')\n"
        ),
        entry_point="median",
    )
    assert grader.grade("import statistics\ndef median(xs):\n    return statistics.median(xs)\n", check).score == 1.0
    # A subclass of ValueError caught as ValueError, even when the test never imported its module.
    as_base = CheckTests(
        "def mean(xs):\n    ...\n",
        "def check(candidate):\n    try:\n        candidate([])\n    except ValueError:\n        return\n    raise AssertionError\n",
        "mean",
    )
    assert grader.grade("import statistics\ndef mean(xs):\n    return statistics.mean(xs)\n", as_base).score == 1.0
    assert grader.grade("def mean(xs):\n    raise KeyError(1)\n", as_base).score == 0.0  # the wrong exception still fails
    # SystemExit from the candidate does not stop the test driver: it is a failed call.
    exits = CheckTests(
        "def f():\n    ...\n", "def check(candidate):\n    try:\n        candidate()\n    except BaseException:\n        pass\n    assert False\n", "f"
    )
    assert grader.grade("def f():\n    raise SystemExit(0)\n", exits).score == 0.0
    # Function tests accept a subclass of the expected exception, as except would.
    mean_tests = FunctionTests("mean", cases([(([],), ValueError)]))
    assert grader.grade("import statistics\ndef mean(xs):\n    return statistics.mean(xs)\n", mean_tests).score == 1.0


def test_the_fork_server_has_the_grading_harness_loaded_under_the_graders_name(sandbox):
    # Grading programs use the fork server's copy instead of compiling the harness in every run;
    # a name that drifted would silently fall back to the slow path.
    from agentgym.sandbox.grading import _HARNESS_MODULE

    assert sandbox.run(f"import sys; print({_HARNESS_MODULE!r} in sys.modules)").stdout == "True\n"


DOUBLE = "def double(x):\n    return 2 * x\n"


def test_one_test_driver_serves_many_gradings_each_in_a_fresh_namespace(local_backend, monkeypatch):
    from agentgym.sandbox.sandbox import Sandbox

    opened = []
    real_init = Sandbox.__init__

    def counting_init(self, backend, limits):
        opened.append("driver" if limits.wall_time_s > LIMITS.wall_time_s else "submission")
        real_init(self, backend, limits)

    monkeypatch.setattr(Sandbox, "__init__", counting_init)
    defines = CheckTests("def helper():\n    return 3\n", "def check(candidate):\n    assert candidate(helper()) == 6\n", "double")
    uses = CheckTests("def other():\n    ...\n", "def check(candidate):\n    assert candidate(2) == helper() + 1\n", "double")
    with Grader(local_backend, LIMITS) as grader:
        scores = [grader.grade(code, spec).score for code, spec in [(DOUBLE, defines), (DOUBLE, uses), ("def double(x):\n    return 0\n", defines)] * 2]
    # helper() of the first test is gone when the second runs; wrong code still fails after right code.
    assert scores == [1.0, 0.0, 0.0] * 2
    # A sandbox per submission (prepared during the gradings before it, so the one to three
    # kept ahead are left over), one driver for all.
    assert opened.count("driver") == 1
    assert 6 + 1 <= opened.count("submission") <= 6 + grading._SPARES


def test_sandboxes_prepared_ahead_follow_the_pace_of_gradings(local_backend, monkeypatch):
    # Gradings that have to wait for their prepared sandbox keep more ahead (up to the most);
    # once a prepared sandbox has waited long for its grading, one ahead is enough again.
    from agentgym.sandbox.sandbox import Sandbox

    prepare = Sandbox.prepare
    # Preparing takes longer than a grading here, even on a loaded machine (a grading took over
    # 0.1 s beside two training processes on 2 cores, where a 0.2 s preparation and a 0.1 s
    # threshold failed this test).
    monkeypatch.setattr(Sandbox, "prepare", lambda self: (time.sleep(0.6), prepare(self)))
    monkeypatch.setattr(grading, "_SPARE_IDLE_S", 0.4)
    with Grader(local_backend, LIMITS) as grader:
        assert [grader.grade(HONEST["add"], TASKS["add"]).score for _ in range(4)] == [1.0] * 4
        assert grader._chores._wanted == grading._SPARES
        time.sleep(2.5)  # the three prepared meanwhile are all ready, the oldest for long enough
        assert grader.grade(HONEST["add"], TASKS["add"]).score == 1.0
        assert grader._chores._wanted == 1


def test_a_driver_that_died_idle_or_hung_is_replaced(local_backend):
    with Grader(local_backend, LIMITS) as grader:
        assert grader.grade(DOUBLE, HUMANEVAL_LIKE).score == 1.0
        (idle,) = grader._drivers.idle
        idle.process.kill()  # as if its backend had restarted between gradings
        idle.process.wait()  # dead before the next grading starts (one killed meanwhile dies mid-grading: a failed grading)
        assert grader.grade(DOUBLE, HUMANEVAL_LIKE).score == 1.0
        hangs = CheckTests("def f():\n    ...\n", "def check(candidate):\n    while True:\n        pass\n", "double")
        assert grader.grade(DOUBLE, hangs).score == 0.0  # the driver ran out of time and was stopped
        assert not grader._drivers.idle
        assert grader.grade(DOUBLE, HUMANEVAL_LIKE).score == 1.0
    assert not grader._drivers.idle  # closing the grader stops its drivers


def test_what_a_submission_printed_is_kept_and_closing_ends_every_submission():
    # Graded submissions are stopped and their workspaces deleted in the background; the grade
    # still carries what they wrote to standard error, and close() waits for that work.
    code = "import sys\nprint('loading', file=sys.stderr)\ndef add(a, b):\n    print('adding', a, b, file=sys.stderr)\n    return a + b\n"
    backend = LocalBackend()  # its own: other tests' graders may still be preparing sandboxes
    files = _left_files()
    with Grader(backend, LIMITS) as grader:
        grades = [grader.grade(code, TASKS["add"]) for _ in range(3)]
    assert [g.score for g in grades] == [1.0] * 3
    for grade in grades:
        assert grade.details["stderr_tail"].splitlines() == [
            "loading",
            "adding 2 3",
            "adding -7 24",
            "adding 100000000000000000000 1",
            "adding 0 -4",
            "adding 123 877",
            "adding -5 -6",
        ]
    # No submission's process, not a prepared one, not a driver outlives close(): only the fork server is left.
    assert len(_sandbox_processes(backend)) == 1
    assert _left_files() <= files
    backend.close()


def test_graded_submissions_are_ended_at_idle_priority(monkeypatch):
    # Killing a graded submission and tearing down its memory happen off the grading's path, on
    # CPU time the next grading does not want: its workspace gets idle priority before the kill.
    calls, kills = [], []
    backend = LocalBackend()
    monkeypatch.setattr(backend, "set_idle_priority", lambda workspace, idle: calls.append((workspace, idle, len(kills))))
    monkeypatch.setattr(backend, "kill", lambda run_id, kill=backend.kill: (kills.append(run_id), kill(run_id)))
    try:
        with Grader(backend, LIMITS) as grader:
            assert grader.grade(HONEST["add"], TASKS["add"]).score == 1.0
            grader._chores.close()  # the first has ended before the second is graded
            assert grader.grade(HONEST["add"], TASKS["add"]).score == 1.0
    finally:
        backend.close()
    assert [(idle, killed_before) for _, idle, killed_before in calls] == [(True, 0), (True, 1)]  # each before its own kill
    assert len({workspace for workspace, _, _ in calls}) == 2


class _Ending:
    """A graded submission's sandbox and process whose end is held until ``ended`` is set."""

    def __init__(self):
        self.priorities, self.ended = [], threading.Event()

    def set_idle_priority(self, idle):
        self.priorities.append(idle)

    def kill(self):
        pass

    def wait(self):
        assert self.ended.wait(5)


def test_an_ended_submission_gets_its_usual_share_back_when_two_wait_behind_it():
    # With idle CPU too scarce to end graded submissions as fast as they come, the one being
    # ended gets its usual share back and the ones behind it are not lowered: none pile up.
    chores = grading._Chores(1)
    first, second, third = _Ending(), _Ending(), _Ending()
    chores.finish(first, first, contextlib.ExitStack())
    deadline = time.monotonic() + 5
    while not first.priorities and time.monotonic() < deadline:  # its end has begun: lowered, then held
        time.sleep(0.01)
    chores.finish(second, second, contextlib.ExitStack())
    chores.finish(third, third, contextlib.ExitStack())
    for ending in (first, second, third):
        ending.ended.set()
    chores.close()
    assert first.priorities == [True, False]  # restored when the second one waited behind it
    assert second.priorities == [] and third.priorities == [True]  # the last, with nothing behind it, goes idle


def test_a_connected_driver_calls_the_submission_directly_and_survives_bad_ones(local_backend, monkeypatch):
    # On the local backend the driver gets the submission's pipes: the grader relays no call. A
    # silent, chatty, garbage-writing or exiting submission ends in a verdict from the driver,
    # which then serves the next grading.
    import agentgym.sandbox.grading as grading

    relayed = []
    monkeypatch.setattr(grading._Submission, "ask", lambda self, request: relayed.append(request))
    sleeps = "import time\ndef double(x):\n    time.sleep(100)\n"
    chatty = "import sys\ndef double(x):\n    sys.stderr.write('x' * 200_000)\n    return 2 * x\n"
    garbage = "import os\ndef double(x):\n    for fd in range(3, 16):\n        try:\n            os.write(fd, b'{' * 100_000)\n        except OSError:\n            pass\n    return 2 * x\n"
    exits = "import os\ndef double(x):\n    os._exit(0)\n"
    with Grader(local_backend, LIMITS) as grader:
        assert grader.grade(DOUBLE, HUMANEVAL_LIKE).score == 1.0
        (driver,) = grader._drivers.idle
        assert driver.peer is not None
        started = time.monotonic()
        assert grader.grade(sleeps, HUMANEVAL_LIKE).score == CRASH_SCORE  # no answer at all
        assert time.monotonic() - started < LIMITS.wall_time_s + 1.5
        chatty_grade = grader.grade(chatty, HUMANEVAL_LIKE)
        assert chatty_grade.score == 1.0 and chatty_grade.details["stderr_tail"] == "x" * 2000
        assert grader.grade(garbage, HUMANEVAL_LIKE).score <= 0.0
        assert grader.grade(exits, HUMANEVAL_LIKE).score == CRASH_SCORE
        assert grader.grade(DOUBLE, HUMANEVAL_LIKE).score == 1.0
        assert grader._drivers.idle == [driver]  # the same driver throughout
    assert relayed == []


def test_without_descriptor_passing_the_grader_relays_every_call(local_backend, monkeypatch):
    # A backend that cannot connect a socket to a sandbox (Docker) gets the relayed protocol.
    from agentgym.sandbox.local import LocalBackend

    def refuse(*args, **kwargs):
        raise NotImplementedError("no descriptor passing here")

    monkeypatch.setattr(LocalBackend, "start_connected", refuse)
    import agentgym.sandbox.grading as grading

    asked = []
    real_ask = grading._Submission.ask
    monkeypatch.setattr(grading._Submission, "ask", lambda self, request: asked.append(request) or real_ask(self, request))
    with Grader(local_backend, LIMITS) as grader:
        assert grader.grade(DOUBLE, HUMANEVAL_LIKE).score == 1.0
        assert grader.grade("def double(x):\n    return x\n", HUMANEVAL_LIKE).score == 0.0
        assert grader._drivers.idle[0].peer is None
    assert [a["call"] for a in asked] == ["double"] * 4  # three calls, then the wrong answer's first


def test_one_grader_serves_several_threads_at_once():
    # Gradings on one grader from four threads: each takes its own driver and sandbox (a prepared
    # one when it is there), every verdict is right, and closing leaves no sandbox behind.
    from concurrent.futures import ThreadPoolExecutor

    backend = LocalBackend()
    files = _left_files()
    wrong = "def double(x):\n    return x + 2\n"  # right for 2 only
    jobs = [(DOUBLE, 1.0), (wrong, 0.0), ("raise SystemExit(0)\n", CRASH_SCORE)] * 8
    with Grader(backend, LIMITS) as grader, ThreadPoolExecutor(4) as pool:
        scores = list(pool.map(lambda job: grader.grade(job[0], HUMANEVAL_LIKE).score, jobs))
        assert 1 <= len(grader._drivers.idle) <= 4
    assert scores == [expected for _, expected in jobs]
    assert len(_sandbox_processes(backend)) == 1  # the fork server
    assert _left_files() <= files
    backend.close()


def _sandbox_processes(backend: LocalBackend) -> set[int]:
    """The processes under ``backend``'s launcher: its fork server and every sandbox it runs."""
    parents = {}
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat") as handle:
                parents[int(entry)] = int(handle.read().rpartition(")")[2].split()[1])
        except (OSError, ValueError):
            continue  # not a process, or one that exited meanwhile
    found: set[int] = set()
    frontier = {backend._proc.pid}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def _left_files() -> set[str]:
    return {entry for entry in leftovers() if entry.startswith("file ")}


def test_a_chatty_honest_submission_is_not_slowed_down(local_backend):
    # A correct solution that writes megabytes to standard error while being tested passes in about
    # the time it takes to write them (the grader keeps its pipe drained).
    chatty = "import sys\ndef double(x):\n    sys.stderr.write('y' * 1_500_000)\n    return 2 * x\n"
    with Grader(local_backend, LIMITS) as grader:
        started = time.monotonic()
        assert grader.grade(chatty, HUMANEVAL_LIKE).score == 1.0
        assert time.monotonic() - started < 1.5


def test_random_test_inputs_are_the_same_in_every_grading(local_backend):
    # Test code that draws random inputs draws the same ones whatever the driver graded before.
    draws = CheckTests("def f(x):\n    ...\n", "import random\ndef check(candidate):\n    assert candidate(random.random()) == 0.8444218515250481\n", "f")
    with Grader(local_backend, LIMITS) as grader:
        for _ in range(3):
            assert grader.grade("def f(x):\n    return x\n", draws).score == 1.0
            assert grader.grade("def f(x):\n    return 0\n", HUMANEVAL_LIKE).score == 0.0  # the driver runs other tests between


def test_a_forked_child_grades_with_its_own_sandboxes_and_leaves_the_parents_alone(local_backend):
    # A process forked from one holding a grader (a worker pool, say) drops the parent's drivers and
    # prepared sandbox without touching them, grades with sandboxes of its own, and exits promptly.
    import os

    from agentgym.sandbox.sandbox import _close_shared

    with Grader("local", LIMITS) as grader:
        assert grader.grade(DOUBLE, HUMANEVAL_LIKE).score == 1.0  # a driver and a prepared sandbox exist now
        pid = os.fork()
        if pid == 0:
            status = 1
            try:
                started = time.monotonic()
                child_ok = grader.grade(DOUBLE, HUMANEVAL_LIKE).score == 1.0 and grader.grade("def double(x):\n    return 0\n", HUMANEVAL_LIKE).score == 0.0
                grader.close()
                status = 0 if child_ok and time.monotonic() - started < 10 else 1
            finally:
                _close_shared()  # the child's own fork server, waited for
                os._exit(status)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert grader.grade(DOUBLE, HUMANEVAL_LIKE).score == 1.0  # the parent's driver still serves
