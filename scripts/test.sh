#!/usr/bin/env bash
# The project's test command (README): system packages, a venv, lint, types, tests.
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian packages the tests use: chromium (the HTML is opened in headless Chromium) and
# libharfbuzz-subset0 (without it WeasyPrint warns on import). Installed only when missing.
need=()
command -v chromium >/dev/null 2>&1 || need+=(chromium)
ldconfig -p 2>/dev/null | grep -q libharfbuzz-subset || need+=(libharfbuzz-subset0)
if ((${#need[@]})); then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null \
      || echo "warning: could not install ${need[*]}; the browser test will be skipped" >&2
  else
    echo "warning: missing Debian packages: ${need[*]} (apt-get install them)" >&2
  fi
fi

[ -x .venv/bin/python ] || python3 -m venv .venv
# torch==2.13.0 is the CPU build these machines carry (pyproject's `capture` extra); the `ray`
# extra runs the Ray engine's tests on a local cluster.
.venv/bin/pip install -q -e '.[capture,ray,test]' --config-settings editable_mode=strict
export TORCHINDUCTOR_CACHE_DIR="${TORCHINDUCTOR_CACHE_DIR:-${TMPDIR:-/tmp}/nprof-inductor}"

.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
.venv/bin/python -m pytest "$@"
