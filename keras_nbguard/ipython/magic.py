"""``%%kerasrun`` and ``%nbguard``: a thin IPython layer over the Session.

The only module that imports IPython."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import os
import shlex
import sys
from collections.abc import Iterator
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments
from IPython.display import display

from keras_nbguard.collectors.gpu import TfGpu
from keras_nbguard.ipython.after_reply import after_reply
from keras_nbguard.ipython.cell import (
    KerasrunCells,
    inside_a_cell,
    run_cell_body,
    run_cell_body_async,
)
from keras_nbguard.ipython.labels import CellLabels
from keras_nbguard.ipython.magic_options import (
    RUN_FLAGS,
    SPELLING,
    check_isolation_options,
    isolation_arguments,
    run_changes,
    run_option_arguments,
)
from keras_nbguard.ipython.reused_layers import hold_reused_layers
from keras_nbguard.ipython.show import show_bundle
from keras_nbguard.ipython.stable_code import CodeCache, StableCellCode
from keras_nbguard.ipython.status import history_db_row, option_rows, status_rows
from keras_nbguard.prepare import gpu_setup
from keras_nbguard.records.options import RunOptions, checked_options
from keras_nbguard.records.tables import key_values, runs_table
from keras_nbguard.session.core import Session, set_session


@dataclasses.dataclass(frozen=True)
class Subcommand:
    """A ``%nbguard`` subcommand: the flags it takes (as typed) and the words after its name."""

    flags: tuple[str, ...] = ()
    operands: str = ""  # e.g. "FILE"; "[LABEL]": the label, as with --label; "" when it takes none


CONFIG_FLAGS = (
    *RUN_FLAGS,
    "--clear",
    "--deep-clean",
    "--release-stale",
    "--no-gpu-limit",
    "--no-host-limit",
    "--no-mixed-precision",
    "--db",
)
# One entry per subcommand, handled by ``KerasMagics._nbguard_<name>``; a new subcommand adds its
# entry, its flags (``@argument`` on ``nbguard``) and its method.
SUBCOMMANDS: dict[str, Subcommand] = {
    "status": Subcommand(),
    "runs": Subcommand(("--label", "--this-kernel"), "[LABEL]"),
    "config": Subcommand(CONFIG_FLAGS),
    "leaks": Subcommand(),
    "free": Subcommand(("--all", "--containers")),
    "dashboard": Subcommand(("--side", "--compact")),
    "export": Subcommand(("--label", "--this-kernel", "--force"), "FILE"),
    "reset": Subcommand(("--label", "--undo")),
    "diagnose": Subcommand(("--label",), "[LABEL]"),
    "compare": Subcommand(("--label", "--this-kernel"), "RUN RUN"),
}


def _checked(base: RunOptions, changes: dict[str, Any]) -> RunOptions:
    try:
        return checked_options(base, SPELLING, **changes)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


@functools.lru_cache(maxsize=64)
def _run_options(line: str, base: RunOptions) -> RunOptions:
    """A re-run repeats its line on the same defaults: parsed and checked once."""
    return _checked(base, run_changes(_parse_kerasrun(line)))


def _flags_given(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[str]:
    """The options on a parsed line, each by its long name (abbreviated or not when typed)."""
    given = []
    for action in parser._actions:
        if not action.option_strings or action.dest == "help":
            continue
        value = getattr(args, action.dest, None)
        if action.nargs == 0:  # a switch: given when the value is its own (two share a dest)
            hit = value == action.const and value != action.default
        else:
            hit = value != action.default
        if hit:
            given.append(max(action.option_strings, key=len))
    return given


def _check_subcommand(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Each subcommand takes its own flags and operands only: anything else is a UsageError that
    says what it takes, never an option silently ignored."""
    command = SUBCOMMANDS[args.command]
    wrong = [flag for flag in _flags_given(parser, args) if flag not in command.flags]
    if wrong:
        takes = f"it takes {', '.join(command.flags)}" if command.flags else "it takes no options"
        raise UsageError(f"%nbguard {args.command} has no option {', '.join(wrong)}; {takes}")
    if args.operands and not command.operands:
        raise UsageError(
            f"%nbguard {args.command} takes nothing after its name but its options "
            f"(got {args.operands[0]!r})"
        )
    if command.operands == "[LABEL]" and args.operands:  # %nbguard diagnose mlp
        label, *more = args.operands
        if more or (args.label is not None and args.label != label):
            raise UsageError(
                f"%nbguard {args.command} takes one label (got {', '.join(args.operands)}"
                + (f" and --label {args.label}" if args.label is not None else "")
                + ")"
            )
        args.label, args.operands = label, []


