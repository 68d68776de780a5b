"""The package's messages go through `logging` (mxkv_hybrid/logs.py): one logger per module
under `mxkv_hybrid`, a level from MXKV_LOG_LEVEL or `mxkv-launch --log-level`, each message
on the stream its print wrote to, a rank's lines named by rank, and a user's handler on the
`mxkv_hybrid` logger gets them too."""

import ast
import logging
import pathlib

import pytest

import mxkv_hybrid
from mxkv_hybrid import logs
from mxkv_hybrid.config import Config, read_knob
from mxkv_hybrid.errors import ConfigError
from mxkv_hybrid.integration import auto
from mxkv_hybrid.launch import launcher, relay, supervisor
from mxkv_hybrid.launch.control import link
from mxkv_hybrid.launch.job_environment import JobEnvironment
from mxkv_hybrid.modes import server_weights
from mxkv_hybrid.plan import __main__ as plan_main
from mxkv_hybrid.ps import finish_line

PACKAGE = pathlib.Path(mxkv_hybrid.__file__).parent


# modules whose prints are a program's output, not messages: reports, tables, a dry run's
# commands, --serve's join address, usage, the test cluster's command-line answers, and the
# relay's 'ready', the line its starter waits for
PRINTS_KEPT = {
    "launch/relay.py",
    "tune.py",
    "run.py",
    "plan/__main__.py",
    "observe/step_summary.py",
    "shard/orchestrator.py",
    "self_check.py",
    "launch/launcher.py",
    "launch/serve_join.py",
    "testing/cluster.py",
}


@pytest.fixture
def package_logger(monkeypatch):
    """The `mxkv_hybrid` logger, its level and console formatter restored afterwards."""
    monkeypatch.delenv("MXKV_LOG_LEVEL", raising=False)
    logger = logging.getLogger(logs.LOGGER)
    console = next(h for h in logger.handlers if h.name == logs.HANDLER)
    level, formatter = logger.level, console.formatter
    yield logger
    logger.setLevel(level)
    console.setFormatter(formatter)


def test_only_the_package_logger_gets_a_handler():
    package = logging.getLogger("mxkv_hybrid")
    assert [h.name for h in package.handlers].count(logs.HANDLER) == 1
    assert not package.propagate  # the root's handlers would write every line twice
    assert all(h.name != logs.HANDLER for h in logging.getLogger().handlers)
    mxkv_hybrid.logs.configure()  # again: still one handler
    assert [h.name for h in package.handlers].count(logs.HANDLER) == 1


def printing_modules():
    """The package's modules that call print(), as paths inside the package."""
    for path in sorted(PACKAGE.rglob("*.py")):
        calls = [
            node
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "print"
        ]
        if calls:
            yield path.relative_to(PACKAGE).as_posix()


def test_messages_are_logged_and_only_program_output_is_printed():
    assert set(printing_modules()) <= PRINTS_KEPT


@pytest.mark.parametrize(
    "text, level", [("debug", "debug"), (" Warning ", "warning"), ("ERROR", "error")]
)
def test_the_level_knob_parses(text, level):
    assert read_knob("MXKV_LOG_LEVEL", {"MXKV_LOG_LEVEL": text}) == level


def test_the_level_knob_defaults_to_info_and_refuses_other_words():
    assert read_knob("MXKV_LOG_LEVEL", {}) == "info"
    with pytest.raises(
        ConfigError,
        match=r"MXKV_LOG_LEVEL='loud' is invalid: expected one of: "
        r"debug, info, warning, error",
    ):
        read_knob("MXKV_LOG_LEVEL", {"MXKV_LOG_LEVEL": "loud"})
    with pytest.raises(ConfigError, match="MXKV_LOG_LEVEL"):
        Config.from_environment({"MXKV_LOG_LEVEL": "verbose"})


def test_each_message_keeps_its_stream(package_logger, capsys):
    """Info on stdout and warnings on stderr, unless the call names the other stream."""
    auto.log.info("info")
    finish_line.log.info("info on stderr", extra=logs.TO_STDERR)
    finish_line.log.warning("warning")
    auto.log.warning("warning on stdout", extra=logs.TO_STDOUT)
    out, err = capsys.readouterr()
    assert out.splitlines() == ["info", "warning on stdout"]
    assert err.splitlines() == ["info on stderr", "warning"]


