"""Your own tools on the command line and in a spec: `module:function` and `.py` files."""

import json

import pytest
from typer.testing import CliRunner

from reflexa import ConfigError, ScriptedModel, Session, StopReason, TaskSpec
from reflexa.cli.app import app
from reflexa.tools.load import load_tools

runner = CliRunner()

TOOLS_FILE = '''
from reflexa import tool

@tool
def double(n: int) -> int:
    """Twice n."""
    return 2 * n

@tool(side_effect=True)
def launch(target: str) -> str:
    """Launch something."""
    return "launched " + target

def helper():  # not a tool: left out
    return 1
'''

MODULE = '''
from reflexa import tool

def shout(text: str) -> str:
    """Upper case."""
    return text.upper()

@tool
def whisper(text: str) -> str:
    """Lower case."""
    return text.lower()

BOTH = [shout, whisper]
'''


def act(tool_name, thought, **args):
    return {"action": {"thought": thought, "tool": tool_name, "args": args, "confidence": 0.9}}


@pytest.fixture
def folder(tmp_path, monkeypatch):
    (tmp_path / "my_tools.py").write_text(TOOLS_FILE)
    (tmp_path / "voice.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_a_file_gives_every_tool_in_it_and_a_module_its_named_functions(folder):
    tools = {t.name: t for t in load_tools(["my_tools.py", "voice:shout,voice:whisper", "voice:BOTH"], folder)}
    assert set(tools) == {"double", "launch", "shout", "whisper"}
    assert tools["launch"].side_effect and not tools["double"].side_effect
    assert tools["shout"].args_model.model_json_schema()["properties"]["text"]["type"] == "string"


@pytest.mark.parametrize(("ref", "said"), [
    ("missing.py", "tools file not found"),
    ("voice", "neither module:function nor a .py file"),
    ("voice:nothing", "voice has no 'nothing'"),
    ("no_such_module:f", "cannot import no_such_module"),
])
def test_a_bad_reference_is_a_clear_error(folder, ref, said):
    with pytest.raises(ConfigError, match=said):
        load_tools([ref], folder)


def test_a_file_without_tools_or_that_fails_to_load_is_named(folder):
    (folder / "empty.py").write_text("x = 1\n")
    (folder / "broken.py").write_text("raise RuntimeError('boom')\n")
    with pytest.raises(ConfigError, match="defines no @tool"):
        load_tools(["empty.py"], folder)
    with pytest.raises(ConfigError, match="broken.py failed to load: RuntimeError: boom"):
        load_tools(["broken.py"], folder)


def test_a_spec_with_tools_alone_runs_react_and_stores_absolute_paths(folder):
    spec = TaskSpec.parse({"loop": "react", "task": "Double 21", "tools": ["my_tools.py"],
                           "validate": "test \"$REFLEXA_ANSWER\" = 42"}).resolved(folder)
    assert spec.tools == [str(folder / "my_tools.py")]
    model = ScriptedModel([act("double", "double it", n=21), act("final_answer", "done", answer="42")])
    result = spec.run(Session(model=model))
    assert result.stop_reason is StopReason.PASSED and result.output == "42"


def test_a_spec_needs_some_tools_and_checks_them_before_running(folder):
    with pytest.raises(ConfigError, match="needs tools: db"):
        TaskSpec.parse({"loop": "react", "task": "x"})
    spec = TaskSpec.parse({"loop": "react", "task": "x", "tools": ["gone.py"]}).resolved(folder)
    assert any("tools file not found" in p for p in spec.problems())


def test_cli_react_with_tools_from_a_file(folder, monkeypatch):
    monkeypatch.chdir(folder)
    script = folder / "s.json"
    script.write_text(json.dumps([act("double", "double it", n=4), act("final_answer", "done", answer="8")]))
    result = runner.invoke(app, ["react", "Double 4", "--tools", "my_tools.py", "--model", f"scripted:{script}",
                                 "--trace", str(folder / "t.db")])
    assert result.exit_code == 4, result.output
    assert "double" in result.output and "8" in result.output
    missing = runner.invoke(app, ["react", "Double 4", "--tools", "nope.py", "--model", f"scripted:{script}"])
    assert missing.exit_code == 2 and "tools file not found" in missing.output


def test_a_tools_file_that_exits_at_import_is_an_error_not_an_exit(folder):
    (folder / "exits.py").write_text("import sys\nsys.exit(3)\n")
    with pytest.raises(ConfigError, match="exits.py failed to load: SystemExit: 3"):
        load_tools(["exits.py"], folder)


def test_a_tools_file_is_executed_once_for_the_check_and_the_run(folder):
    (folder / "counted.py").write_text(
        "from pathlib import Path\nfrom reflexa import tool\n"
        "with open(Path(__file__).with_name('imports.log'), 'a') as log:\n    log.write('x')\n\n"
        "@tool\ndef one() -> str:\n    '''One.'''\n    return '1'\n")
    spec = TaskSpec.parse({"loop": "react", "task": "One", "tools": ["counted.py"]}).resolved(folder)
    spec.run(Session(model=ScriptedModel([act("one", "call it"), act("final_answer", "done", answer="1")])))
    assert (folder / "imports.log").read_text() == "x"