@functools.lru_cache(maxsize=64)
def _parse_kerasrun(line: str) -> argparse.Namespace:
    """Re-runs repeat the same line: argparse needn't run again (the result is never mutated).
    Split the way a shell would: ``--label 'my model'`` is the label ``my model``."""
    args = KerasMagics.kerasrun.parser.parse_args(_shell_words(line))
    try:
        check_isolation_options(args)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return args


def _isolated_line(line: str) -> bool:
    args = _parse_kerasrun(line)
    return bool(args.isolate or args.sweep or args.cluster)


def _shell_words(line: str) -> list[str]:
    try:
        return shlex.split(line)
    except ValueError as exc:  # "No closing quotation"
        raise UsageError(
            f"can't read the options {line!r}: {exc}; put a name with spaces in "
            f"matching quotes, e.g. --label 'my model'"
        ) from None


@magics_class
class KerasMagics(Magics):
    def __init__(self, shell: Any, session: Session) -> None:
        super().__init__(shell)
        self._shell: Any = shell  # Magics types its own as Optional; ours is always there
        self.session = session
        self.labels = CellLabels()
        self._cell_id: str | None = None
        self._died_later: list[Any] = []
        self.stable_code: StableCellCode | None = None  # set by load()

    def pre_run_cell(self, info: Any) -> None:
        self._cell_id = getattr(info, "cell_id", None)
        # any cell, ours or not: the last run's row is on disk before its code runs (an
        # ipykernel that takes the next request before the loop's callback: Run All)
        self.session.settle_later()

    def say_died_runs(self, died: list[Any]) -> None:
        """Tell the user which runs the last kernel of this notebook died in (the OOM killer).

        Loaded at kernel start (the keras-nbguard kernelspec, IPython config) there is no cell to
        show it in yet, so it goes to the top of the first cell instead of nowhere."""
        if not died:
            return
        if not inside_a_cell(self.shell):
            self._died_later = died
            self._shell.events.register("pre_run_cell", self._say_died_in_first_cell)
            return
        for run in died:
            display(run)

    def _say_died_in_first_cell(self, info: Any) -> None:
        self._shell.events.unregister("pre_run_cell", self._say_died_in_first_cell)
        died, self._died_later = self._died_later, []
        for run in died:
            display(run)

    @magic_arguments()
    @argument(
        "--label",
        "-l",
        metavar="NAME",
        default=None,
        help="Name runs of this cell are compared under (default: the cell's first line, "
        "kept across re-runs and edits of the same cell).",
    )
    @argument(
        "--batch-advice",
        action="store_true",
        help="Before the run: the largest batch predicted to fit, for the model and data the "
        "label's last run fit (keras_nbguard.batch_advice).",
    )
    @isolation_arguments
    @run_option_arguments
    @cell_magic
    def kerasrun(self, line: str, cell: str) -> Any:
        """Run the cell with Keras session clearing and GPU setup, and measure it.

        Each run records wall and fit time (per fit and per epoch), RSS before/after/peak, GPU
        memory and tf.function traces, and shows a summary compared with the previous run of the
        same label. ``keras_nbguard.runs()`` returns the records.
        """
        __tracebackhide__ = True
        if _isolated_line(line):
            return self._isolated(line, cell)
        with self._measured(line, cell), self._timing_magics_kept():
            return run_cell_body(self.shell, f"%%kerasrun {line}".rstrip(), cell)

    async def kerasrun_async(self, line: str, cell: str) -> Any:
        """``%%kerasrun`` for a cell with top-level ``await`` (see ``cell.KerasrunCells``)."""
        __tracebackhide__ = True
        if _isolated_line(line):
            return self._isolated(line, cell)  # the child process awaits it
        with self._measured(line, cell), self._timing_magics_kept():
            return await run_cell_body_async(self.shell, f"%%kerasrun {line}".rstrip(), cell)

    def _timing_magics_kept(self) -> contextlib.AbstractContextManager[None]:
        """A ``%time`` in the body runs the code of its last run (stable_code.py says why)."""
        if self.stable_code is None:
            return contextlib.nullcontext()
        return self.stable_code.running_body()

    def _isolated(self, line: str, cell: str) -> Any:
        """``--isolate`` / ``--sweep``: the cell runs in fresh processes (isolation/)."""
        # not at %load_ext: cloudpickle, subprocess
        from keras_nbguard.isolation import Isolation, run_isolated
        from keras_nbguard.isolation.names import AskedOutputs

        args = _parse_kerasrun(line)
        if args.batch_advice:
            raise UsageError(
                "--batch-advice probes in this kernel, before an in-kernel run; with --isolate, "
                "call keras_nbguard.batch_advice(model, x, y) in the cell"
            )
        label = args.label or self.labels.label_for(cell, self._cell_id)
        try:
            how = Isolation(
                inputs=args.inputs,
                outputs=args.outputs,
                sweep=args.sweep,
                parallel=1 if args.parallel is None else args.parallel,
                yes=args.yes,
                prestart=args.prestart,
                cluster=args.cluster,
                gpus=args.gpus,
            )
            options = _run_options(line, self.session.options)
            asked = AskedOutputs.of(args.outputs, cell, self._shell.user_ns)
            value = run_isolated(
                self.session, self._shell, label, cell, how, options, self._cell_id
            )
        except ValueError as exc:  # what can't be sent, a bad --sweep: before anything starts
            raise UsageError(str(exc)) from None
        # a name --outputs asks for that the cell never binds: a typo, said after the run
        if note := asked.never_back(self._shell.user_ns, value if args.sweep else None):
            print(f"keras_nbguard: {note}", file=sys.stderr)
        return value

    @contextlib.contextmanager
    def _measured(self, line: str, cell: str) -> Iterator[None]:
        __tracebackhide__ = True
        args = _parse_kerasrun(line)
        options = _run_options(line, self.session.options)
        label = args.label or self.labels.label_for(cell, self._cell_id)
        if args.batch_advice:  # before the run: its probes are not the run's
            from keras_nbguard.advisor.batch_advisor import advice_for_label

            print(advice_for_label(self.session, label, options))
        if options.clear:  # (its clear restarts the label's layer names)
            hold_reused_layers(self._shell, cell, label)
        run = None
        try:
            with self.session.track(label, cell_id=self._cell_id, run_options=options) as run:
                yield
        finally:
            if run is not None and run.record is not None and not options.quiet:
                # a ready bundle: IPython needn't ask the record for each of its formats
                show_bundle(self.shell, run.record.summary_bundle())

    @magic_arguments()
    @argument("command", choices=SUBCOMMANDS, help=" | ".join(SUBCOMMANDS))
    @argument(
        "operands",
        nargs="*",
        help="export: the file (.csv or .json); compare: two runs (mlp:3 mlp:7); runs, "
        "diagnose: a label.",
    )
    @argument("--all", dest="free_all", action="store_true", help="free: current models too.")
    @argument("--undo", action="store_true", help="reset: show the hidden runs again.")
    @argument(
        "--containers",
        action="store_true",
        help="free: also set the slots of your lists, dicts, attributes and closures that "
        "hold them to None.",
    )
    @argument(
        "--label",
        "-l",
        metavar="NAME",
        default=None,
        help="runs, export, diagnose, compare: only this label; reset: hide (or with "
        "--undo show again) this label's runs only.",
    )
    @argument(
        "--this-kernel",
        action="store_true",
        help="runs, export, compare: only this kernel's runs (not earlier kernels').",
    )
    @argument(
        "--force",
        action="store_true",
        help="export: replace an existing file (never the history database or a notebook).",
    )
    @argument(
        "--db",
        metavar="PATH",
        default=None,
        help="config: keep the run history in this SQLite file (':memory:': not on disk).",
    )
    @argument("--side", action="store_true", help="dashboard: in a JupyterLab side panel.")
    @argument("--compact", action="store_true", help="dashboard: one line, redrawn each run.")
    @argument("--no-gpu-limit", action="store_true", help="config: drop the GPU memory cap.")
    @argument("--no-host-limit", action="store_true", help="config: drop the RSS cap.")
    @argument(
        "--no-mixed-precision", action="store_true", help="config: stop setting a dtype policy."
    )
    @argument(
        "--clear",
        dest="clear",
        action="store_const",
        const=True,
        help="config: clear before each run (the default).",
    )
    @argument(
        "--deep-clean",
        dest="deep_clean",
        action="store_const",
        const=True,
        help="config: deep-clean before each run (the default).",
    )
    @argument(
        "--release-stale",
        dest="keep_stale",
        action="store_const",
        const=False,
        help="config: release earlier runs' models held only by caches (the default).",
    )
    @run_option_arguments
    @line_magic
    def nbguard(self, line: str) -> Any:
        """keras_nbguard commands; each takes only its own options.

        status   what the extension sees: configuration, GPU setup, runs so far, RSS now.
        runs     the runs of this notebook as a table (``runs NAME``, ``--label NAME``: one label).
        leaks    every live Keras model after a garbage collection, with the paths that hold it;
                 stale ones flagged.
        diagnose why runs got slower or fatter, in words, with the numbers (``diagnose NAME``
                 or ``--label NAME``: one label's runs).
        compare  two runs side by side: ``%nbguard compare mlp:3 mlp:7`` (a label: its last;
                 its start will do; ``3 7``: runs of the latest run's label).
        free     drop references to stale models (``--all``: current ones too;
                 ``--containers``: also inside your lists/dicts/attributes), then clear.
        dashboard  the live dashboard widget (a static view without a widget frontend);
                 ``--side``: in a JupyterLab side panel; ``--compact``: one line.
        export   write the runs to a new file, CSV or JSON by its ending: ``%nbguard export
                 runs.csv`` or ``runs.json`` (``--label``, ``--this-kernel`` to narrow;
                 ``--force`` to replace an existing file).
        reset    hide the runs so far from ``runs()`` and the dashboard (the database keeps
                 them; run numbers go on); ``--label NAME``: that label's only; ``--undo``
                 shows them again.
        config   show the defaults every ``%%kerasrun`` starts from, or change them with the same
                 options ``%%kerasrun`` takes (plus --clear, --no-gpu-limit, --no-mixed-precision,
                 and --db PATH for where the run history is kept).
        batch    the largest batch predicted to fit: ``%nbguard batch MODEL X [Y] [--limit MiB]
                 [--batch N] [--steps N]`` (a few short steps on a copy of the model).
        """
        words = _shell_words(line)
        if words and words[0] == "batch":  # its own small grammar (batch_advisor.py)
            from keras_nbguard.advisor.batch_advisor import batch_line_magic

            try:
                return batch_line_magic(self.shell, line)
            except ValueError as exc:
                raise UsageError(str(exc)) from None
        parser = self.nbguard.parser
        # intermixed: a file name or label after an option is still an operand (``export --label
        # mlp runs.csv``); parse_args gives "operands" its words before the first option only
        args = parser.parse_intermixed_args(words)
        _check_subcommand(parser, args)
        handler = getattr(self, f"_nbguard_{args.command}")
        try:
            return handler(args)
        except ValueError as exc:  # the user's mistake, said in the user's terms
            raise UsageError(str(exc)) from None

    def _nbguard_status(self, args: argparse.Namespace) -> Any:
        return key_values("keras_nbguard status", status_rows(self.session))

    def _nbguard_runs(self, args: argparse.Namespace) -> Any:
        return runs_table(self.session.runs(args.label, args.this_kernel))

    def _nbguard_leaks(self, args: argparse.Namespace) -> Any:
        return self.session.leaks(collect=True)

    def _nbguard_diagnose(self, args: argparse.Namespace) -> Any:
        if args.label is not None and not self.session.runs(args.label, this_kernel=True):
            labels = dict.fromkeys(r.label for r in self.session.runs(this_kernel=True))
            known = f"its labels: {', '.join(labels)}" if labels else "no run yet"
            raise UsageError(
                f"%nbguard diagnose: no run labelled {args.label!r} in this kernel ({known})"
            )
        return self.session.diagnose(args.label)

    def _nbguard_free(self, args: argparse.Namespace) -> Any:
        return self.session.free(include_current=args.free_all, containers=args.containers)

    def _nbguard_dashboard(self, args: argparse.Namespace) -> Any:
        from keras_nbguard.board.kernel_board import show

        return show(self.session, side=args.side, compact=args.compact)

    def _nbguard_reset(self, args: argparse.Namespace) -> Any:
        return self.session.perform(
            "undo_reset" if args.undo else "reset_history", label=args.label
        )

    def _nbguard_config(self, args: argparse.Namespace) -> Any:
        changes = run_changes(args)
        for flag, name in (
            ("no_gpu_limit", "gpu_limit_mb"),
            ("no_host_limit", "host_limit_mb"),
            ("no_mixed_precision", "mixed_precision"),
        ):
            if getattr(args, flag):
                if changes.get(name) is not None:
                    raise UsageError(
                        f"give one of {SPELLING[name]} and --{flag.replace('_', '-')}, not both"
                    )
                changes[name] = None
        options = _checked(self.session.options, changes)
        if args.db is not None:
            try:
                self.session.use_store(args.db)
            except RuntimeError as exc:
                raise UsageError(str(exc)) from None
        self.session.options = options
        return key_values(
            "keras_nbguard config", [*option_rows(options), history_db_row(self.session.store)]
        )

    def _nbguard_compare(self, args: argparse.Namespace) -> Any:
        from keras_nbguard.diagnosis.compare import compare_runs

        return compare_runs(self.session.runs(args.label, args.this_kernel), args.operands)

    def _nbguard_export(self, args: argparse.Namespace) -> Any:
        from keras_nbguard.store.exporting import write_runs

        if not args.operands:
            raise ValueError(
                "%nbguard export needs a file name: %nbguard export runs.csv (or runs.json)"
            )
        if len(args.operands) > 1:
            raise ValueError(
                f"%nbguard export takes one file name, not {len(args.operands)} "
                f"(put a name with spaces in quotes)"
            )
        path = os.path.expanduser(args.operands[0])
        records = self.session.runs(args.label, args.this_kernel)
        if args.label is not None and not records:  # a typo wrote a file of headers alone
            labels = dict.fromkeys(r.label for r in self.session.runs(this_kernel=args.this_kernel))
            known = f"the labels: {', '.join(labels)}" if labels else "no run yet"
            raise UsageError(
                f"%nbguard export: no run labelled {args.label!r} ({known}); nothing written"
            )
        count = write_runs(
            records,
            path,
            force=args.force,
            protected=self.session.protected_paths(),
        )
        print(f"keras_nbguard: wrote {count} run(s) to {args.operands[0]}")


