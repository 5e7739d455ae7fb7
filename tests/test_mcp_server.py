"""`reflexa mcp`: the real command, started as a process and driven over stdio by the MCP SDK's own client, on
the scripted model and a trace store under tmp_path."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp")

from mcp import Client  # noqa: E402 - after the skip: the SDK is an optional extra
from mcp.client.stdio import StdioServerParameters  # noqa: E402

ADD = "```python\ndef add(a, b):\n    return a + b\n```"
TOOLS = {"refine", "research", "runs", "show"}
BUDGET_FIELDS = {"max_tokens", "max_calls", "max_seconds", "max_attempts", "max_reflections", "max_rounds",
                 "budget", "timeout"}
RESEARCH = [
    {"answer": "[UNCERTAIN: in France]", "reflection": {"missing": ["city of the Eiffel Tower"], "superfluous": []},
     "search_queries": ["Eiffel Tower"]},
    {"answer": "The Eiffel Tower is in Paris [1].", "reflection": {"missing": [], "superfluous": []},
     "search_queries": [], "evidence_used": [1], "quote": "The Eiffel Tower is a wrought-iron lattice tower in Paris"},
]


def serve(tmp_path: Path, replies: list[Any], talk: Callable[[Client], Awaitable[None]], *flags: str) -> None:
    """Start `reflexa mcp` on a scripted model and a store in tmp_path, and run `talk` with a client of it. Any
    line on the server's stdout that is no protocol message fails the test."""
    (tmp_path / "replies.json").write_text(json.dumps(replies))
    # The client passes on only a few variables: the isolated HOME and data folders must be given explicitly.
    env = {name: value for name, value in os.environ.items() if name.startswith(("HOME", "XDG_", "REFLEXA_"))}
    params = StdioServerParameters(
        command=sys.executable, cwd=str(tmp_path), env=env,
        args=["-m", "reflexa.cli", "mcp", "--model", f"scripted:{tmp_path / 'replies.json'}",
              "--trace", str(tmp_path / "trace.db"), *flags])
    stray: list[Exception] = []

    async def record(message: Any) -> None:
        if isinstance(message, Exception):  # e.g. a line of stdout that is not JSON-RPC
            stray.append(message)

    async def main() -> None:
        with anyio.fail_after(45):
            async with Client(params, read_timeout_seconds=30, message_handler=record) as client:
                await talk(client)

    anyio.run(main)
    assert not stray, f"the server wrote something other than protocol messages: {stray}"


def text(result: Any) -> str:
    return " ".join(block.text for block in result.content if getattr(block, "text", None))


def test_tools_list_names_the_four_tools_with_schemas_and_no_budget_fields(tmp_path):
    listed: dict[str, Any] = {}

    async def talk(client: Client) -> None:
        listed.update({tool.name: tool for tool in (await client.list_tools()).tools})

    serve(tmp_path, [], talk)
    assert set(listed) == TOOLS
    schemas = {name: tool.input_schema["properties"] for name, tool in listed.items()}
    assert set(schemas["refine"]) == {"task", "tests", "test_code", "check", "regex", "out"}
    assert listed["refine"].input_schema["required"] == ["task"]
    assert set(schemas["research"]) == {"question", "corpus"}
    assert set(schemas["runs"]) == {"limit"} and set(schemas["show"]) == {"run_id"}
    assert not any(BUDGET_FIELDS & set(properties) for properties in schemas.values())
    assert "passed" in listed["refine"].output_schema["properties"]
    for name in ("refine", "research"):  # they store a run: not read-only, but they change nothing there
        assert listed[name].annotations.read_only_hint is False
        assert listed[name].annotations.destructive_hint is False
    assert listed["runs"].annotations.read_only_hint is True and listed["show"].annotations.read_only_hint is True
    assert "check" in listed["refine"].description


