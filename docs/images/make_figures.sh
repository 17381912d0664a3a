#!/usr/bin/env bash
# Redraw the pictures of docs/figures.md: train a reduced CapsNetMNIST for one pass
# over 20,000 MNIST images (a few minutes on 2 CPU cores), draw its figures with
# `keras-capsules figures`, and take a screenshot of `keras-capsules explore` in
# headless Chromium. Run from anywhere, in the project's virtualenv.
set -euo pipefail
cd "$(dirname "$0")/../.."
export KERAS_BACKEND=tensorflow
run=runs/docs-figures
keras-capsules train capsnet-mnist --conv-filters 64 --primary-capsules 16 \
    --train-size 20000 --epochs 1 --seed 0 --output "$run"
keras-capsules figures "$run/model.keras" --output docs/images --count 8 --index 0
python docs/images/screenshot_explorer.py "$run/model.keras" docs/images/explorer.png
