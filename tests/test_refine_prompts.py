from reflexa.evaluate.checks import _last_line
from reflexa.loops.refine_prompts import split_reply


def test_first_fenced_block_is_the_answer():
    text = "Plan: add\n```python\ndef f():\n    return 1\n```\nExample:\n```python\nprint(f())\n```"
    assert split_reply(text) == ("Plan: add", "def f():\n    return 1")


def test_unclosed_fence_cut_by_max_tokens():
    assert split_reply("Plan: x\n```python\ndef f():\n    return")[1] == "def f():\n    return"


def test_no_fence_drops_plan_lines():
    assert split_reply("Plan: think\nanswer text") == ("Plan: think", "answer text")


def test_traceback_summary_names_the_failing_line():
    output = (
        'Traceback (most recent call last):\n  File "program.py", line 9, in <module>\n    check(f)\n'
        '  File "program.py", line 7, in check\n    assert candidate(2) == 4\nAssertionError'
    )
    assert _last_line(output) == "AssertionError at `assert candidate(2) == 4`"


def test_a_longer_fence_holds_shorter_ones():
    """A markdown answer in a ```` fence keeps the ``` blocks inside it (it was cut at the first one)."""
    reply = "````markdown\n# Usage\n\nRun:\n\n```sh\nmytool --help\n```\n\nDone.\n````\nMore text."
    assert split_reply(reply) == ("", "# Usage\n\nRun:\n\n```sh\nmytool --help\n```\n\nDone.")


def test_a_one_line_fence_keeps_its_first_word():
    assert split_reply("```42```")[1] == "42"
    assert split_reply("```SELECT name FROM users```")[1] == "SELECT name FROM users"
    assert split_reply("```python\nx = 1\n```")[1] == "x = 1"
