"""Run one measurement of a benchmark script in its own process and read its JSON.

Each measurement gets a fresh process so that its peak RSS (`ru_maxrss`) is its own.
Importing this module (before Keras) also puts the repository root on `sys.path`, so
the scripts run from a checkout without installing it, and defaults the backend to
TensorFlow with its C++ logs quietened.
"""

import json
import os
import subprocess
import sys

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def child_argv(script, args, only):
    argv = [sys.executable, script, "--only", only]
    for name, value in vars(args).items():
        if name == "only" or value is None:
            continue
        argv += ["--" + name.replace("_", "-"), str(value)]
    return argv


def run_child(script, args, only):
    proc = subprocess.run(
        child_argv(script, args, only), stdout=subprocess.PIPE, stderr=None, text=True, check=False
    )
    if proc.returncode != 0:
        sys.exit(f"the '{only}' subprocess failed with exit status {proc.returncode}")
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if not lines:
        sys.exit(f"the '{only}' subprocess printed no JSON result; stdout was:\n{proc.stdout}")
    return json.loads(lines[-1])