def test_the_launchers_flag_sets_the_level_for_it_and_its_ranks(package_logger, monkeypatch):
    monkeypatch.setenv("MXKV_LOG_LEVEL", "info")  # restored after: later tests' children see it
    args = launcher.parse_arguments(
        ["-n", "2", "--log-level", "error", "--dry-run", "--", "python", "train.py"]
    )
    assert args.log_level == "error" and package_logger.level == logging.ERROR
    ranks = JobEnvironment.of_plan(args).for_ranks()  # what the ranks it starts are handed
    assert read_knob("MXKV_LOG_LEVEL", ranks) == "error"


def test_every_module_logs_below_the_package_logger():
    for module in (launcher, supervisor, link, finish_line, server_weights, auto):
        assert module.log.name == module.__name__, module
    # run as __main__ by `python -m`: named for where they are
    assert relay.log.name == "mxkv_hybrid.launch.relay"
    assert plan_main.log.name == "mxkv_hybrid.plan"
    for module in (launcher, link, finish_line, server_weights, auto, relay, plan_main):
        parents = [module.log]
        while parents[-1].parent is not None:
            parents.append(parents[-1].parent)
        assert logging.getLogger("mxkv_hybrid") in parents, module.log.name


def test_warning_level_silences_info_and_keeps_warnings(package_logger, capsys):
    logs.configure({"MXKV_LOG_LEVEL": "warning"})
    launcher.log.info("mxkv-launch: an info line")
    supervisor.say("a warning line")
    out, err = capsys.readouterr()
    assert "an info line" not in out + err
    assert err == "mxkv-launch: a warning line\n"
    logs.configure({"MXKV_LOG_LEVEL": "info"})
    launcher.log.info("mxkv-launch: an info line")
    launcher.log.debug("mxkv-launch: a debug line")
    assert capsys.readouterr().out == "mxkv-launch: an info line\n"


def test_a_ranks_lines_are_named_by_rank_unless_mxkv_launch_tags_them(package_logger, capsys):
    console = next(h for h in package_logger.handlers if h.name == logs.HANDLER)
    console.setFormatter(logs.console_formatter({"PMI_RANK": "3"}))
    finish_line.log.warning("mxkv_hybrid: group 1: going on")
    assert capsys.readouterr().err == "[rank 3] mxkv_hybrid: group 1: going on\n"
    # mxkv-launch's mpiexec starts each line with "[3] " already
    tagged = {"OMPI_COMM_WORLD_RANK": "3", "MXKV_LAUNCHER_LINK": "token@127.0.0.1:1"}
    assert logs.console_formatter(tagged).prefix == ""
    assert logs.console_formatter({}).prefix == ""  # not a rank: the launcher, a tool
    assert logs.console_formatter({"PMI_RANK": "0"}, is_rank=False).prefix == ""  # a relay
    assert logs.console_formatter({"PMI_RANK": "0", "DMLC_ROLE": "server"}).prefix == ""
    group_job = {"PMI_RANK": "1", "MXKV_GROUP_JOB": "group=1:groups=2:first_rank=2:ranks=4"}
    assert logs.rank_of_process(group_job) == 3  # numbered as in the whole job


def test_a_users_file_handler_gets_the_messages(package_logger, tmp_path, capsys):
    handler = logging.FileHandler(tmp_path / "job.log")
    handler.setFormatter(logs.RankFormatter(rank=2))
    package_logger.addHandler(handler)
    try:
        logs.configure({"MXKV_LOG_LEVEL": "warning"})
        auto.log.info("mxkv_hybrid --auto: not shown")
        supervisor.say("the job failed")
        logs.set_level("info")
        server_weights.log.info("mxkv_hybrid: 10 asynchronous updates", extra=logs.TO_STDERR)
    finally:
        package_logger.removeHandler(handler)
        handler.close()
    assert (tmp_path / "job.log").read_text().splitlines() == [
        "[rank 2] mxkv-launch: the job failed",
        "[rank 2] mxkv_hybrid: 10 asynchronous updates",
    ]
    assert capsys.readouterr().err.count("the job failed") == 1  # the console's still
