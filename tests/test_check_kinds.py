"""The check-kind registry: one `CheckKind` entry, here from another package by entry point, is a spec field, a
flag of `reflexa refine`, a check in the loop and a way to score an eval's row; nothing else names it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from reflexa import TaskSpec
from reflexa.errors import ConfigError
from reflexa.tasks.kinds import kinds

PLUGIN = '''
from reflexa import Signal
from reflexa.tasks.kinds import CheckKind


class Contains:
    subjective = False

    def __init__(self, word):
        self.word, self.name = word, f"contains:{word}"

    def run(self, candidate, context):
        found = self.word in candidate
        return Signal(self.name, found, message=f"{self.word!r} {'found' if found else 'missing'}")


def _no_blank(value):
    return "empty" if not value.strip() else None


CONTAINS = CheckKind("contains", str, "A word the candidate must contain.", "WORD",
                     build=lambda value, setup: Contains(value), invalid=_no_blank)
'''


@pytest.fixture()
def plugin(tmp_path):
    """A package installed on PYTHONPATH that registers the check kind `contains` by entry point."""
    site = tmp_path / "site"
    (site / "fakecheck").mkdir(parents=True)
    (site / "fakecheck" / "__init__.py").write_text(textwrap.dedent(PLUGIN))
    info = site / "fakecheck-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fakecheck\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[reflexa.checks]\ncontains = fakecheck:CONTAINS\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    return env


def _reflexa(env, cwd, *args):
    return subprocess.run([sys.executable, "-m", "reflexa.cli", *args], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=120)


def _replies(folder: Path, *replies: str) -> str:
    path = folder / "replies.json"
    path.write_text(json.dumps({"replies": list(replies)}))
    return f"scripted:{path}"


def test_a_kind_from_another_package_is_a_spec_field_and_is_checked_like_the_built_in_ones(plugin, tmp_path):
    code = textwrap.dedent('''
        from reflexa import TaskSpec
        from reflexa.errors import ConfigError
        spec = TaskSpec.parse({"task": "say hi", "contains": "hi"})
        print(spec.checks, spec.dump()["contains"])
        for bad in ({"task": "t", "contains": " "}, {"loop": "react", "task": "t", "db": "x", "contains": "hi"}):
            try:
                TaskSpec.parse(bad)
            except ConfigError as exc:
                print("refused:", exc)
    ''')
    out = subprocess.run([sys.executable, "-c", code], env=plugin, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "{'contains': 'hi'} hi" in out.stdout
    assert "refused: invalid task: contains: empty" in out.stdout
    assert "contains: not a field of a react task" in out.stdout


def test_a_kind_from_another_package_is_a_flag_and_a_check_in_the_loop(plugin, tmp_path):
    helped = _reflexa(plugin, tmp_path, "refine", "--help")
    assert "--contains WORD" in helped.stdout and "A word the candidate must contain." in helped.stdout
    model = _replies(tmp_path, "```\nhello\n```")
    passed = _reflexa(plugin, tmp_path, "refine", "say hello", "--contains", "hello", "-m", model, "-q",
                      "--trace", str(tmp_path / "t.db"))
    assert passed.returncode == 0 and "PASSED" in passed.stdout, passed.stderr
    model = _replies(tmp_path, "```\nbye\n```", "```\nbye\n```", "```\nbye\n```")
    failed = _reflexa(plugin, tmp_path, "refine", "say hello", "--contains", "hello", "-m", model, "-q",
                      "--max-attempts", "1", "--trace", str(tmp_path / "t.db"))
    assert failed.returncode == 3, failed.stderr


def test_a_kind_from_another_package_scores_an_eval(plugin, tmp_path):
    dataset = tmp_path / "data.jsonl"
    dataset.write_text(json.dumps({"id": "a", "task": "say hello", "regex": "h", "score": {"contains": "hello"}})
                       + "\n" + json.dumps({"id": "b", "task": "say help", "regex": "h", "score": {"contains": "help"}})
                       + "\n")
    model = _replies(tmp_path, *["```\nhello\n```"] * 4)
    out = _reflexa(plugin, tmp_path, "eval", str(dataset), "-s", "single", "-m", model, "--json", "--trace",
                   str(tmp_path / "t.db"), "--out", str(tmp_path / "out"))
    assert out.returncode == 0, out.stderr
    rows = {row["task"]: row for row in map(json.loads, (tmp_path / "out" / "rows.jsonl").read_text().splitlines())}
    # Both pass the visible regex; only the first contains the word its score asks for.
    assert rows["a"]["passed"] and rows["a"]["visible"] and not rows["b"]["passed"] and rows["b"]["visible"]


def test_the_built_in_kinds_and_what_each_can_do():
    assert list(kinds()) == ["tests", "test_code", "check", "regex", "json_schema", "judge"]
    assert [name for name, kind in kinds().items() if not kind.scores] == ["judge"]
    spec = TaskSpec.parse({"task": "t", "regex": "x", "judge": True})
    assert spec.checks == {"regex": "x", "judge": True} and spec.dump()["regex"] == "x"
    with pytest.raises(ConfigError, match="checks: unknown field"):
        TaskSpec.parse({"task": "t", "checks": {"regex": "x"}})
    with pytest.raises(ConfigError, match=r"regex: missing \)"):
        TaskSpec.parse({"task": "t", "regex": "(x"})
