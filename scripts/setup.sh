#!/usr/bin/env bash
# One-step set-up on a fresh Debian 12 machine: install the packages, configure, build, then
#   setup.sh serve   run the main job: serve the bundled tiny model on http://127.0.0.1:8000
#   setup.sh test    run the test suite
# Safe to rerun: apt and CMake skip what is already done.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(build-essential cmake ninja-build pkg-config libopenblas-dev nlohmann-json3-dev
          libgrpc++-dev libssl-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc libcpp-httplib-dev
          libcli11-dev libgtest-dev libgmock-dev libyaml-cpp-dev gnuplot-nox libicu-dev libpcre2-dev libglpk-dev
          libxgboost-dev xgboost nodejs)
# The tests also lint /metrics with promtool (Debian's prometheus package) and make TLS
# certificates with the openssl command.
[ "${1:-}" = test ] && PACKAGES+=(prometheus openssl)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# npm comes with some nodejs builds (NodeSource's) and is its own package in Debian's.
command -v npm >/dev/null 2>&1 || missing+=(npm)
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

BUILD=${BUILD_DIR:-build}
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD" -j "$(nproc)"

case "${1:-}" in
  serve)
    shift
    exec "$BUILD/tediserve" serve "$@"
    ;;
  test)
    # The official OpenAI client library, for the API test (tests/openai_client).
    (cd tests/openai_client && npm ci --no-audit --no-fund --loglevel=error)
    # Reference tokenizer / chat-template implementations and a real Qwen-family tokenizer.json
    # (tests/hf_reference): tests compute their expected outputs with them.
    (cd tests/hf_reference && npm ci --no-audit --no-fund --loglevel=error)
    exec ctest --test-dir "$BUILD" --output-on-failure -j "$(nproc)"
    ;;
  *)
    echo "usage: $0 serve|test" >&2
    exit 2
    ;;
esac
