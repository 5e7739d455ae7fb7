"""A secret canary in the environment and in the working directory's .env never reaches a signal: not
through the sandbox's environment, not through /proc, not through a scratch copy, not echoed back."""

import os
import sys
from pathlib import Path

import pytest

from reflexa.evaluate.checks import CheckContext, CommandCheck, PytestCheck, PythonScriptCheck, run_checks

ENV_CANARY = "canary-env-7c1d93e2b5a4"
DOTENV_CANARY = "canary-dotenv-4e8a0b6f2d19"
CANARIES = (ENV_CANARY, DOTENV_CANARY)

# Everything a candidate might try to find a secret with.
SNOOP = (
    "import os, glob\n"
    "print(dict(os.environ))\n"
    "for path in glob.glob('/proc/*/environ'):\n"
    "    try:\n        print(path, open(path, 'rb').read())\n    except OSError:\n        pass\n"
    "for path in ['.env', os.path.expanduser('~/.env')]:\n"
    "    try:\n        print(path, open(path).read())\n    except OSError:\n        pass\n"
)


@pytest.fixture()
def workdir(tmp_path, monkeypatch):
    monkeypatch.setenv("REFLEXA_CANARY_TOKEN", ENV_CANARY)
    work = tmp_path / "project"
    work.mkdir()
    (work / ".env").write_text(f"export SERVICE_API_KEY='{DOTENV_CANARY}'\nDEBUG=1\n")
    (work / "snoop.py").write_text(SNOOP + f"print(open({str(work / '.env')!r}).read())\n")
    return work


def _assert_clean(signals):
    for signal in signals:
        text = f"{signal.message}\n{signal.evidence}"
        for canary in CANARIES:
            assert canary not in text, (signal.source, text[-500:])


def test_command_check_never_shows_a_canary(workdir):
    commands = [
        "cat .env; env; exit 1",
        f"cat {workdir / '.env'}; exit 1",  # read by absolute path: the file system is readable
        f"{sys.executable} snoop.py; exit 1",
        f"echo {ENV_CANARY}; echo {DOTENV_CANARY}",  # the command itself holds them (and passes)
    ]
    signals = [CommandCheck(cmd, out="answer.py", workdir=workdir).run("print(1)", CheckContext()) for cmd in commands]
    _assert_clean(signals)
    assert any("[REDACTED]" in s.evidence for s in signals)  # they were there, and were redacted


def test_code_checks_never_show_a_canary(workdir, tmp_path):
    # It snoops everywhere (the .env by its absolute path too), and echoes the env canary it was shown.
    snooping_candidate = (
        SNOOP + f"print(open({str(workdir / '.env')!r}).read())\n"
        f"print({ENV_CANARY!r})\ndef f():\n    return {ENV_CANARY!r}\n"
    )
    tests = tmp_path / "test_f.py"
    tests.write_text("from solution import f\n\ndef test_f():\n    assert f() == 1\n")
    checks = [PythonScriptCheck("assert f() == 1\n"), PytestCheck(tests)]
    verdict = run_checks(checks, snooping_candidate, CheckContext())
    _assert_clean(verdict.signals)
    for canary in CANARIES:
        assert canary not in verdict.feedback
    # The env canary is in this process's environment; the sandboxed child never had it.
    assert os.environ["REFLEXA_CANARY_TOKEN"] == ENV_CANARY


def test_scratch_copy_holds_no_dotfiles(workdir):
    check = CommandCheck("ls -A; exit 1", out="answer.py", workdir=workdir)
    listing = check.run("print(1)", CheckContext()).evidence
    assert "snoop.py" in listing and ".env" not in listing
    assert not any(Path(workdir).glob("answer.py"))


def test_a_canary_reaches_neither_the_store_nor_any_prompt(workdir, monkeypatch, tmp_path):
    from reflexa import ScriptedModel, Session, SQLiteStore, refine

    monkeypatch.chdir(workdir)
    trace = tmp_path / "trace.db"
    snoop = f"```python\n{SNOOP}\nprint(open({str(workdir / '.env')!r}).read())\n```"
    lesson = {"failure_step": "1", "observed_mismatch": "exit 1", "root_cause": "r", "correction": "c"}
    model = ScriptedModel([snoop, lesson, snoop, lesson, snoop])
    check = CommandCheck(f"{sys.executable} answer.py; env; exit 1", out="answer.py", workdir=workdir)
    refine("print something", [check], session=Session(model=model, store=SQLiteStore(trace)))
    prompts = repr(model.prompts)
    stored = b"".join(p.read_bytes() for p in tmp_path.glob("trace.db*"))
    for canary in CANARIES:
        assert canary not in prompts
        assert canary.encode() not in stored
