"""Bad CLI input gets one line of error and exit 2 (or a clear failing signal), never a traceback."""

import json
import os
import sqlite3

import pytest
from typer.testing import CliRunner

from reflexa import SQLiteStore
from reflexa.cli.app import app

runner = CliRunner()


@pytest.fixture()
def work(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "binary.md").write_bytes(b"\x00\x01\x02binary")
    (tmp_path / "latin1.md").write_bytes("caf\xe9".encode("latin-1"))
    (tmp_path / "tests.py").write_text("import solution\n\n\ndef test_x():\n    assert solution\n")
    (tmp_path / "adir").mkdir()
    (tmp_path / "replies.json").write_text(json.dumps(["```\nx = 1\n```"]))
    (tmp_path / "notdb.sqlite").write_text("hello")
    (tmp_path / "syntax.py").write_text("def test_x(:\n")
    sqlite3.connect(tmp_path / "shop.sqlite").execute("CREATE TABLE t (x)").connection.commit()
    (tmp_path / "binary.json").write_bytes(b"\xff\xfe\x00garbage")
    os.symlink("/tmp/elsewhere.py", tmp_path / "link.py")
    SQLiteStore(os.environ["REFLEXA_TRACE"]).close()  # a trace to look runs up in (readers never create one)
    return tmp_path


CASES = [
    (["refine", "binary.md", "--tests", "tests.py"], "binary"),
    (["refine", "latin1.md", "--tests", "tests.py"], "UTF-8"),
    (["refine", "adir", "--tests", "tests.py"], "directory"),
    (["refine", "t", "--tests", "binary.md"], "binary"),
    (["refine", "t", "--tests", "missing.py"], "not found"),
    (["refine", "t", "--tests", "tests.py", "--out", "adir"], "must name a file"),
    (["refine", "t", "--tests", "tests.py", "--out", "link.py"], "symlink"),
    (["refine", "t", "--tests", "tests.py", "--out", "../../x.py"], "relative path inside"),
    (["refine", "t", "--tests", "tests.py", "--out", "/etc/x.py"], "relative path inside"),
    (["refine", "t", "--tests", "tests.py", "--timeout", "inf"], "timeout"),
    (["refine", "   ", "--tests", "tests.py"], "empty"),
    (["refine", "t"], "a refine task needs a check"),
    (["refine", "t", "--tests", "tests.py", "--context", "some"], "input should be 'feedback',"),
    (["react", "q", "--db", "notdb.sqlite"], "not an SQLite database"),
    (["react", "q", "--db", "adir"], "is a directory"),
    (["react", "q", "--db", "missing.sqlite"], "database not found"),
    (["research", "q", "--corpus", "missing"], "corpus: not a folder"),
    (["index", "tests.py"], "is a file, not a folder"),
    (["refine", "solve.py", "--tests", "tests.py"], "task file not found"),
    (["react", "  ", "--db", "shop.sqlite"], "the task is empty"),
    (["runs", "--loop", "bogus"], "--loop must be one of refine, react, trials, research, plan"),
    (["refine", "t", "--tests", "syntax.py"], "not valid Python"),
    (["refine", "t", "--tests", "tests.py", "--out", "tests.py"], "would overwrite the --tests file"),
    (["research", "q"], "corpus: required"),
    (["show", "%"], "no run has an id starting with"),
    (["show", "_"], "no run has an id starting with"),
    (["resume", "nope"], "no run has an id starting with"),
    (["refine", "t", "--tests", "tests.py", "-m", "scripted:."], "scripted"),
    (["refine", "t", "--tests", "tests.py", "-m", "scripted:binary.json"], "scripted"),
    (["refine", "t", "--tests", "tests.py", "-m", "local:/etc/passwd"], "not a GGUF"),
    (["refine", "t", "--tests", "tests.py", "-m", "openai:http://[::1/v1#m"], "url"),
    (["refine", "t", "--tests", "tests.py", "-m", "anthropic:claude-x"], "ANTHROPIC_API_KEY"),
    (["refine", "t", "--tests", "tests.py", "-m", ""], "empty"),
    # pathlib reads "" as ".": an empty path must not name the current folder
    (["index", ""], "is empty; give a path"),
    (["research", "q", "--corpus", " "], "is empty; give a path"),
    (["react", "q", "--db", ""], "is empty; give a path"),
    (["refine", "t", "--tests", ""], "is empty; give a path"),
    (["refine", "t", "--tests", "tests.py", "--out", ""], "is empty; give a path"),
    (["batch", "", "--loop", "refine"], "is empty; give a path"),
    (["refine", "/proc/self/mem", "--tests", "tests.py"], "cannot read the task file /proc/self/mem"),
    (["refine", "t", "--tests", "/proc/self/mem"], "cannot read"),
    (["run", "/proc/self/mem"], "cannot read"),
    (["batch", "/proc/self/mem", "--loop", "refine"], "cannot read"),
]


