"""The hostile-candidate suite: wrong code that tries to pass a check anyway. None may pass.

Each candidate's `add` is wrong (it subtracts), and it tries one trick: leave before the tests end, fake a
summary, return an object that equals everything, reach the report channel, rewrite the tests or pytest in
memory, read the tests to answer from them, or escape the sandbox. Both check kinds (`test_code` and a
pytest file) compute their verdict in a process the candidate cannot reach, with values crossing as plain data,
so no trick may pass either, through the API or the CLI. docs/checks.md says what each guarantees.
"""

from __future__ import annotations

import pytest

from reflexa.evaluate.checks import CheckContext, PytestCheck, PythonScriptCheck
from reflexa.evaluate.sandbox import Limits, Sandbox
from reflexa.types import ErrorCode

WRONG = "def add(a, b):\n    return a - b\n"
TEST_CODE = "assert add(2, 3) == 5\nassert add(-1, 1) == 0\nassert add(0, 0) == 0\n"
TEST_FILE = "from solution import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n    assert add(-1, 1) == 0\n"
SANDBOX = Sandbox(Limits(timeout=6, cpu_seconds=6))

EQUALS_ALL = "class Yes:\n    def __eq__(self, other):\n        return True\n    __hash__ = object.__hash__\n"
FORGED = ('{"finished": true, "mode": "%s", "passed": 1, "collected": 1, "exit_code": 0, "failed": 0, '
          '"errors": 0, "tampered": [], "nonce": "%s"}')

