#!/usr/bin/env bash
# Downloads, on a machine that reaches the package index (through its own pip configuration), the
# Python wheels the tests need on a CUDA host that cannot download anything
# (docs/development/gpu-host.md): torchvision for the fixed-shape tests' ResNet-18, Triton's gRPC
# and HTTP clients for the tritonclient suites and the REST benchmark on the GPU, the deploy checks'
# schema validators (kubernetes-validate, jsonschema), and what they import that the host's Python
# lacks. deploy/cuda-build.sh installs them into a
# private folder on PYTHONPATH, never into the host's Python.
#
#   deploy/fetch-cuda-host-wheels.sh [DIR (default .wheels)] [PYTHON_VERSION (default 3.12, the host's)]
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$repo/deploy/toolchain.env"
dir=${1:-$repo/.wheels}
python_version=${2:-3.12}
pip=${PIP:-$GRAPHSERVE_VENV/bin/pip}
mkdir -p "$dir"
# The same tritonclient as the venv's pin, without its extras (the rest are listed below).
tritonclient_pin() {
  local pin
  for pin in $GRAPHSERVE_PYTHON_PINS; do
    [[ $pin == tritonclient* ]] && echo "tritonclient==${pin##*==}"
  done
}
read -r -a schema_pins <<<"$GRAPHSERVE_SCHEMA_PINS"
"$pip" download --no-deps --only-binary=:all: --python-version "$python_version" \
  --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
  -d "$dir" "torchvision==$GRAPHSERVE_TORCHVISION_VERSION" pillow \
  "$(tritonclient_pin)" "protobuf>=6.30,<7" python-rapidjson "ml-dtypes<=0.5.4" \
  urllib3 packaging \
  geventhttpclient gevent greenlet zope.event zope.interface brotli certifi \
  "${schema_pins[@]}" jsonschema-specifications referencing rpds-py attrs typing-extensions \
  importlib-resources
du -sh "$dir"
