"""The README's Python examples run as written, from the repository's root (here: a copy of its examples
and the generated shop database), with the scripted model standing in for the configured one."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
BLOCKS = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)


def act(tool, **args):
    return {"action": {"thought": f"call {tool} with {sorted(args.items())}", "tool": tool, "args": args}}


IS_PRIME = ("```python\ndef is_prime(n: int) -> bool:\n    if n < 2:\n        return False\n"
            "    return all(n % d for d in range(2, int(n ** 0.5) + 1))\n```")
REPLIES = {
    "refund": [act("find_order", order_id=17), act("refund", order_id=17, amount=42.0),
               act("final_answer", answer="refunded 42.0 on order 17")],
    "trials": [act("query", sql="SELECT count(*) FROM orders"), act("final_answer", answer="400")],
    "is_prime": [IS_PRIME],
    "aio.run": ["```\nGOOD\n```"] * 10,
    "buyer of order 5": [act("query", sql="SELECT customer_id FROM orders WHERE id = 5"),
                         act("final_answer", answer="4"),
                         act("query", sql="SELECT city FROM customers WHERE id = 4"),
                         act("final_answer", answer="Osaka")],
}


def replies_for(block: str) -> list:
    return next(replies for key, replies in REPLIES.items() if key in block)


@pytest.mark.parametrize("block", BLOCKS, ids=[f"block{i}" for i in range(1, len(BLOCKS) + 1)])
def test_readme_python_example_runs(block, tmp_path, shop):
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    assert shop == tmp_path / "shop.sqlite"  # the fixture builds it right here
    (tmp_path / "replies.json").write_text(json.dumps(replies_for(block)))
    (tmp_path / "example.py").write_text(block)
    env = {**os.environ, "REFLEXA_MODEL": f"scripted:{tmp_path / 'replies.json'}"}
    done = subprocess.run([sys.executable, "example.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert "PASSED" in done.stdout, done.stdout + done.stderr


def test_every_python_example_is_covered():
    assert len(BLOCKS) == 5 and all(any(key in b for key in REPLIES) for b in BLOCKS)
