"""Backends as plugins: the `reflexa.models` entry points, the built-in fallback, and bad specs."""

import json
import textwrap
from importlib import metadata

import pytest
from typer.testing import CliRunner

from reflexa.cli.app import app
from reflexa.errors import ConfigError
from reflexa.models import registry
from reflexa.models.spec import availability, resolve

runner = CliRunner()

PLUGIN = textwrap.dedent('''
    from reflexa.models import Availability, Backend, ScriptedModel

    def create(target):
        model = ScriptedModel([f"fake says {target}"])
        model.name = f"fake:{target}"
        return model

    BACKEND = Backend("fake", "fake:ANYTHING", create, lambda: [Availability("fake", True, "a test plugin")])
''')


@pytest.fixture()
def plugin(tmp_path, monkeypatch):
    """A tiny installed distribution on sys.path that declares a `fake` backend and a broken one."""
    site = tmp_path / "site"
    info = site / "fake_reflexa_plugin-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-reflexa-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[reflexa.models]\nfake = fake_reflexa_plugin:BACKEND\n"
                                           "broken = fake_reflexa_plugin_missing:BACKEND\n")
    (site / "fake_reflexa_plugin.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(site))
    return site


def test_a_plugin_backend_resolves_and_is_listed(plugin):
    model = resolve("fake:x")
    assert model.name == "fake:x" and model.complete([{"role": "user", "content": "hi"}]).text == "fake says x"
    assert "fake" in registry.names()
    rows = {row.backend: row for row in availability()}
    assert rows["fake"].usable and not rows["broken"].usable and "failed to load" in rows["broken"].detail
    result = runner.invoke(app, ["models"])
    assert result.exit_code == 0 and "fake" in result.output and "a test plugin" in result.output


def test_a_broken_plugin_is_a_config_error_when_asked_for(plugin):
    with pytest.raises(ConfigError, match="failed to load"):
        resolve("broken:x")


def test_builtin_backends_work_without_any_entry_points(monkeypatch, tmp_path):
    # A source checkout on PYTHONPATH has no metadata declaring reflexa's own backends.
    monkeypatch.setattr(metadata, "entry_points", lambda **_: [])
    assert registry.names() == ["local", "openai", "anthropic", "scripted"]
    replies = tmp_path / "r.json"
    replies.write_text('["hi"]')
    assert resolve(f"scripted:{replies}").complete([{"role": "user", "content": "x"}]).text == "hi"


def test_declared_entry_points_come_before_the_builtin_table(monkeypatch, plugin):
    # An installed reflexa declares its backends as entry points; those are what the registry loads.
    declared = [metadata.EntryPoint("scripted", "fake_reflexa_plugin:BACKEND", registry.GROUP)]
    monkeypatch.setattr(metadata, "entry_points", lambda **_: declared)
    assert resolve("scripted:y").name == "fake:y"


def test_unknown_backend_lists_the_registered_ones(plugin):
    with pytest.raises(ConfigError) as info:
        resolve("bogus:thing")
    assert "unknown model spec" in str(info.value)
    assert all(name in info.value.hint for name in ("local", "openai", "anthropic", "scripted", "fake"))


def test_an_empty_spec_is_an_error_not_the_default():
    with pytest.raises(ConfigError, match="empty model spec"):
        resolve("")
    with pytest.raises(ConfigError, match="empty model spec"):
        resolve("   ")


def test_the_configured_spec_is_the_default(monkeypatch, tmp_path):
    replies = tmp_path / "r.json"
    replies.write_text('["configured"]')
    monkeypatch.setenv("REFLEXA_MODEL", f"scripted:{replies}")
    assert resolve().complete([{"role": "user", "content": "x"}]).text == "configured"


@pytest.mark.parametrize("spec,message", [
    ("", "empty model spec"),
    ("openai:http://[::1/v1#m", "bad server URL"),
    ("openai:http://127.0.0.1:notaport/v1#m", "bad server URL"),
    ("openai:http:///v1#m", "no host"),
    ("scripted:.", "is a directory"),
    ("local:/etc/passwd", "not a GGUF model file"),
    ("local:.", "not a regular file"),
    ("local:/no/such/model.gguf", "model file not found"),
    ("nope:x", "unknown model spec"),
])
def test_bad_specs_are_one_clear_line(spec, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["refine", "t", "--judge", "-m", spec])
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output


def test_binary_scripted_file_is_a_config_error(tmp_path):
    path = tmp_path / "r.json"
    path.write_bytes(b"\xff\xfe\x00binary")
    with pytest.raises(ConfigError, match="binary file, not text"):
        resolve(f"scripted:{path}")


def test_anthropic_without_a_key_is_a_clear_error():
    pytest.importorskip("anthropic")
    result = runner.invoke(app, ["refine", "t", "--judge", "-m", "anthropic:claude-sonnet-4-6"])
    assert result.exit_code == 2 and "ANTHROPIC_API_KEY" in result.output and "Traceback" not in result.output


def test_models_json_lists_backends_and_named_local_models(plugin):
    result = runner.invoke(app, ["models", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert {row["backend"] for row in data["backends"]} >= {"local", "openai", "anthropic", "scripted", "fake"}
    local = {row["name"]: row for row in data["local_models"]}
    assert local["qwen"]["spec"] == "local" and local["qwen"]["default"]
    assert local["qwen"]["sha256"] == "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
    assert local["smollm2"]["state"] in ("verified", "unverified", "not installed")


def test_a_plugin_that_fails_to_build_its_model_is_a_config_error(monkeypatch):
    def backend(create):
        return lambda name: registry.Backend("fake", "fake:ANYTHING", create, lambda: [])

    def broken(target):
        raise ValueError("no such deployment")

    monkeypatch.setattr("reflexa.models.spec.load", backend(broken))
    monkeypatch.setattr(registry, "names", lambda: ["fake"])
    monkeypatch.setattr("reflexa.models.spec.names", lambda: ["fake"])
    with pytest.raises(ConfigError, match="'fake' model backend failed to build 'fake:x': ValueError"):
        resolve("fake:x")
    monkeypatch.setattr("reflexa.models.spec.load", backend(lambda target: "not a model"))
    with pytest.raises(ConfigError, match="built a str, not a model"):
        resolve("fake:x")
