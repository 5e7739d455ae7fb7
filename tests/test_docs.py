"""The README's and docs/' examples run as written, in a copy of the repository's examples (with the generated
shop database), the test model standing in for the configured one.

- Every ```python block runs to exit 0, with the scripted replies its `REPLIES` key names.
- Every `reflexa` line of a ```sh block runs: a command that runs a loop is checked whole with
  `--save-spec` (its flags, files and spec; no model call), `reflexa batch` and `reflexa eval` read their
  tasks file (and eval its strategies), and the
  commands that read the store or the machine (runs, show, models, experience, index) run for real.
- `python examples/...` lines run for real. Other lines (make, pip, export) are the reader's to type.
A ```text block is output or a command that needs something a test cannot have (a server, an API key).
"""

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUN_COMMANDS = {"refine", "react", "trials", "research", "plan", "run"}
STORE_COMMANDS = {"runs", "show", "models", "experience", "index"}


def blocks(kind: str) -> list[tuple[str, str]]:
    """(page, code) of every ```kind block."""
    return [(page.name if page.parent == ROOT else f"docs/{page.name}", code)
            for page in PAGES for code in re.findall(rf"```{kind}\n(.*?)```", page.read_text(), re.S)]


def commands(code: str) -> list[str]:
    """The command lines of a shell block: continuation lines joined, comments and blanks left out."""
    joined = re.sub(r"\\\n\s*", " ", code)
    return [line.split("  #")[0].strip() for line in joined.splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


def act(tool, **args):
    return {"action": {"thought": f"call {tool} with {sorted(args.items())}", "tool": tool, "args": args}}


IS_PRIME = ("```python\ndef is_prime(n: int) -> bool:\n    if n < 2:\n        return False\n"
            "    return all(n % d for d in range(2, int(n ** 0.5) + 1))\n```")
LESSON = {"failure_step": "attempt 1", "observed_mismatch": "is_prime(1) returned True",
          "root_cause": "1 is not prime", "correction": "return False below 2"}
REPLIES = {
    # The key is a word of the block; the value what the scripted model answers it with.
    "approver=policy": [act("pay", order_id=7), act("final_answer", answer="paid")],
    "refund": [act("find_order", order_id=17), act("refund", order_id=17, amount=42.0),
               act("final_answer", answer="refunded 42.0 on order 17")],
    "trials": [act("query", sql="SELECT count(*) FROM orders"), act("final_answer", answer="400")],
    "is_prime": [IS_PRIME],
    "aio.run": ["```\nGOOD\n```"] * 10,
    "plan(": {"planner": [{"goal": "city of the buyer of order 5", "subgoals": [
                  {"name": "buyer", "task": "Which customer id placed order 5?"},
                  {"name": "city", "task": "Which city does that customer live in?", "depends_on": ["buyer"]}]}],
              "generator": [act("query", sql="SELECT customer_id FROM orders WHERE id = 5"),
                            act("final_answer", answer="4"),
                            act("query", sql="SELECT city FROM customers WHERE id = 4"),
                            act("final_answer", answer="Osaka")]},
    "research(": [{"answer": "[UNCERTAIN: in France]", "reflection": {"missing": ["city of the Eiffel Tower"],
                                                                      "superfluous": []},
                   "search_queries": ["Eiffel Tower"]},
                  {"answer": "The Eiffel Tower is in Paris [1].", "reflection": {"missing": [], "superfluous": []},
                   "search_queries": [], "evidence_used": [1],
                   "quote": "The Eiffel Tower is a wrought-iron lattice tower in Paris"}],
    "TaskSpec": [IS_PRIME],
    "react(": [act("query", sql="SELECT count(*) FROM orders"), act("final_answer", answer="400")],
}


def replies_for(code: str) -> list | dict:
    """The scripts for a block: a list for every role, or a script per role."""
    return next((replies for key, replies in REPLIES.items() if key in code), [])


@pytest.fixture()
def workspace(tmp_path, shop):
    """A copy of the repository's examples, the shop database beside them, and a store to read."""
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    assert shop == tmp_path / "shop.sqlite"
    return tmp_path


def run(argv, cwd, env=None, timeout=120):
    return subprocess.run(argv, cwd=cwd, env={**os.environ, **(env or {})}, capture_output=True, text=True,
                          timeout=timeout)


PYTHON = blocks("python")
SHELL = blocks("sh")


@pytest.mark.parametrize(("page", "code"), PYTHON, ids=[f"{p}:{i}" for i, (p, _) in enumerate(PYTHON)])
def test_python_examples_run(page, code, workspace):
    (workspace / "replies.json").write_text(json.dumps(replies_for(code)))
    (workspace / "example.py").write_text(code)
    done = run([sys.executable, "example.py"], workspace,
               {"REFLEXA_MODEL": f"scripted:{workspace / 'replies.json'}"})
    assert done.returncode == 0, f"{page}:\n{code}\n{done.stdout}\n{done.stderr}"


@pytest.mark.parametrize(("page", "code"), SHELL, ids=[f"{p}:{i}" for i, (p, _) in enumerate(SHELL)])
def test_shell_examples_run(page, code, workspace):
    """A block's lines in order, in one workspace: a later line may read what an earlier one wrote."""
    from reflexa import SQLiteStore

    SQLiteStore(os.environ["REFLEXA_TRACE"]).close()  # a store for the commands that only read one
    for line in commands(code):
        check_line(page, line, workspace)


def check_line(page, line, workspace):
    words = shlex.split(line)
    reflexa = [sys.executable, "-m", "reflexa.cli"]
    if words[0] == "python" and words[1].startswith("examples/"):
        done = run([sys.executable, *words[1:]], workspace)
    elif words[0] != "reflexa" or words[1] not in RUN_COMMANDS | STORE_COMMANDS | {"batch", "eval"}:
        return  # the reader's to type: make, pip, export, or a command that needs a server
    elif words[1] in RUN_COMMANDS:
        saving = [] if "--save-spec" in words else ["--save-spec", str(workspace / "checked.json")]
        done = run([*reflexa, *words[1:], *saving], workspace)
        assert "spec written" in done.stdout, f"{page}: {line}\n{done.stdout}\n{done.stderr}"
    elif words[1] == "batch":
        from reflexa.batch import read_tasks

        read_tasks(workspace / words[2])  # every line a valid spec whose files exist
        return
    elif words[1] == "eval":
        from reflexa.eval import parse_strategies, read_dataset

        read_dataset(str(workspace / words[2]), workspace / "eval-out")  # every line valid, its files there
        if "--strategies" in words:
            parse_strategies(words[words.index("--strategies") + 1])
        return
    else:
        done = run([*reflexa, *words[1:]], workspace)
    assert done.returncode == 0, f"{page}: {line}\n{done.stdout}\n{done.stderr}"


def test_every_python_example_has_its_replies_and_every_page_is_linked_from_the_readme():
    assert PYTHON and SHELL
    missing = [code for _, code in PYTHON if "reflexa" in code and "ScriptedModel" not in code
               and not replies_for(code) and any(w in code for w in ("refine(", "react(", "plan(", "research("))]
    assert not missing
    readme = (ROOT / "README.md").read_text()
    unlinked = [page.name for page in PAGES[1:] if f"docs/{page.name}" not in readme]
    assert not unlinked, f"docs pages the README does not link: {unlinked}"
    assert len(readme.splitlines()) < 300
    assert not re.search(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b", readme)
