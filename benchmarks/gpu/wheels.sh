#!/usr/bin/env bash
# Downloads into .whl/ (at the repo root) the wheels that `crucible server` and
# `crucible serve` need on the GPU machine beyond what its image has (torch, transformers,
# httpx, anyio, click, typer, rich, pyyaml, ...): the API's and the engine server's stack,
# for CPython 3.12 on manylinux x86_64, at the versions requirements/lock.txt pins.
#
# The set is what the servers' imports reach (serve_bench.py run against the image's
# packages alone), not the lock's whole closure. typing-extensions is in the image too, but
# pydantic needs a newer one than it may hold; the image's huggingface-hub does not use
# httpx2, which lightkube needs. httptools is optional to uvicorn, which production installs
# as uvicorn[standard]: the served endpoint parses HTTP with it there, so it does here.
# nvidia-ml-py is the SDK's GPU telemetry (NVML), which the image may lack.
#
# On the device machine: carry .whl and start the command with
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
#     --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit;
set -euo pipefail
cd "$(dirname "$0")/../.."

PACKAGES=(
  alembic annotated-types fastapi httpcore2 httptools httpx2 lightkube lightkube-models mako
  msgspec nvidia-ml-py opentelemetry-api orjson pydantic pydantic-core pydantic-settings python-dotenv
  redis sqlalchemy sse-starlette starlette truststore typing-extensions typing-inspection
  uvicorn
)

pins=()
for name in "${PACKAGES[@]}"; do
  pin=$(grep -i -m1 "^${name}==" requirements/lock.txt || true)
  if [[ -z "$pin" ]]; then
    echo "requirements/lock.txt pins no version of $name" >&2
    exit 1
  fi
  pins+=("$pin")
done

rm -rf .whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform manylinux1_x86_64 -d .whl "${pins[@]}"

ls .whl | wc -l | xargs echo "wheels:"
du -sh .whl
if ! git check-ignore -q .whl/any.whl; then
  echo "note: git does not ignore .whl/; add /.whl/ to .gitignore before committing" >&2
fi
