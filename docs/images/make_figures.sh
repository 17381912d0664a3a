#!/usr/bin/env bash
# Redraw the pictures of docs/figures.md from the shipped capsnet_mnist preset (and
# the MultiMNIST one, for figure 5):
# `keras-capsules figures` with no model draws its figures, and a screenshot of
# `keras-capsules explore` is taken in headless Chromium. Run from anywhere, in the
# project's virtualenv; takes about a minute on 2 CPU cores.
set -euo pipefail
cd "$(dirname "$0")/../.."
export KERAS_BACKEND=tensorflow
keras-capsules figures --output docs/images --count 8 --index 0
# Figure 5 of Sabour et al. from the MultiMNIST preset: successes, then failures.
keras-capsules figures --preset efficient_capsnet_multimnist --kind multimnist --count 6 \
    --output docs/images/multimnist_preset
python docs/images/screenshot_explorer.py docs/images/explorer.png
