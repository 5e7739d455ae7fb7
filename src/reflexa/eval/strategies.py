"""Named strategies: how an eval runs a task. Each is a string, so a comparison is one flag.

    single                    one attempt, no retry: refine with max_attempts=1; trials with max_trials=1;
                              research with one round; react and plan with reflection off
    LOOP[:key=value,...]      the task's own loop (its name is the strategy's head) with spec options
                              changed: refine:reflect=off, refine:context=latest,
                              refine:reflector=local:qwen1.5b, research:max_rounds=1, react:reflect=off;
                              `trials` runs react tasks too, as trials of react
    resample@K[:temperature=T]
                              refine only: K fresh one-attempt samples, no feedback and no lesson, the first
                              that passes the visible checks wins; the first sample is greedy (it is
                              `single`), the others at temperature T (default 0.8) with seeds 1..K-1
    test-driven, cookbook     refine tasks: the naive loops of naive.py (errors re-sent; an LLM judge)
    tutorial, reflect-every-step
                              react tasks: the tutorial agent loop, without and with a reflection per step
    always-search             research tasks: search with the question, whole passages, one revision
    one-react                 plan tasks: the whole task as one react run, no planner
    select@K[:key=value,...]  refine:select=K: K candidates, the one chosen by behaviour among those that pass
                              (docs/loops.md); `resample@=select@K` is its equal-cost baseline
    resample@=NAME            fresh samples as above (at the default temperature) while this task's tokens
                              are below what strategy NAME spent on the same task (at most MAX_SAMPLES): the
                              equal-cost baseline; the last sample is cut at what is left. NAME is
                              everything after '=' (resample@=refine:reflect=off)
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic import ValidationError

from ..errors import ConfigError
from ..tasks import TaskSpec
from ..tasks.spec import COMMON, LOOPS, OWN_FIELDS, field_errors
from .naive import NAIVE

DEFAULT_TEMPERATURE = 0.8
"""The temperature of resample's fresh samples after the first (greedy) one, unless the strategy names one."""
MAX_SAMPLES = 10
"""Samples at most for `resample@=NAME`, whatever budget the other strategy leaves: a task a strategy
spent many tokens on does not turn the baseline into an unbounded search."""
ALIASES = {"reflector": "reflector_model"}
ALSO_RUNS = {"trials": ("react",)}
"""A strategy of the loop on the left also runs the tasks of the loops on the right, as tasks of its own loop
(a react task is one trial of a trials task): so a react dataset measures trials against one react."""
SINGLE: dict[str, dict[str, Any]] = {"refine": {"max_attempts": 1}, "trials": {"max_trials": 1},
                                     "research": {"max_rounds": 1}, "react": {"reflect": False},
                                     "plan": {"reflect": False}}


@dataclass(frozen=True, slots=True)
class Strategy:
    """A parsed strategy name."""

    name: str
    """As the user wrote it: the row's and the report's label."""
    loop: str | None = None
    """The loop whose tasks it runs (None: any, `single`)."""
    options: dict[str, Any] = field(default_factory=dict)
    """Spec options it sets."""
    samples: int = 0
    """resample@K: K. 0 when not a resample."""
    temperature: float = DEFAULT_TEMPERATURE
    match: str | None = None
    """resample@=NAME: NAME, whose tokens on each task are this strategy's budget there."""
    naive: str | None = None
    """A naive loop of naive.py (test-driven, cookbook, ...) instead of the task's own."""

    def named(self, name: str) -> Strategy:
        """This strategy under another label (an alias's)."""
        return replace(self, name=name)

    @property
    def resamples(self) -> bool:
        return self.samples > 0 or self.match is not None

    def applies(self, spec: TaskSpec) -> bool:
        """Whether this strategy runs `spec`: `single` runs any task, the others the tasks of their loop (a
        dataset may mix loops; a task a strategy does not apply to has no row for it)."""
        return self.loop is None or self.loop == spec.loop or spec.loop in ALSO_RUNS.get(self.loop, ())

    def spec_for(self, spec: TaskSpec) -> TaskSpec:
        """The task as this strategy runs it."""
        if self.name == ONE_REACT:
            return as_react(spec)
        if self.loop is not None and self.loop != spec.loop and self.naive is None:
            spec = spec.with_options(loop=self.loop)
        options = {**SINGLE[spec.loop], **self.options} if self.name == "single" else self.options
        return spec.with_options(**options) if options else spec

    def sample(self, spec: TaskSpec, index: int) -> TaskSpec:
        """A resample's sample `index`: greedy first, then at its temperature with seed `index`."""
        one = spec.with_options(max_attempts=1, reflect=False)
        return one if index == 0 else one.with_options(temperature=self.temperature, seed=index)


ONE_REACT = "one-react"
"""plan tasks: the whole task as one react run, with no planner (plan's own baseline)."""


