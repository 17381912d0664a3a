"""Figures of the dynamic routing paper (Sabour et al. 2017), drawn with matplotlib.

Every function returns a `matplotlib.figure.Figure` drawn on the Agg canvas
(no pyplot, no window, nothing shown) and, given `path=`, writes it as a PNG.
Uses matplotlib, a dependency of the package.

- `reconstruction_grid`: inputs above their reconstructions.
- `perturbation_grid`: one capsule dimension tweaked per row (figure 4).
- `multimnist_reconstructions`: both MultiMNIST digits, each decoded from its
  own capsule, in red and green; `multimnist_successes_and_failures` picks
  pairs the model gets right and pairs it gets wrong (figure 5).
- `routing_heatmap`: coupling coefficients over the primary capsule grid.
- `routing_statistics_plot`: coupling entropy, parent activity and same-class
  agreement of every routing layer over many images.
- `build_explorer` / `launch_explorer`: the interactive explorer, a Gradio
  page with a slider per capsule dimension (needs the `explore` extra).
"""

from keras_capsules.visualization._drawing import prepare_drawing
from keras_capsules.visualization.explorer import build_explorer
from keras_capsules.visualization.explorer import launch_explorer
from keras_capsules.visualization.multimnist import multimnist_reconstructions
from keras_capsules.visualization.multimnist import multimnist_successes_and_failures
from keras_capsules.visualization.perturbation import PAPER_STEPS
from keras_capsules.visualization.perturbation import perturbation_grid
from keras_capsules.visualization.perturbation import perturbations
from keras_capsules.visualization.reconstruction import reconstruction_grid
from keras_capsules.visualization.routing import couplings
from keras_capsules.visualization.routing import routing_heatmap
from keras_capsules.visualization.routing_statistics import routing_statistics_plot

__all__ = [
    "build_explorer",
    "launch_explorer",
    "prepare_drawing",
    "PAPER_STEPS",
    "couplings",
    "multimnist_reconstructions",
    "multimnist_successes_and_failures",
    "perturbation_grid",
    "perturbations",
    "reconstruction_grid",
    "routing_heatmap",
    "routing_statistics_plot",
]
