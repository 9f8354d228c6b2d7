# Sourced by the bench scripts that run a Python reference (TF, PyTorch).
# reference_python REPO: the Python to run them with: $REF_PYTHON when set, else REPO's
# .venv-ref (scripts/setup_python.sh), else /usr/bin/python3.
reference_python() {
  if [[ -n "${REF_PYTHON:-}" ]]; then echo "$REF_PYTHON"
  elif [[ -x "$1/.venv-ref/bin/python" ]]; then echo "$1/.venv-ref/bin/python"
  else echo /usr/bin/python3; fi
}
