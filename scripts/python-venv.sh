#!/usr/bin/env bash
# Makes tools/python/, the venv of the Python package's tests, examples and benchmark,
# with every package pinned in python/requirements-test.txt: installed only when the
# pins changed since the last install (about 40 s with an empty pip cache, nothing
# when they did not). scripts/test-all.sh and benches/python/run.sh call it.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! cmp -s python/requirements-test.txt tools/python/requirements-test.txt; then
  command -v python3 >/dev/null || { echo "python-venv: 'python3' (>= 3.9, with venv) is required but not on PATH" >&2; exit 1; }
  python3 -m venv tools/python
  tools/python/bin/pip install --quiet --disable-pip-version-check -r python/requirements-test.txt
  cp python/requirements-test.txt tools/python/requirements-test.txt
fi