def test_refine_passes_and_show_and_runs_find_the_run(tmp_path):
    got: dict[str, Any] = {}

    async def talk(client: Client) -> None:
        # A budget field from the caller is no argument of the tool: the server's own flag holds.
        got["refine"] = await client.call_tool("refine", {"task": "Write add(a, b).", "max_tokens": 1,
                                                          "test_code": "assert add(2, 3) == 5"})
        run_id = (got["refine"].structured_content or {}).get("run_id", "")
        got["show"] = await client.call_tool("show", {"run_id": run_id[:8]})
        got["runs"] = await client.call_tool("runs", {"limit": 1000})

    serve(tmp_path, [ADD], talk, "--max-tokens", "5000", "--max-attempts", "2")
    refine = got["refine"]
    assert not refine.is_error, text(refine)
    reply = refine.structured_content
    assert reply["passed"] is True and reply["stop_reason"] == "PASSED" and reply["note"] is None
    assert "return a + b" in reply["candidate"]
    assert reply["usage"]["calls"] == 1 and reply["usage"]["tokens"] > 0
    shown = got["show"].structured_content
    assert not got["show"].is_error and shown["run_id"] == reply["run_id"]
    assert shown["loop"] == "refine" and shown["stop_reason"] == "PASSED" and "return a + b" in shown["answer"]
    kinds = [step["kind"] for step in shown["steps"]]
    assert kinds[0] == "model_call" and "attempt" in kinds and kinds[-1] == "stop"
    assert any(step["text"] == "PASS" for step in shown["steps"])
    listed = got["runs"].structured_content["runs"]
    assert [(r["run_id"], r["loop"], r["status"], r["stop_reason"]) for r in listed] == [
        (reply["run_id"], "refine", "finished", "PASSED")]
    assert listed[0]["task"] == "Write add(a, b)."

    from reflexa.trace.sqlite import SQLiteStore

    store = SQLiteStore(tmp_path / "trace.db")
    spec = store.get_run(reply["run_id"]).meta["spec"]
    store.close()
    assert spec["max_tokens"] == 5000 and spec["max_attempts"] == 2  # the server's flags, not the caller's 1


def test_refine_with_tests_as_source_text_and_a_failing_run_notes_why(tmp_path):
    got: dict[str, Any] = {}
    tests = "from solution import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"

    async def talk(client: Client) -> None:
        got["tests"] = await client.call_tool("refine", {"task": "Write add(a, b).", "tests": tests})
        got["failing"] = await client.call_tool("refine", {"task": "Write add(a, b).", "regex": r"^\d+$"})

    serve(tmp_path, [ADD, ADD], talk, "--max-attempts", "1", "--max-calls", "1")
    assert got["tests"].structured_content["passed"] is True, text(got["tests"])
    failing = got["failing"].structured_content
    assert not got["failing"].is_error and failing["passed"] is False
    assert failing["stop_reason"] != "PASSED" and failing["stop_reason"] in failing["note"]
    assert "\n" not in failing["note"]


def test_bad_arguments_are_tool_errors_with_a_clear_message(tmp_path):
    got: dict[str, Any] = {}

    async def talk(client: Client) -> None:
        got["no check"] = await client.call_tool("refine", {"task": "Write add(a, b)."})
        got["no corpus"] = await client.call_tool("research", {"question": "Why?", "corpus": "no-such-folder"})
        got["bad regex"] = await client.call_tool("refine", {"task": "t", "regex": "("})
        got["no run"] = await client.call_tool("show", {"run_id": "feedface"})

    serve(tmp_path, [], talk)
    assert all(result.is_error for result in got.values())
    assert "refine needs a check: give tests, test_code, check or regex" in text(got["no check"])
    assert "corpus: not a folder" in text(got["no corpus"]) and "no-such-folder" in text(got["no corpus"])
    assert "regex" in text(got["bad regex"])
    assert "no run has an id starting with 'feedface'" in text(got["no run"])
    assert not any("Traceback" in text(result) for result in got.values())


def test_research_answers_with_citations(tmp_path):
    corpus = tmp_path / "docs"
    corpus.mkdir()
    (corpus / "eiffel.md").write_text("The Eiffel Tower is a wrought-iron lattice tower in Paris, France.\n")
    got: dict[str, Any] = {}

    async def talk(client: Client) -> None:
        got["research"] = await client.call_tool("research", {"question": "Where is the Eiffel Tower?",
                                                              "corpus": "docs"})  # relative to the server's folder

    serve(tmp_path, RESEARCH, talk)
    reply = got["research"].structured_content
    assert not got["research"].is_error, text(got["research"])
    assert reply["passed"] is True and "Paris" in reply["answer"] and "[1]" in reply["answer"]
    assert reply["citations"] == [{"n": 1, "title": "eiffel", "source": "eiffel.md#0"}]


