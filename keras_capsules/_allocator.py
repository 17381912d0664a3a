"""Pool TensorFlow's CPU memory instead of returning it to the system at every step.

TensorFlow's default CPU allocator takes every large tensor from the C
library, which maps it fresh from the operating system and unmaps it when the
tensor is freed. The next step's tensor of the same size then faults its
pages in again, one page at a time. Capsule layers create tensors of tens of
MB per step (EM routing's votes, dynamic routing's weighted inputs), so on a
CPU a large share of a training step went to page faults (system time).

TensorFlow's BFC allocator keeps freed memory in a pool and reuses it, which
removes those faults. It is chosen with the `TF_CPU_ALLOCATOR_USE_BFC`
environment variable, read once, when TensorFlow first allocates a tensor.
Importing `keras_capsules` sets it to `"true"` unless it is already set: set
it to `"false"` before importing to keep TensorFlow's default. It has no
effect if TensorFlow ran an operation before `keras_capsules` was imported,
and none on the JAX and PyTorch backends.

Where TensorFlow runs its oneDNN kernels (its default on CPUs with AVX-512,
or with `TF_ENABLE_ONEDNN_OPTS=1`), it takes CPU memory from oneDNN's own
allocator instead, which pools large tensors itself: the variable then
changes nothing.

The pool holds what the process needed at its peak, plus what fragmentation
costs: measured here, peak memory fell by up to 5% for CapsNetMNIST and grew
by 1-32% for the EM models (most for the 32/32/32/32 model at batch 64). The
memory is returned to the system when the process ends. `docs/scaling.md`
("CPU memory allocator") has the measurements.
"""

import os

ENVIRONMENT_VARIABLE = "TF_CPU_ALLOCATOR_USE_BFC"

os.environ.setdefault(ENVIRONMENT_VARIABLE, "true")
