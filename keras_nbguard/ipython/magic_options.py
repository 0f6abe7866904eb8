"""The options of ``%%kerasrun`` (and those ``%nbguard config`` shares), as magic_arguments
decorators: what each does, in the words ``%%kerasrun?`` shows; and the parsed line turned into
plain ``RunOptions`` changes (options.py checks them: argparse stops here)."""

from __future__ import annotations

import argparse
from typing import Any

from IPython.core.magic_arguments import argument

# argparse's name (dest) -> the RunOptions field; the flag a user types, for error messages
RUN_FIELDS = {
    "clear": "clear",
    "deep_clean": "deep_clean",
    "gpu_growth": "gpu_growth",
    "gpu_limit": "gpu_limit_mb",
    "host_limit": "host_limit_mb",
    "mixed_precision": "mixed_precision",
    "keep_stale": "keep_stale",
    "quiet": "quiet",
}
SPELLING = {
    "clear": "--no-clear",
    "deep_clean": "--no-deep-clean",
    "gpu_growth": "--gpu-growth",
    "gpu_limit_mb": "--gpu-limit",
    "host_limit_mb": "--host-limit",
    "mixed_precision": "--mixed-precision",
    "keep_stale": "--keep-stale",
    "quiet": "--quiet",
}
RUN_FLAGS = (
    "--no-clear",
    "--no-deep-clean",
    "--gpu-growth",
    "--no-gpu-growth",
    "--gpu-limit",
    "--host-limit",
    "--mixed-precision",
    "--keep-stale",
    "--quiet",
)


def run_changes(args: argparse.Namespace) -> dict[str, Any]:
    """The run options given on the line (None: not given), by ``RunOptions`` field name."""
    return {
        field: value
        for dest, field in RUN_FIELDS.items()
        if (value := getattr(args, dest, None)) is not None
    }


def check_isolation_options(args: argparse.Namespace) -> None:
    """An option that acts only beside another one, given without it: ``ValueError`` in the
    user's terms (the magic makes it a UsageError), never an option silently ignored."""
    if args.parallel is not None and not args.sweep:
        raise ValueError(
            f"--parallel {args.parallel} runs the points of a --sweep side by side: it needs "
            f'--sweep (e.g. --sweep "lr=1e-3,1e-4" --parallel {args.parallel}); one --isolate '
            f"run is one process"
        )
    if args.yes and not args.sweep:
        raise ValueError("--yes runs a --sweep of more than 100 points: it needs --sweep")
    if args.gpus is not None and not args.cluster:
        raise ValueError("--gpus is what each Ray task asks for: it needs --cluster ray")
    isolated = args.isolate or args.sweep or args.cluster
    given = [
        flag
        for flag, on in (
            ("--inputs", args.inputs is not None),
            ("--outputs", args.outputs is not None),
            ("--prestart", args.prestart),
        )
        if on
    ]
    if given and not isolated:
        raise ValueError(
            f"{' and '.join(given)} act on a run in another process: add --isolate (or --sweep)"
        )


def run_option_arguments(func: Any) -> Any:
    """The options shared by ``%%kerasrun`` and ``%nbguard config``."""
    for decorator in reversed(
        (
            argument(
                "--no-clear",
                dest="clear",
                action="store_const",
                const=False,
                default=None,
                help="Don't run gc + keras.utils.clear_session() before the cell.",
            ),
            argument(
                "--no-deep-clean",
                dest="deep_clean",
                action="store_const",
                const=False,
                default=None,
                help="Don't purge what clear_session leaves behind (TensorFlow's "
                "gradient entries of earlier runs whose models are gone).",
            ),
            argument(
                "--gpu-growth",
                dest="gpu_growth",
                action="store_const",
                const=True,
                default=None,
                help="Let TensorFlow grow GPU memory as needed (default on).",
            ),
            argument(
                "--no-gpu-growth",
                dest="gpu_growth",
                action="store_const",
                const=False,
                help="Let TensorFlow reserve the whole GPU up front.",
            ),
            argument(
                "--gpu-limit",
                type=int,
                metavar="MiB",
                default=None,
                help="Hard cap on GPU memory, through a logical device. Needs to run before "
                "TensorFlow initializes the GPU (imports TensorFlow if needed).",
            ),
            argument(
                "--host-limit",
                type=int,
                metavar="MiB",
                default=None,
                help="Cap on the memory the run adds to the kernel's RSS: past it, the run is "
                "stopped as out of memory at its next Python line (checked 4 times a "
                "second).",
            ),
            argument(
                "--mixed-precision",
                nargs="?",
                const="mixed_float16",
                metavar="POLICY",
                default=None,
                help="Keras dtype policy, re-applied after each clear_session "
                "(default mixed_float16; or mixed_bfloat16).",
            ),
            argument(
                "--keep-stale",
                dest="keep_stale",
                action="store_const",
                const=True,
                default=None,
                help="Keep earlier runs' models that only IPython's output cache "
                "(Out[n], _) or a Keras History's .model still hold; by "
                "default they are released.",
            ),
            argument(
                "--quiet",
                action="store_const",
                const=True,
                default=None,
                help="Don't show the run summary under the cell.",
            ),
        )
    ):
        func = decorator(func)
    return func


def isolation_arguments(func: Any) -> Any:
    """``%%kerasrun --isolate`` and sweeps (isolation/): a fresh process per run."""
    for decorator in reversed(
        (
            argument(
                "--isolate",
                action="store_true",
                help="Run the cell in a fresh Python process: the names it reads go in, the "
                "names it binds come back; the kernel keeps nothing of the run.",
            ),
            argument(
                "--inputs",
                metavar="A,B",
                default=None,
                help="--isolate: the names to send (default: those the cell reads).",
            ),
            argument(
                "--outputs",
                metavar="A,B",
                default=None,
                help="--isolate: the names to bring back (default: those the cell binds).",
            ),
            argument(
                "--sweep",
                metavar="SPEC",
                default=None,
                help="Run the cell isolated once per combination, e.g. "
                '"units=32,64; lr=1e-3,1e-4" (4 runs); the names are set in each.',
            ),
            argument(
                "--parallel",
                type=int,
                metavar="N",
                default=None,  # given or not: without --sweep it is a mistake, never ignored
                help="--sweep: processes at once (default 1: a GPU is usually shared).",
            ),
            argument(
                "--yes",
                action="store_true",
                help="--sweep: run a sweep of more than 100 points (asked otherwise).",
            ),
            argument(
                "--prestart",
                action="store_true",
                help="--isolate: after the run, start the next run's process with the cell's "
                "imports loaded, so the next run skips that start-up (it holds their memory "
                "meanwhile).",
            ),
            argument(
                "--cluster",
                choices=("ray",),
                default=None,
                help="Run each isolated run as a Ray task in a fresh worker process (a local "
                "Ray, or the cluster at RAY_ADDRESS); needs keras_nbguard[ray].",
            ),
            argument(
                "--gpus",
                type=float,
                metavar="N",
                default=None,
                help="--cluster ray: GPUs each run asks Ray for (default 0).",
            ),
        )
    ):
        func = decorator(func)
    return func
