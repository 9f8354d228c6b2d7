#!/usr/bin/env bash
# README command 2: set up a fresh machine, build, and run every test with ctest, then the
# Python package's with pytest.
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$repo_root/scripts/setup.sh"
"$repo_root/scripts/setup_python_io.sh" >/dev/null
"$repo_root/scripts/build.sh"
py="$("$repo_root/scripts/setup_python_pkg.sh")"  # pip install . (the Python package) into .venv-py
cd "$repo_root/build"
ctest --output-on-failure -j"$(nproc)"
"$py" -m pytest -q -p no:cacheprovider "$repo_root/tests/python"
