"""The public API and the option model under bad input: one check for every way in (configure,
track, %nbguard config, %%kerasrun), subcommands that refuse flags they don't take, and public
functions that no submodule import can shadow. A real shell, a real database."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import types

import pytest
from IPython.core.error import UsageError

import keras_nbguard
from keras_nbguard.records.options import RunOptions, checked_options
from keras_nbguard.session.core import Session, using

# -- one option model ---------------------------------------------------------------------------


@pytest.fixture
def session():
    with using(Session(store=None)) as s:
        yield s


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"gpu_limit_mb": -5}, "gpu_limit_mb takes a positive number of MiB, not -5"),
        ({"gpu_limit_mb": 0}, "gpu_limit_mb takes a positive number of MiB"),
        ({"host_limit_mb": "abc"}, "host_limit_mb takes a positive whole number of MiB"),
        ({"host_limit_mb": 1.5}, "host_limit_mb takes a positive whole number"),
        ({"mixed_precision": "float8"}, "mixed_precision: unknown policy 'float8'"),
        ({"mixed_precision": ["mixed_float16"]}, "unknown policy"),
        ({"clear": "no"}, "clear takes True or False, not 'no'"),
        ({"gpu_growth": "yes"}, "gpu_growth takes True or False"),
    ],
)
def test_configure_rejects_wrong_values_and_changes_nothing(session, changes, message):
    before = session.options
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        keras_nbguard.configure(quiet=True, **changes)
    assert session.options == before  # not even the valid quiet=True


def test_the_accepted_values_come_out_in_one_form(session):
    options = keras_nbguard.configure(
        gpu_limit_mb=2048.0, host_limit_mb=512, mixed_precision="float16", clear=0, gpu_growth=None
    )
    assert options.gpu_limit_mb == 2048 and isinstance(options.gpu_limit_mb, int)
    assert options.mixed_precision == "mixed_float16"  # as the magic has always mapped it
    assert options.clear is False and options.gpu_growth is None
    assert keras_nbguard.configure(mixed_precision="BFloat16").mixed_precision == "mixed_bfloat16"
    assert keras_nbguard.configure(mixed_precision=True).mixed_precision == "mixed_float16"
    assert keras_nbguard.configure(mixed_precision=None, gpu_limit_mb=None).gpu_limit_mb is None
    with pytest.raises(TypeError, match=r"unknown option.*colour.*the options are"):
        keras_nbguard.configure(colour="red")


def test_track_checks_its_options_like_configure(session):
    with (
        pytest.raises(ValueError, match="host_limit_mb"),
        keras_nbguard.track("x", host_limit_mb="abc"),
    ):
        pass
    assert keras_nbguard.runs() == []  # no run began
    with keras_nbguard.track("y", mixed_precision="float16", clear=False) as run:
        pass
    assert run.options.mixed_precision == "mixed_float16"


def test_checked_options_names_what_the_user_typed():
    with pytest.raises(ValueError, match=r"^--gpu-limit takes a positive"):
        checked_options(RunOptions(), {"gpu_limit_mb": "--gpu-limit"}, gpu_limit_mb=-1)
    assert checked_options(RunOptions()) == RunOptions()


def test_the_magics_map_float16_as_configure_does(shell):
    table = shell.run_line_magic("nbguard", "config --mixed-precision float16 --host-limit 64")
    assert ("mixed precision", "mixed_float16") in table.rows
    assert keras_nbguard.get_session().options.host_limit_mb == 64
    with pytest.raises(UsageError, match="--host-limit takes a positive number of MiB, not -3"):
        shell.run_line_magic("nbguard", "config --host-limit -3")
    with pytest.raises(UsageError, match="give one of --gpu-limit and --no-gpu-limit"):
        shell.run_line_magic("nbguard", "config --gpu-limit 5 --no-gpu-limit")
    with pytest.raises(UsageError, match="invalid int value: 'abc'"):
        shell.run_line_magic("nbguard", "config --host-limit abc")
    assert keras_nbguard.get_session().options.host_limit_mb == 64  # unchanged by the errors
    shell.run_line_magic("nbguard", "config --no-mixed-precision --no-host-limit")


# -- each subcommand takes its own flags ---------------------------------------------------------


@pytest.mark.parametrize(
    "line, message",
    [
        (
            "runs --db {tmp}/x.sqlite",
            "%nbguard runs has no option --db; it takes --label, --this-kernel",
        ),
        ("status --gpu-limit 5", "%nbguard status has no option --gpu-limit; it takes no options"),
        ("leaks --label a", "%nbguard leaks has no option --label"),
        ("reset --all", "%nbguard reset has no option --all; it takes --label, --undo"),
        ("diagnose --this-kernel", "%nbguard diagnose has no option --this-kernel"),
        ("free --quiet --side", "%nbguard free has no option --side, --quiet"),
        ("export runs.csv --undo", "%nbguard export has no option --undo"),
        ("dashboard --no-clear", "%nbguard dashboard has no option --no-clear"),
        ("runs --this", None),  # an abbreviation of its own flag is still its flag
    ],
)
def test_a_flag_the_subcommand_does_not_take_is_a_usage_error(shell, tmp_path, line, message):
    db_before = keras_nbguard.get_session().store.path
    options_before = keras_nbguard.get_session().options
    line = line.format(tmp=tmp_path)
    if message is None:
        shell.run_line_magic("nbguard", line)
        return
    with pytest.raises(UsageError) as error:
        shell.run_line_magic("nbguard", line)
    # the flags in the order the parser knows them; each named, none ignored
    for part in message.replace(",", "").split():
        assert part in str(error.value)
    assert keras_nbguard.get_session().store.path == db_before
    assert keras_nbguard.get_session().options == options_before
    assert not (tmp_path / "x.sqlite").exists()


def test_runs_and_diagnose_take_a_label_as_typed_after_their_name(shell):
    # %nbguard diagnose mlp: the label a user types after the name, as with --label
    for _ in range(2):
        assert shell.run_cell("%%kerasrun --no-clear --quiet --label mlp\nx1 = 1").success
    assert shell.run_cell("%%kerasrun --no-clear --quiet --label cnn\nx1 = 1").success
    table = str(shell.run_line_magic("nbguard", "runs mlp"))
    assert table == str(shell.run_line_magic("nbguard", "runs --label mlp"))
    assert "mlp" in table and "cnn" not in table
    assert shell.run_line_magic("nbguard", "diagnose mlp") is not None
    for line, message in (
        ("diagnose typo", "no run labelled 'typo' in this kernel (its labels: mlp, cnn)"),
        ("diagnose mlp cnn", "takes one label (got mlp, cnn)"),
        ("diagnose mlp --label cnn", "takes one label (got mlp and --label cnn)"),
        ("leaks mlp", "%nbguard leaks takes nothing after its name but its options (got 'mlp')"),
    ):
        with pytest.raises(UsageError) as error:
            shell.run_line_magic("nbguard", line)
        assert message in str(error.value), line


def test_every_subcommand_has_its_method():
    from keras_nbguard.ipython.magic import SUBCOMMANDS, KerasMagics

    for name in SUBCOMMANDS:
        assert callable(getattr(KerasMagics, f"_nbguard_{name}"))


# -- no submodule shadows a public function ----------------------------------------------------

OPTIONAL = ("ray", "jupyter_server", "tornado", "ipywidgets", "plotly", "anywidget", "sidecar")


def import_every_submodule() -> list[str]:
    names = []
    for info in pkgutil.walk_packages(keras_nbguard.__path__, "keras_nbguard."):
        try:
            importlib.import_module(info.name)
        except ImportError as exc:  # an optional extra missing here: say which, go on
            if not any(extra in str(exc) for extra in OPTIONAL):
                raise
        names.append(info.name)
    return names


def test_no_package_or_module_is_named_like_a_public_name():
    # importing keras_nbguard.X sets the attribute X on the package: only its own children count
    children = {m.name for m in pkgutil.iter_modules(keras_nbguard.__path__)}
    assert "board" in children and "dashboard" not in children
    assert children & set(keras_nbguard.__all__) == set()


def test_every_public_name_survives_importing_every_submodule(shell, tmp_path):
    assert len(import_every_submodule()) > 40
    for name in keras_nbguard.__all__:
        value = getattr(keras_nbguard, name)
        assert not isinstance(value, types.ModuleType), f"keras_nbguard.{name} is a module"
        if name != "__version__":
            assert callable(value), name
    assert inspect.isfunction(keras_nbguard.export)
    assert shell.run_cell("%%kerasrun --label api --quiet\nz = 1").success
    # what failed before: export a second time, or after runs_frame()
    assert keras_nbguard.export(str(tmp_path / "one.csv")) == 1
    keras_nbguard.runs_frame()
    assert keras_nbguard.export(str(tmp_path / "two.csv")) == 1
    assert keras_nbguard.export(str(tmp_path / "one.csv"), force=True) == 1
    # and the rest of the API, called
    assert isinstance(keras_nbguard.configure(), RunOptions)
    assert [r.label for r in keras_nbguard.runs("api")] == ["api"]
    assert keras_nbguard.get_session() is keras_nbguard.get_session()
    assert keras_nbguard.leaks().collected  # garbage collected first, as %nbguard leaks
    assert shell.run_line_magic("nbguard", "leaks").collected
    assert not keras_nbguard.get_session().leaks().collected  # the dashboard's, after a cell
    assert keras_nbguard.diagnose("api") is not None
    with keras_nbguard.track("api2"):
        pass
    assert keras_nbguard.free() is not None