TRICKS = {
    # leaving early, or saying "passed" some other way
    "os._exit(0) at import": "import os\nos._exit(0)\n" + WRONG,
    "sys.exit(0) at import": "import sys\n" + WRONG + "sys.exit(0)\n",
    "os._exit(0) inside the function": "import os\ndef add(a, b):\n    os._exit(0)\n",
    "sys.exit(0) inside the function": "import sys\ndef add(a, b):\n    sys.exit(0)\n",
    "a printed summary, then exit 0": WRONG + "print('===== 3 passed in 0.01s =====')\nimport os\nos._exit(0)\n",
    "KeyboardInterrupt from the function": "def add(a, b):\n    raise KeyboardInterrupt\n",
    "an atexit hook that exits 0": WRONG + "import atexit, os\natexit.register(lambda: os._exit(0))\n",
    "a string that swallows the tests": WRONG + "x = '''\n",
    # values that lie
    "an object equal to everything": EQUALS_ALL + "def add(a, b):\n    return Yes()\n",
    "an int subclass equal to everything": "class N(int):\n    def __eq__(self, o):\n        return True\n"
                                           "    __hash__ = int.__hash__\ndef add(a, b):\n    return N(a - b)\n",
    "a bool-ish object": "class T:\n    def __bool__(self):\n        return True\n"
                         "    def __eq__(self, o):\n        return True\n    __hash__ = object.__hash__\n"
                         "def add(a, b):\n    return T()\n",
    "builtins.AssertionError replaced": WRONG + "import builtins\n"
                                                "builtins.AssertionError = type('X', (Exception,), {})\n",
    "the assert statement's exception swallowed by sys.excepthook": WRONG + "import sys\nsys.excepthook = "
                                                                             "lambda *a: None\n",
    # reaching the harness and its channel
    "the harness's functions wrapped to report a pass": (
        "import __main__\n"
        "def wrap(f):\n"
        "    def forged(*args, **kwargs):\n"
        "        args = [dict(a, finished=True, failed=0, errors=0, tampered=[], failures=[], exit_code=0,\n"
        "                     passed=a.get('collected', 1)) if isinstance(a, dict) and 'finished' in a\n"
        "                else 0 if a == 1 else a for a in args]\n"
        "        return f(*args, **kwargs)\n"
        "    return forged\n"
        "for name, value in list(vars(__main__).items()):\n"
        "    if name.startswith('_') and callable(value) and not isinstance(value, type):\n"
        "        setattr(__main__, name, wrap(value))\n" + WRONG),
    "the harness's functions replaced by no-ops": (
        "import __main__\n"
        "for name, value in list(vars(__main__).items()):\n"
        "    if callable(value) and not isinstance(value, type):\n"
        "        setattr(__main__, name, lambda *args, **kwargs: None)\n" + WRONG),
    "builtins the report counts with replaced": (
        "import builtins\nbuiltins.sorted = lambda *a, **k: []\nbuiltins.len = lambda *a: 0\n" + WRONG),
    "a forged report on every descriptor": (
        "import os\n" + WRONG + "for fd in range(3, 64):\n    try:\n"
        "        os.write(fd, (" + repr(FORGED % ("pytest", "0" * 32)) + " + '\\n').encode())\n"
        "    except OSError:\n        pass\n"),
    "the report channel reopened through /proc/self/fd, by a forked child": (
        "import os, time\n" + WRONG +
        "for fd in os.listdir('/proc/self/fd'):\n"
        "    try:\n        target = os.readlink(f'/proc/self/fd/{fd}')\n    except OSError:\n        continue\n"
        "    if target.startswith(('pipe:', 'socket:')) and int(fd) > 2 and os.fork() == 0:\n"
        "        try:\n            r = os.open(f'/proc/self/fd/{fd}', os.O_RDONLY | os.O_NONBLOCK)\n"
        "            time.sleep(2)\n            data = os.read(r, 65536)\n"
        "            os.write(int(fd), data.replace(b'\"passed\": 0', b'\"passed\": 1')\n"
        "                     .replace(b'\"failed\": 1', b'\"failed\": 0'))\n"
        "        finally:\n            os._exit(0)\n"),
    "the nonce read from the harness's memory": (
        "import gc\n" + WRONG + "nonces = [o for o in gc.get_objects() if isinstance(o, str) and len(o) == 32]\n"),
    "the harness's frames walked through a traceback": (
        "import sys\n" + WRONG +
        "try:\n    raise RuntimeError\nexcept RuntimeError as e:\n    frame = e.__traceback__.tb_frame\n"
        "while frame is not None:\n"
        "    for key in ('finish', 'recorder', 'data'):\n"
        "        frame.f_locals.get(key)\n"
        "    frame = frame.f_back\n"),
    "ctypes reading the interpreter's memory": (
        "import ctypes\n" + WRONG + "ctypes.string_at(id(add), 64)\n"),
    "a trace function that rewrites locals": (
        "import sys\n" + WRONG + "sys.settrace(lambda frame, event, arg: None)\n"),
    # rewriting the tests in memory
    "a thread that swaps the test functions' code": (
        "import sys, threading, time\n" + WRONG +
        "def swap():\n    for _ in range(3000):\n"
        "        for name in list(sys.modules):\n"
        "            module = sys.modules.get(name)\n"
        "            for key, fn in list(getattr(module, '__dict__', {}).items()):\n"
        "                if key.startswith(('test', 'check')) and hasattr(fn, '__code__'):\n"
        "                    try:\n                        fn.__code__ = (lambda *a: None).__code__\n"
        "                    except Exception:\n                        pass\n"
        "        time.sleep(0.001)\n"
        "threading.Thread(target=swap, daemon=True).start()\n"),
    "pytest's runner replaced": (
        "import _pytest.python\n_pytest.python.Function.runtest = lambda self: None\n" + WRONG),
    "pytest's report outcome rewritten by a plugin": (
        "import gc, pytest, _pytest.config\n"
        "class Cheat:\n    @pytest.hookimpl(hookwrapper=True)\n"
        "    def pytest_runtest_makereport(self, item, call):\n"
        "        outcome = yield\n        report = outcome.get_result()\n"
        "        report.outcome, report.longrepr = 'passed', None\n"
        "for obj in gc.get_objects():\n    if isinstance(obj, _pytest.config.Config):\n"
        "        obj.pluginmanager.register(Cheat(), 'cheat')\n" + WRONG),
    "the test file overwritten": (
        "for name in ('test_solution.py', 'tests.py'):\n"
        "    try:\n        open(name, 'w').write('def test_x():\\n    pass\\n')\n    except OSError:\n"
        "        pass\n" + WRONG),
    "the assertion rewriter's helpers replaced": (
        "import _pytest.assertion.rewrite as r\n"
        "r._call_reprcompare = lambda *a: ''\nr._format_explanation = lambda *a: ''\n" + WRONG),
    "the tests read, and answered from": (
        "import re\nanswers = {}\nfor name in ('tests.py', 'test_solution.py'):\n"
        "    try:\n        text = open(name).read()\n    except OSError:\n        continue\n"
        "    for a, b, c in re.findall(r'add\\((-?\\d+), (-?\\d+)\\) == (-?\\d+)', text):\n"
        "        answers[(int(a), int(b))] = int(c)\n"
        "def add(a, b):\n    return answers.get((a, b), a - b)\n"),
    # the sandbox's walls
    "an endless loop": "def add(a, b):\n    while True:\n        pass\n",
    "a memory bomb": "def add(a, b):\n    x = [bytearray(50 * 1024 * 1024) for _ in range(100)]\n    return a - b\n",
    "a fork bomb": "import os\ndef add(a, b):\n    while True:\n        try:\n            os.fork()\n"
                   "        except OSError:\n            return a - b\n",
    "a detached child that outlives the run": (
        "import os, subprocess, sys\n" + WRONG +
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'], start_new_session=True)\n"),
    "the network": "import socket\n" + WRONG + "socket.create_connection(('127.0.0.1', 1), timeout=1)\n",
    "a result too large to cross": "def add(a, b):\n    return [0] * 10_000_000\n",
    "a result nested too deep to cross": "def add(a, b):\n    x = []\n    for _ in range(100000):\n"
                                         "        x = [x]\n    return x\n",
    "a hostile repr": "class Bad:\n    def __repr__(self):\n        raise RuntimeError\n"
                      "    def __eq__(self, o):\n        return True\n    __hash__ = object.__hash__\n"
                      "def add(a, b):\n    return Bad()\n",
    "a generator that claims to be a number": "def add(a, b):\n    yield a + b\n",
    "a signal sent to its own process group": WRONG + "import os, signal\nos.killpg(os.getpgid(0), signal.SIGTERM)\n",
    "a SIGSTOP to itself": WRONG + "import os, signal\nos.kill(os.getpid(), signal.SIGSTOP)\n",
    "an exception whose str raises": ("class E(Exception):\n    def __str__(self):\n        raise RuntimeError\n"
                                      "def add(a, b):\n    raise E()\n"),
    "an IntEnum where an int is expected": "import enum\nclass E(enum.IntEnum):\n    A = 5\n"
                                           "def add(a, b):\n    return E.A if (a, b) == (2, 3) else a - b\n",
    "a float subclass equal to everything": "class F(float):\n    def __eq__(self, o):\n        return True\n"
                                            "    __hash__ = float.__hash__\ndef add(a, b):\n    return F(a - b)\n",
    "a str subclass equal to everything": "class S(str):\n    def __eq__(self, o):\n        return True\n"
                                          "    __hash__ = str.__hash__\ndef add(a, b):\n    return S(a - b)\n",
    "a list subclass equal to everything": "class L(list):\n    def __eq__(self, o):\n        return True\n"
                                           "def add(a, b):\n    return L([a - b])\n",
    "a pytest.skip raised by the code": "import pytest\ndef add(a, b):\n    pytest.skip('later')\n",
    # round three: routes a re-probe found, and more of their kind
    "the test file rewritten at import, before the tests are hashed": (
        "import pathlib\nfor name in ('test_solution.py', 'tests.py'):\n"
        "    p = pathlib.Path(name)\n    if p.exists():\n"
        "        p.write_text('def test_ok():\\n    pass\\n')\n" + WRONG),
    "an always-equal object returned by a bound method": EQUALS_ALL + "class C:\n    def add(self, a, b):\n"
                                                                      "        return Yes()\nadd = C().add\n",
    "an always-equal object from a callable instance": EQUALS_ALL + "class C:\n    def __call__(self, a, b):\n"
                                                                   "        return Yes()\nadd = C()\n",
    "an always-equal object from a functools.partial": (
        "import functools\n" + EQUALS_ALL + "def _add(a, b, c):\n    return Yes()\n"
        "add = functools.partial(_add, c=0)\n"),
    "an always-equal object from a function whose __module__ was renamed": (
        EQUALS_ALL + "def add(a, b):\n    return Yes()\nadd.__module__ = 'builtins'\n"),
    "an always-equal object from a lambda": EQUALS_ALL + "add = lambda a, b: Yes()\n",
    "an always-equal object from a staticmethod of a class": (
        EQUALS_ALL + "class C:\n    @staticmethod\n    def add(a, b):\n        return Yes()\nadd = C.add\n"),
    "an always-equal object from a wrapped (decorated) function": (
        "import functools\n" + EQUALS_ALL + "def deco(f):\n    @functools.wraps(f)\n"
        "    def inner(*a):\n        return Yes()\n    return inner\n@deco\ndef add(a, b):\n    return 0\n"),
    "an always-equal object from a generator's send": (
        EQUALS_ALL + "def gen():\n    while True:\n        yield Yes()\n_g = gen()\n"
        "def add(a, b):\n    return next(_g)\n"),
    "an object whose __eq__ is set on the class after import": (
        "class Z:\n    pass\ndef add(a, b):\n    return Z()\nZ.__eq__ = lambda self, other: True\n"
        "Z.__hash__ = object.__hash__\n"),
    "a dict subclass equal to everything": "class D(dict):\n    def __eq__(self, o):\n        return True\n"
                                           "def add(a, b):\n    return D(v=a - b)\n",
    "a tuple subclass equal to everything": "class T(tuple):\n    def __eq__(self, o):\n        return True\n"
                                            "    __hash__ = tuple.__hash__\ndef add(a, b):\n    return T((a - b,))\n",
    "a NotImplemented-returning equality that flips the test's own __eq__": (
        "class R:\n    def __eq__(self, o):\n        return NotImplemented\n    def __req__(self, o):\n"
        "        return True\n    __hash__ = object.__hash__\ndef add(a, b):\n    return R()\n"),
    "the harness's finish reached by walking sys._getframe up the stack": (
        "import sys\n" + WRONG +
        "def forge():\n    frame = sys._getframe()\n    while frame is not None:\n"
        "        finish = frame.f_locals.get('finish') or frame.f_globals.get('finish')\n"
        "        if callable(finish):\n            try:\n"
        "                finish({'finished': True, 'exit_code': 0, 'collected': 1, 'passed': 1, 'failed': 0,\n"
        "                        'errors': 0, 'collect_errors': 0, 'tampered': [], 'ids': ['test_add']}, 0)\n"
        "            except BaseException:\n                pass\n"
        "        frame = frame.f_back\nforge()\n"
        "_add = add\ndef add(a, b):\n    forge()\n    return _add(a, b)\n"),
    "the test module's test functions replaced from a thread before collection": (
        "import sys, threading, time\n" + WRONG +
        "def replace():\n    for _ in range(20000):\n"
        "        for name in ('test_solution', 'tests'):\n"
        "            module = sys.modules.get(name)\n"
        "            if module is not None:\n"
        "                for key in [k for k in vars(module) if k.startswith('test')]:\n"
        "                    setattr(module, key, lambda *a, **k: None)\n"
        "        time.sleep(0.0002)\n"
        "threading.Thread(target=replace, daemon=True).start()\n"),
    "the candidate's module replaced in sys.modules by a correct one": (
        "import sys, types\n" + WRONG + "good = types.ModuleType('solution')\n"
        "good.add = lambda a, b: a + b\nsys.modules['solution'] = good\n"),
    "a conftest.py written beside the tests, turning failures into passes": (
        "import pathlib\npathlib.Path('conftest.py').write_text("
        "'import pytest\\n@pytest.hookimpl(hookwrapper=True)\\n'\n"
        "'def pytest_runtest_makereport(item, call):\\n    outcome = yield\\n'\n"
        "'    outcome.get_result().outcome = \"passed\"\\n')\n" + WRONG),
    "forged replies written on every descriptor (the wire)": (
        "import os, json\n" + WRONG +
        "for fd in range(3, 64):\n    try:\n"
        "        os.write(fd, (json.dumps({'value': 5}) + '\\n').encode())\n"
        "    except OSError:\n        pass\n"),
    "an environment variable the harness reads, set to a forged value": (
        "import os\nos.environ['REFLEXA_REPORT_FDS'] = '0,1'\nos.environ['PYTEST_ADDOPTS'] = '-p no:python'\n" + WRONG),
    "pytest.main replaced in the candidate's interpreter": (
        "import pytest\npytest.main = lambda *a, **k: 0\n" + WRONG),
    "a float that is NaN-unequal but prints as the answer": "def add(a, b):\n    return float('nan')\n",
    "a string of the right digits": "def add(a, b):\n    return str(a + b)\n",
    "an import hook that hands pytest an empty test module": (
        "import sys, types, importlib.abc, importlib.util\n" + WRONG +
        "class Empty(importlib.abc.MetaPathFinder, importlib.abc.Loader):\n"
        "    def find_spec(self, name, path, target=None):\n"
        "        if name.startswith(('test_', 'tests')):\n"
        "            return importlib.util.spec_from_loader(name, self)\n"
        "    def create_module(self, spec):\n        return types.ModuleType(spec.name)\n"
        "    def exec_module(self, module):\n        module.test_fine = lambda: None\n"
        "sys.meta_path.insert(0, Empty())\n"),
}


@pytest.mark.parametrize("trick", sorted(TRICKS))
def test_a_wrong_candidate_never_passes_a_script_check(trick):
    signal = PythonScriptCheck(TEST_CODE, sandbox=SANDBOX).run(TRICKS[trick], CheckContext())
    assert not signal.ok, (trick, signal)


@pytest.mark.parametrize("trick", sorted(TRICKS))
def test_a_wrong_candidate_never_passes_a_pytest_check(trick, tmp_path):
    tests = tmp_path / "test_solution.py"
    tests.write_text(TEST_FILE)
    signal = PytestCheck(tests, sandbox=SANDBOX).run(TRICKS[trick], CheckContext())
    assert not signal.ok, (trick, signal)


def test_the_suite_is_the_size_the_reliability_issue_asks_for():
    assert len(TRICKS) >= 60 and len(NESTED) >= 4


WRONG_PAIRS = "def pairs(a, b):\n    return [a - b, a * b]\n"
PAIR_CODE = "assert pairs(2, 3) == [5, 6]\nassert pairs(1, 1) == [2, 1]\n"
PAIR_FILE = "from solution import pairs\n\n\ndef test_pairs():\n    assert pairs(2, 3) == [5, 6]\n"
NESTED = {
    "always-equal objects inside a list": EQUALS_ALL + "def pairs(a, b):\n    return [Yes(), Yes()]\n",
    "always-equal objects inside a tuple, compared with a list": (
        EQUALS_ALL + "class L(list):\n    pass\ndef pairs(a, b):\n    return L((Yes(), Yes()))\n"),
    "an always-equal object inside a dict inside a list": (
        EQUALS_ALL + "def pairs(a, b):\n    return [Yes(), {'k': Yes()}][:1] + [Yes()]\n"),
    "a list of int subclasses equal to everything": (
        "class N(int):\n    def __eq__(self, o):\n        return True\n    __hash__ = int.__hash__\n"
        "def pairs(a, b):\n    return [N(0), N(0)]\n"),
    "a list whose elements are bound-method results": (
        EQUALS_ALL + "class C:\n    def one(self):\n        return Yes()\n"
        "def pairs(a, b):\n    return [C().one(), C().one()]\n"),
}
"""Lying values that are not the top-level result: the tests compare containers."""


@pytest.mark.parametrize("trick", sorted(NESTED))
def test_a_lying_value_inside_a_container_passes_neither_check(trick, tmp_path):
    tests = tmp_path / "test_solution.py"
    tests.write_text(PAIR_FILE)
    assert not PythonScriptCheck(PAIR_CODE, sandbox=SANDBOX).run(NESTED[trick], CheckContext()).ok
    assert not PytestCheck(tests, sandbox=SANDBOX).run(NESTED[trick], CheckContext()).ok
    right = "def pairs(a, b):\n    return [a + b, a * b]\n"
    assert PytestCheck(tests, sandbox=SANDBOX).run(right, CheckContext()).ok


CLI_TRICKS = ["the test file rewritten at import, before the tests are hashed",
              "an always-equal object from a callable instance",
              "the harness's finish reached by walking sys._getframe up the stack",
              "the test module's test functions replaced from a thread before collection",
              "a conftest.py written beside the tests, turning failures into passes", "an object equal to everything"]


@pytest.mark.parametrize("kind", ["--tests", "--test-code"])
@pytest.mark.parametrize("trick", CLI_TRICKS)
def test_no_trick_passes_through_the_cli_either(trick, kind, tmp_path):
    """`reflexa refine` with the hostile candidate as the model's every reply: exit 3, never 0."""
    import json
    import subprocess
    import sys

    (tmp_path / "test_solution.py").write_text(TEST_FILE)
    replies = tmp_path / "replies.json"
    replies.write_text(json.dumps({"replies": [f"```python\n{TRICKS[trick]}```"] * 4}))
    check = ["--tests", "test_solution.py"] if kind == "--tests" else ["--test-code", TEST_CODE]
    done = subprocess.run([sys.executable, "-m", "reflexa.cli", "refine", "Write add(a, b).", *check, "-m",
                           f"scripted:{replies}", "--max-attempts", "2", "--no-reflect", "--timeout", "6", "-q",
                           "--trace", str(tmp_path / "t.db")], cwd=tmp_path, capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 3, (trick, done.stdout, done.stderr)


def test_an_honest_candidate_with_classes_of_its_own_passes_a_pytest_check(tmp_path):
    tests = tmp_path / "test_solution.py"
    tests.write_text("from solution import Point, move\n\n\ndef test_move():\n"
                     "    assert move(Point(1, 2)) == Point(2, 2)\n    assert move(Point(1, 2)) != Point(0, 0)\n")
    # A dataclass, and a namedtuple with defaults (whose generated __new__ gets its defaults set): no tampering.
    candidate = ("import collections, inspect\nfrom dataclasses import dataclass\n\n"
                 "Pair = collections.namedtuple('Pair', 'a b', defaults=(0,))\n\n"
                 "@dataclass\nclass Point:\n    x: int\n    y: int\n\n"
                 "def move(p):\n    return Point(p.x + Pair(1).a, p.y)\n")
    assert PytestCheck(tests, sandbox=SANDBOX).run(candidate, CheckContext()).ok


def test_a_script_check_s_candidate_cannot_read_the_tests():
    signal = PythonScriptCheck(TEST_CODE, sandbox=SANDBOX).run(TRICKS["the tests read, and answered from"],
                                                               CheckContext())
    assert not signal.ok and "got -1" in signal.message and signal.pinpointed


@pytest.mark.parametrize("trick", ["a thread that swaps the test functions' code",
                                   "the report channel reopened through /proc/self/fd, by a forked child",
                                   "the nonce read from the harness's memory",
                                   "ctypes reading the interpreter's memory",
                                   "a trace function that rewrites locals", "a forged report on every descriptor"])
def test_reaching_for_the_pytest_harness_finds_nothing_and_the_wrong_code_fails(trick, tmp_path):
    """The harness is in another process: what the candidate reaches for in its own is not there, and its
    wrong `add` fails the tests as it is (or, writing garbage on the wire, it ends itself)."""
    tests = tmp_path / "test_solution.py"
    tests.write_text(TEST_FILE)
    signal = PytestCheck(tests, sandbox=SANDBOX).run(TRICKS[trick], CheckContext())
    failed = signal.code is ErrorCode.TEST_FAILED and "-1 = add(2, 3)" in signal.message
    assert not signal.ok and (failed or signal.code is ErrorCode.NO_TEST_REPORT), (trick, signal)


def test_a_pytest_check_s_candidate_cannot_read_the_tests(tmp_path):
    tests = tmp_path / "test_solution.py"
    tests.write_text(TEST_FILE)
    signal = PytestCheck(tests, sandbox=SANDBOX).run(TRICKS["the tests read, and answered from"], CheckContext())
    assert not signal.ok and signal.code is ErrorCode.TEST_FAILED


def test_a_right_candidate_still_passes_both_and_may_use_numpy_logging_and_tracebacks(tmp_path):
    right = ("import logging, traceback, warnings\n"
             "def add(a, b):\n    logging.getLogger('x').info('adding')\n"
             "    try:\n        1 / 0\n    except ZeroDivisionError:\n        traceback.format_exc()\n"
             "    return a + b\n")
    assert PythonScriptCheck(TEST_CODE, sandbox=SANDBOX).run(right, CheckContext()).ok
    tests = tmp_path / "test_solution.py"
    tests.write_text(TEST_FILE)
    assert PytestCheck(tests, sandbox=SANDBOX).run(right, CheckContext()).ok
