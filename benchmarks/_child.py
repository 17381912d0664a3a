"""Run one measurement of a benchmark in its own process and read its JSON.

Each measurement gets a fresh process so that its peak RSS (`ru_maxrss`) is its own.
Importing this module (before Keras) also puts the repository root on `sys.path`, so
the scripts run from a checkout without installing it, defaults the backend to
TensorFlow with its C++ logs quietened, and chooses the CPU allocator (below).
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
# Importing keras_capsules selects TensorFlow's pooling CPU allocator, as it does for any
# user, unless TF_CPU_ALLOCATOR_USE_BFC is set: here, in the environment the children
# inherit, before any of them imports TensorFlow, so that a baseline gets the same
# allocator as the model it is compared with. TF_CPU_ALLOCATOR_USE_BFC=false measures
# TensorFlow's default allocator for all of them.
import keras_capsules  # noqa: E402, F401


def child_argv(script, args, only):
    argv = [sys.executable, script, "--only", only]
    for name, value in vars(args).items():
        if name == "only" or value is None:
            continue
        argv += ["--" + name.replace("_", "-"), str(value)]
    return argv


def run_alternating(script, args, names, repeats):
    """Each measurement of `names` run `repeats` times, in turn: `{name: [result, ...]}`.

    A speedup or ratio compares processes run one after the other; on a shared
    machine whose speed drifts, alternating them and taking the median of the
    per-repeat figures is steadier than a single pair.
    """
    runs = {name: [] for name in names}
    repeats = max(repeats, 1)
    for repeat in range(repeats):
        for name in names:
            print(f"== {name}, repeat {repeat + 1} of {repeats} ==", file=sys.stderr, flush=True)
            runs[name].append(run_child(script, args, name))
    return runs


def run_child(script, args, only):
    return run_command(child_argv(script, args, only), only)


def run_command(argv, name, env=None):
    """Run `argv` (with `env`, or this process's environment) and read its last JSON line."""
    proc = subprocess.run(
        argv, stdout=subprocess.PIPE, stderr=None, text=True, check=False, env=env
    )
    if proc.returncode != 0:
        sys.exit(f"the '{name}' subprocess failed with exit status {proc.returncode}")
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if not lines:
        sys.exit(f"the '{name}' subprocess printed no JSON result; stdout was:\n{proc.stdout}")
    return json.loads(lines[-1])


def _cpuinfo(field):
    """The value of the first `field` line of `/proc/cpuinfo` (Linux), or None."""
    try:
        with open("/proc/cpuinfo") as f:
            return next(
                (line.split(":", 1)[1].strip() for line in f if line.startswith(field)), None
            )
    except OSError:
        return None


def cpu_class():
    """`"AVX-512"`, `"AVX2"` or `"other"`: the vector extensions of this machine's CPU (Linux).

    Figures from the two classes do not compare: TensorFlow's kernels, and
    whether it runs oneDNN at all, differ between them. The class alone does
    not say which path TensorFlow takes (an AVX-512 CPU without VNNI runs
    without oneDNN by default, an AVX2 one with AVX-VNNI with it):
    `onednn_enabled()` does.
    """
    flags = (_cpuinfo("flags") or "").split()
    if any(flag.startswith("avx512") for flag in flags):
        return "AVX-512"
    return "AVX2" if "avx2" in flags else "other"


def cpu_model():
    """The CPU's model name from `/proc/cpuinfo`, or None."""
    return _cpuinfo("model name")


def onednn_enabled():
    """Whether TensorFlow runs its oneDNN kernels in this process (None on other backends).

    TensorFlow turns them on by default only on CPUs with VNNI (AVX-512 VNNI,
    AVX-VNNI) or newer extensions; `TF_ENABLE_ONEDNN_OPTS` overrides that.
    With them it also takes large CPU tensors from a pooling allocator of its
    own.
    """
    if os.environ.get("KERAS_BACKEND") != "tensorflow":
        return None
    from keras_capsules._compat import tensorflow

    return tensorflow.onednn_enabled()


ONEDNN_SWITCH = {"off": "0", "on": "1"}
"""`TF_ENABLE_ONEDNN_OPTS` for TensorFlow's oneDNN kernels off and on."""


def add_onednn_argument(parser):
    """`--onednn both|off|on|inherit`, which `onednn_paths` reads."""
    parser.add_argument(
        "--onednn",
        choices=("both", "off", "on", "inherit"),
        default="both",
        help="TensorFlow's oneDNN kernels off and on in one run (both), one of them, "
        "or as the environment sets (inherit)",
    )


def onednn_paths(choice):
    """`{path: environment}` of the children to run for `--onednn` `choice`.

    `"both"` runs every measurement with TensorFlow's oneDNN kernels off
    (`TF_ENABLE_ONEDNN_OPTS=0`, the path most AVX2 CPUs take) and on (`=1`,
    the default of CPUs with VNNI): a kernel slow on one path shows on either
    machine class. `"off"` or `"on"` runs one of them, and `"inherit"` (and
    any choice on another backend, where the variable changes nothing) keeps
    this process's environment, as `"default"`.
    """
    if choice == "inherit" or os.environ.get("KERAS_BACKEND") != "tensorflow":
        return {"default": dict(os.environ)}
    chosen = ("off", "on") if choice == "both" else (choice,)
    return {
        f"onednn_{path}": dict(os.environ, TF_ENABLE_ONEDNN_OPTS=ONEDNN_SWITCH[path])
        for path in chosen
    }
