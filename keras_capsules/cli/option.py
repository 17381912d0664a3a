"""`Option`: one command-line option of an architecture, declared by its family."""

import argparse
import dataclasses
from collections.abc import Callable
from typing import Any


@dataclasses.dataclass(frozen=True)
class Option:
    """One option of `keras-capsules train ARCH`: a constructor argument of the architecture.

    A family declares its options once, as its classifier's `OPTIONS`, beside
    its `BACKBONE` and `RECIPE`; the command line builds `train ARCH`'s
    options from them (`train ARCH --help` lists that architecture's and no
    other's), refuses another architecture's option naming both, records
    the value of each in the run's `run.json` (`default` where it is not
    given) and hands the values to the classifier's `option_arguments`.

    Args:
        argument: the constructor argument the option sets, e.g.
            `"capsule_dim"`. The flag is `--capsule-dim`; a one-letter
            argument (`"A"`) is `-A`.
        help: what the option does, in a few words.
        type: the function that reads the option's text: `int`, `float`,
            `str` or one of `keras_capsules.cli.argument_types` (`positive_int`,
            `tempering`, ...), which raise argparse's error for a bad value.
        default: the value the architecture takes without the option,
            shown by `--help` and recorded in `run.json`; `None` where the
            architecture decides (the help then says how).
        choices: the values the option takes, or `None` for any.
        metavar: the name `--help` shows for the value.
        required: the architecture cannot be built without it (unless a
            preset brings it: `--from-preset`).

    Example:

    >>> from keras_capsules.cli.argument_types import positive_int
    >>> from keras_capsules.cli.option import Option
    >>> option = Option("capsule_dim", "class capsules' dimensions", type=positive_int, default=16)
    >>> option.flag, option.help_text()
    ('--capsule-dim', "class capsules' dimensions (16)")
    >>> Option("A", "A of the paper", type=positive_int, default=32).flag
    '-A'
    """

    argument: str
    help: str
    type: Callable[[str], Any] = str
    default: Any = None
    choices: tuple = None
    metavar: str = None
    required: bool = False

    def __post_init__(self):
        if not isinstance(self.argument, str) or not self.argument.isidentifier():
            raise ValueError(
                "`argument` must be the name of a constructor argument, a Python identifier. "
                f"Received: argument={self.argument!r}"
            )
        if not isinstance(self.help, str) or not self.help:
            raise ValueError(f"`help` must be a non-empty string. Received: help={self.help!r}")
        if self.choices is not None:
            object.__setattr__(self, "choices", tuple(self.choices))

    @property
    def flag(self):
        """The option as typed: `--capsule-dim`, or `-A` for a one-letter argument."""
        if len(self.argument) == 1:
            return "-" + self.argument
        return "--" + self.argument.replace("_", "-")

    def help_text(self):
        """The help `--help` shows: `help`, with the default in parentheses where there is one."""
        if self.default is None:
            return self.help
        return f"{self.help} ({self.default})"

    def add_to(self, parser):
        """Add the option to the argparse `parser` (or group); left out, it sets nothing.

        So an option left out is told apart from one given with its default value
        (or with `none`, which some read as `None`); the command fills in
        `default` once it has checked what was given.
        """
        parser.add_argument(
            self.flag,
            dest=self.argument,
            type=self.type,
            default=argparse.SUPPRESS,
            choices=self.choices,
            metavar=self.metavar,
            help=self.help_text(),
        )
