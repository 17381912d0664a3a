"""`python -m keras_capsules.cli`: the `keras-capsules` command."""

import sys

from keras_capsules.cli import main

if __name__ == "__main__":
    sys.exit(main())