NOISY = """import os, sys
from reflexa.mcp import server

find_run = server.find_run


def noisy(store, run_id):  # what a library might do inside a tool: print, or write to file descriptor 1
    print("noise from print")
    os.write(1, b"noise on fd 1\\n")
    return find_run(store, run_id)


server.find_run = noisy
from reflexa.cli.app import main

sys.argv = ["reflexa", *sys.argv[1:]]
main()
"""
HELLO = [{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
             "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}}},
         {"jsonrpc": "2.0", "method": "notifications/initialized"}]


def message(line: str) -> dict[str, Any] | None:
    """A line of the server's stdout as a JSON-RPC message, or None when it is anything else."""
    try:
        data = json.loads(line)
    except ValueError:
        return None
    return data if isinstance(data, dict) and data.get("jsonrpc") == "2.0" else None


def test_stdout_carries_protocol_messages_only(tmp_path):
    """Raw JSON-RPC, to see every byte of stdout: what a tool prints, or writes to descriptor 1, goes to stderr."""
    (tmp_path / "replies.json").write_text(json.dumps([]))
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "show", "arguments": {"run_id": "f"}}}
    # Buffered, as a client starts it: an unbuffered print would reach the diverted descriptor 1 at once.
    env = {name: value for name, value in os.environ.items() if name != "PYTHONUNBUFFERED"}
    server = subprocess.Popen(
        [sys.executable, "-c", NOISY, "mcp", "--model", f"scripted:{tmp_path / 'replies.json'}", "--trace",
         str(tmp_path / "trace.db")], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, cwd=tmp_path, env=env)
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line) for line in server.stdout], daemon=True)
    reader.start()
    seen: list[str] = []
    try:
        server.stdin.write("".join(json.dumps(m) + "\n" for m in [*HELLO, call]))
        server.stdin.flush()
        while not any((message(line) or {}).get("id") == 2 for line in seen):
            seen.append(lines.get(timeout=30))
        server.stdin.close()  # the client leaves: the server ends, and flushes whatever it buffered
        server.wait(timeout=30)
    finally:
        server.kill()
    reader.join(timeout=10)
    seen += list(lines.queue)
    stderr = server.stderr.read()
    assert [line for line in seen if message(line) is None] == []
    answer = next(m for m in map(message, seen) if m and m.get("id") == 2)
    assert answer["result"]["isError"] is True and "no run has an id" in answer["result"]["content"][0]["text"]
    assert "noise from print" in stderr and "noise on fd 1" in stderr


