#!/usr/bin/env bash
# Redraw the pictures of docs/figures.md from the shipped capsnet_mnist preset:
# `keras-capsules figures` with no model draws its figures, and a screenshot of
# `keras-capsules explore` is taken in headless Chromium. Run from anywhere, in the
# project's virtualenv; takes about a minute on 2 CPU cores.
set -euo pipefail
cd "$(dirname "$0")/../.."
export KERAS_BACKEND=tensorflow
keras-capsules figures --output docs/images --count 8 --index 0
python docs/images/screenshot_explorer.py docs/images/explorer.png