def load(shell: Any) -> KerasMagics:
    unload(shell)  # a second %load_ext must not double anything
    session = Session(shell=shell)
    session.later.schedule = after_reply(shell)
    for problem in gpu_setup.configure_at_load(TfGpu.if_imported()):
        session.warn_once(problem)
    if "malloc" in os.environ.get("LD_PRELOAD", ""):  # (ctypes only then: not at every load)
        from keras_nbguard.collectors.allocated import DEBIAN_PACKAGES, preload_missed

        if missed := preload_missed():
            session.warn_once(
                f"this kernel asks for {missed} (LD_PRELOAD={os.environ['LD_PRELOAD']}) but runs "
                f"on glibc's malloc: {missed} is not installed where the loader looks "
                f"(Debian/Ubuntu: `apt-get install {DEBIAN_PACKAGES[missed]}`; elsewhere set "
                f"LD_PRELOAD in the kernel's kernel.json to the library's full path)"
            )
    magics = KerasMagics(shell, session)
    shell.register_magics(magics)
    shell.input_transformers_cleanup.append(
        KerasrunCells(
            shell, f"get_ipython().magics_manager.registry[{KerasMagics.__name__!r}].kerasrun_async"
        )
    )
    shell.events.register("pre_run_cell", magics.pre_run_cell)
    magics.stable_code = StableCellCode(shell, CodeCache())
    magics.stable_code.install()
    magics.say_died_runs(session.died)
    set_session(session)
    board = sys.modules.get("keras_nbguard.board.kernel_board")
    if board is not None:  # %reload_ext: the dashboard already shown follows the new session
        board.follow(session)
    else:  # a new kernel: the side panel its notebook had comes back (side_panel.py)
        from keras_nbguard.board.side_panel import reopen

        reopen(session)
    return magics