def run_reflexa(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


def test_without_the_sdk_the_command_says_what_to_install():
    done = run_reflexa("import sys; sys.modules['mcp'] = None\n"
                       "from reflexa.cli.app import main\nsys.argv = ['reflexa', 'mcp']\nmain()")
    assert done.returncode == 2, done.stderr
    assert "needs the MCP SDK" in done.stderr and "pip install 'reflexa[mcp]'" in done.stderr
    assert done.stdout == "" and "Traceback" not in done.stderr


def test_importing_reflexa_and_its_cli_does_not_import_the_sdk():
    done = run_reflexa("import sys, reflexa, reflexa.mcp, reflexa.cli.app\n"
                       "print(sorted(m for m in sys.modules if m == 'mcp' or m.startswith('mcp.')))")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


# --- hostile clients ---------------------------------------------------------------------------------------------

SECRET = "hunter2-server-only-9f3a"


@pytest.fixture()
def server_folder():
    """A server folder outside the folders every sandboxed run hides anyway (/tmp, home): in the checkout's
    build/ folder, as a project folder would be."""
    import shutil
    import uuid

    folder = Path(__file__).resolve().parents[1] / "build" / f"mcp-server-{uuid.uuid4().hex[:8]}"
    folder.mkdir(parents=True)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_a_client_s_checks_cannot_read_the_server_s_folder_or_its_secrets(server_folder):
    """The server's folder holds a .env: a client's test_code, check command or tests cannot read it (the
    folder is hidden from every sandboxed run), and nothing the server returns carries its value."""
    (server_folder / ".env").write_text(f"DB_PASSWORD={SECRET}\n")
    env_file = str(server_folder / ".env")
    got: dict[str, Any] = {}

    async def talk(client: Client) -> None:
        got["test_code"] = await client.call_tool("refine", {
            "task": "Write add(a, b).", "test_code": f"print(open({env_file!r}).read())\nassert False"})
        got["check"] = await client.call_tool("refine", {"task": "Write add(a, b).",
                                                         "check": f"cat {env_file} ../.env; exit 1"})
        got["tests"] = await client.call_tool("refine", {
            "task": "Write add(a, b).", "tests": f"import solution\n\n\ndef test_x():\n"
                     f"    assert False, open({env_file!r}).read()\n"})

    serve(server_folder, [ADD] * 3, talk, "--max-attempts", "1")
    for name, result in got.items():
        reply = json.dumps(result.structured_content) + text(result)
        assert SECRET not in reply, (name, reply)
        assert not result.is_error and result.structured_content["passed"] is False, (name, reply)
    assert "No such file" in got["test_code"].structured_content["note"]


@pytest.mark.parametrize("path", ["~", "../", "..", "/etc", "docs/../../outside", "link"])
def test_paths_a_client_names_stay_inside_the_server_s_root(tmp_path, path):
    """A corpus or tests path outside the root is refused (no index file is written there); a symlink out of
    the root counts as outside; `~` is a name inside the root, never the server user's home."""
    root = tmp_path / "root"
    (root / "docs").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    (root / "link").symlink_to(tmp_path / "outside")
    got: dict[str, Any] = {}

    async def talk(client: Client) -> None:
        got["corpus"] = await client.call_tool("research", {"question": "Where?", "corpus": path})
        got["tests"] = await client.call_tool("refine", {"task": "t", "tests": f"{path.rstrip('/')}/t.py"})

    serve(root, [], talk, "--root", str(root))
    for result in got.values():
        said = text(result)
        assert result.is_error and "Traceback" not in said, said
        assert (f"{root}/~" in said) if path == "~" else ("outside the server's root" in said), said
    assert not list(tmp_path.rglob(".reflexa-index*")) or all(p.is_relative_to(root) for p in
                                                              tmp_path.rglob(".reflexa-index*"))


def test_a_backtracking_regex_ends_in_time_and_another_call_is_answered_meanwhile(tmp_path):
    """`(a|aa)+$` on 60 characters would hold `re` for hours: the search stops at its limit (a TIMEOUT
    note). A long check (sleep) in one call does not hold up another call: `runs` answers first."""
    order: list[str] = []
    got: dict[str, Any] = {}
    slow = "```\n" + "a" * 60 + "!\n```"

    async def talk(client: Client) -> None:
        got["regex"] = await client.call_tool("refine", {"task": "t", "regex": r"(a|aa)+$"})

        async def long_check() -> None:
            got["slow"] = await client.call_tool("refine", {"task": "Write add(a, b).", "check": "sleep 8"})
            order.append("refine")

        async with anyio.create_task_group() as group:
            group.start_soon(long_check)
            await anyio.sleep(1)
            got["runs"] = await client.call_tool("runs", {"limit": 5})
            order.append("runs")

    serve(tmp_path, [slow, ADD], talk, "--max-attempts", "1")
    assert got["regex"].structured_content["passed"] is False
    assert "took longer than" in got["regex"].structured_content["note"]
    assert order == ["runs", "refine"] and not got["runs"].is_error


def test_a_killed_server_leaves_no_scratch_folder(tmp_path):
    """SIGKILL in the middle of a client's check: the watchdog removes every scratch folder the server made."""
    import signal
    import time

    scratch = tmp_path / "tmp"
    scratch.mkdir()
    (tmp_path / "replies.json").write_text(json.dumps([ADD]))
    env = {**os.environ, "TMPDIR": str(scratch)}
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "refine", "arguments": {
        "task": "Write add(a, b).", "check": "sleep 60"}}}
    server = subprocess.Popen(
        [sys.executable, "-m", "reflexa.cli", "mcp", "--model", f"scripted:{tmp_path / 'replies.json'}",
         "--trace", str(tmp_path / "trace.db")], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, text=True, cwd=tmp_path, env=env)
    try:
        server.stdin.write("".join(json.dumps(m) + "\n" for m in [*HELLO, call]))
        server.stdin.flush()
        deadline = time.monotonic() + 60
        while not list(scratch.glob("reflexa-mcp-*/reflexa-sandbox-*")) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert list(scratch.glob("reflexa-mcp-*/reflexa-sandbox-*")), "the check never started"
        server.send_signal(signal.SIGKILL)
        server.wait(10)
        deadline = time.monotonic() + 30
        while list(scratch.iterdir()) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert list(scratch.iterdir()) == []
    finally:
        server.kill()