@pytest.mark.parametrize(("args", "message"), CASES, ids=[" ".join(c[0])[:60] for c in CASES])
def test_bad_input_is_one_clear_line(work, args, message):
    with_model = args[0] in ("refine", "react", "research") and "-m" not in args
    result = runner.invoke(app, [*args, "--model", "scripted:replies.json"] if with_model else args)
    assert result.exit_code == 2, result.output
    assert message.lower() in result.output.lower(), result.output
    assert "Traceback" not in result.output
    assert not (work / "x.py").exists()


def test_show_with_a_wildcard_never_matches_a_real_run(work):
    ran = runner.invoke(app, ["refine", "t", "--tests", "tests.py", "--model", "scripted:replies.json"])
    assert ran.exit_code in (0, 3), ran.output
    for wildcard in ("%", "_"):
        result = runner.invoke(app, ["show", wildcard])
        assert result.exit_code == 2


@pytest.mark.parametrize("kind", ["fifo", "socket", "loop", "unreadable", "kernel"])
@pytest.mark.parametrize("flag", ["task", "--tests"])
def test_a_task_or_tests_file_that_cannot_be_read_is_named_before_any_model_call(work, kind, flag):
    """A FIFO or socket was "not found"; a file that cannot be read was an internal error (tests) or was
    silently taken as the task's text (task)."""
    import socket as sockets
    import stat as stats

    path = work / f"odd-{kind}.md"
    if kind == "fifo":
        os.mkfifo(path)
        expected = "not a regular file"
    elif kind == "socket":
        server = sockets.socket(sockets.AF_UNIX)
        server.bind(str(path))
        expected = "not a regular file"
    elif kind == "loop":
        os.symlink(path, path)  # a link to itself: stat fails with ELOOP
        expected = "cannot read"
    elif kind == "kernel":
        os.symlink("/proc/self/mem", path)  # a regular file to stat and open whose read fails (EIO)
        expected = "cannot read"
    else:
        path.write_text("the task")
        os.chmod(path, 0)
        if os.access(path, os.R_OK):  # root reads it whatever its mode: make open fail another way
            pytest.skip("this user can read a file of mode 000")
        expected = "cannot read"
    args = ["refine", str(path), "--tests", "tests.py"] if flag == "task" else ["refine", "t", "--tests", str(path)]
    result = runner.invoke(app, [*args, "--model", "scripted:replies.json"])
    assert result.exit_code == 2 and expected in " ".join(result.output.split()), result.output
    assert "internal error" not in result.output
    assert stats.S_ISREG((work / "replies.json").stat().st_mode)


def test_an_out_module_the_tests_do_not_import_is_named_before_any_model_call(work):
    (work / "r.json").write_text(json.dumps([]))  # a model call would fail the run: none must happen
    result = runner.invoke(app, ["refine", "t", "--tests", "tests.py", "--out", "answer.py", "--model",
                                 "scripted:r.json"])
    assert result.exit_code == 2 and "does not import `answer`" in " ".join(result.output.split()), result.output