def unload(shell: Any) -> None:
    manager = shell.magics_manager
    magics = manager.registry.pop(KerasMagics.__name__, None)
    if magics is None:
        return
    with contextlib.suppress(ValueError):
        shell.events.unregister("pre_run_cell", magics.pre_run_cell)
    with contextlib.suppress(ValueError):  # still waiting for a first cell
        shell.events.unregister("pre_run_cell", magics._say_died_in_first_cell)
    manager.magics["cell"].pop("kerasrun", None)
    stable_code = getattr(magics, "stable_code", None)
    if stable_code is not None:
        stable_code.remove()
    shell.input_transformers_cleanup[:] = [
        t for t in shell.input_transformers_cleanup if not isinstance(t, KerasrunCells)
    ]
    manager.magics["line"].pop("nbguard", None)
    isolation = sys.modules.get("keras_nbguard.isolation")
    if isolation is not None:  # --prestart's waiting process ends with the extension
        isolation.close_spares()
    magics.session.close()
    kept_state = sys.modules.get("keras_nbguard.prepare.kept_state")
    if kept_state is not None:  # Keras' name counters are its own again
        kept_state.forget()
    board = getattr(magics.session, "dashboard", None)
    if board is not None:  # its pre/post_run_cell hooks and session listeners go too
        board.detach()
    set_session(None)