def as_react(spec: TaskSpec) -> TaskSpec:
    """A plan task as one react task: its tools, validator, models and budget; its facts in the task."""
    keep = COMMON | OWN_FIELDS["react"]
    data = {k: v for k, v in spec.model_dump(by_alias=True, exclude_unset=True).items()
            if k.rstrip("_") in keep or k == "validate"}
    task = spec.task + ("\n\nFacts: " + "; ".join(spec.facts) if spec.facts else "")
    return TaskSpec.parse({**data, "loop": "react", "task": task})


def parse_strategies(text: str) -> list[Strategy]:
    """The strategies a comma-separated list names (a comma inside an option value is not supported).
    Every mistake is one ConfigError."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise ConfigError("--strategies names no strategy", hint="e.g. single,resample@3,refine")
    if len(set(names)) != len(names):
        raise ConfigError(f"--strategies names a strategy twice: {text}")
    strategies = [parse_strategy(name) for name in names]
    for strategy in strategies:
        if strategy.match is not None and strategy.match not in names:
            raise ConfigError(f"{strategy.name}: no strategy {strategy.match!r} in --strategies to match",
                              hint=f"add it, e.g. --strategies {strategy.match},{strategy.name}")
        if strategy.match is not None and parse_strategy(strategy.match).match is not None:
            raise ConfigError(f"{strategy.name}: cannot match another budget-matched strategy")
        if strategy.match is not None and parse_strategy(strategy.match).loop not in (None, "refine"):
            raise ConfigError(f"{strategy.name}: resampling matches a strategy that runs refine tasks")
    return strategies


def parse_strategy(name: str) -> Strategy:
    head, _, rest = name.partition(":")
    if head == "single" and not rest:
        return Strategy(name)
    if name in NAIVE:
        return Strategy(name, NAIVE[name], naive=name)
    if name == ONE_REACT:
        return Strategy(name, "plan")
    if name.startswith("resample@="):  # everything after '=' names the matched strategy, options and all
        return Strategy(name, "refine", match=name.removeprefix("resample@="))
    if match := re.fullmatch(r"resample@(\d+)", head):
        options = _options(name, rest)
        temperature = options.pop("temperature", DEFAULT_TEMPERATURE)
        if options or not isinstance(temperature, int | float) or not 0 < temperature <= 2:
            raise ConfigError(f"strategy {name!r}: resample takes only temperature=T, 0 < T <= 2")
        samples = int(match.group(1))
        if not 1 <= samples <= 100:
            raise ConfigError(f"strategy {name!r}: samples must be 1 to 100")
        return Strategy(name, "refine", samples=samples, temperature=float(temperature))
    if match := re.fullmatch(r"select@(\d+)", head):  # refine:select=K, options after it as refine's
        return parse_strategy(f"refine:select={match.group(1)}" + (f":{rest}" if rest else "")).named(name)
    if head in LOOPS:
        options = {ALIASES.get(k, k): v for k, v in _options(name, rest).items()}
        try:
            TaskSpec.model_validate({"loop": head, "task": "x", **_placeholder(head), **options})
        except ValidationError as exc:
            raise ConfigError(f"strategy {name!r}: " + "; ".join(field_errors(exc)),
                              hint="its options are task spec fields of that loop (docs/tasks.md)") from None
        return Strategy(name, head, options)
    raise ConfigError(f"unknown strategy {name!r}", hint=f"single, resample@K, resample@=NAME, select@K, "
                      f"{', '.join(NAIVE)}, {ONE_REACT}, or a loop with options (refine:reflect=off)")


def _placeholder(loop: str) -> dict[str, Any]:
    """What a spec of `loop` requires, so a strategy's options validate on their own."""
    return {"refine": {"regex": "x"}, "research": {"corpus": "x"}}.get(loop, {"db": "x"})


def _options(name: str, text: str) -> dict[str, Any]:
    """`key=value:key=value`; a piece with no `key=` continues the value before it, so a model spec keeps
    its colons (reflector=local:qwen1.5b)."""
    pairs: list[list[str]] = []
    for piece in text.split(":") if text else []:
        key, sep, value = piece.partition("=")
        if sep and re.fullmatch(r"[a-z_]+", key.strip()):
            pairs.append([key.strip(), value])
        elif pairs:
            pairs[-1][1] += ":" + piece
        else:
            raise ConfigError(f"strategy {name!r}: {piece!r} is not key=value")
    return {key: _value(value.strip()) for key, value in pairs}


def _value(text: str) -> Any:
    """on/off and true/false are booleans, numbers are numbers, anything else is text."""
    lowered = text.lower()
    if lowered in ("on", "true", "yes"):
        return True
    if lowered in ("off", "false", "no"):
        return False
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def run_order(strategies: list[Strategy], index: int) -> list[Strategy]:
    """The order strategies run on the task at `index`: as given, reversed on every other task (so drift
    over a long run hits every strategy alike), with a budget-matched strategy after the one it matches."""
    order = list(strategies) if index % 2 == 0 else list(reversed(strategies))
    by_name = {s.name: s for s in strategies}
    for strategy in [s for s in order if s.match is not None]:
        order.remove(strategy)
        order.insert(order.index(by_name[strategy.match or ""]) + 1, strategy)
    return order
