"""The environment the launcher hands its ranks, servers and relays (launch/job_environment.py):
what the plan sets, what the user's own values win over, and that nothing else in launch/
writes os.environ."""

import ast

from mxkv_hybrid.launch.job_environment import LINK, JobEnvironment
from mxkv_hybrid.launch.launcher import parse_arguments

from support.paths import LAUNCH

WRITES = {"update", "setdefault", "pop", "popitem", "clear", "__setitem__", "__delitem__"}


def _environment(monkeypatch, launchers, *options):
    monkeypatch.setenv("MXKV_MODE", "easgd")
    plan = parse_arguments(["-n", "4", *options, "--", "python", "t.py"])
    return JobEnvironment.of_plan(plan, launchers)


def test_the_plan_sets_and_the_user_keeps(monkeypatch):
    launchers = {"PATH": "/bin", "PS_HEARTBEAT_TIMEOUT": "9", "MXKV_LOG_LEVEL": "warning"}
    environment = _environment(
        monkeypatch,
        launchers,
        *("--group-size", "2", "--servers", "1", "--restarts", "1", "--auto"),
        *("--log-level", "debug"),
    )
    ranks = environment.for_ranks()
    assert ranks["PATH"] == "/bin"
    assert ranks["MXKV_LOG_LEVEL"] == "debug"  # the command line wins
    assert (ranks["MXKV_GROUP_SIZE"], ranks["MXKV_AUTO"]) == ("2", "1")
    assert ranks["PS_HEARTBEAT_TIMEOUT"] == "9"  # the user's own heartbeat wins
    assert ranks["PS_HEARTBEAT_INTERVAL"] == "1"  # the default fills the rest
    assert LINK not in ranks and "DMLC_ROLE" not in ranks


def test_the_link_and_the_servers_reach_ranks_but_not_helpers(monkeypatch):
    environment = _environment(monkeypatch, {"PATH": "/bin"}, "--servers", "1")
    environment.listen_at("token@127.0.0.1:5000")
    environment.serve_with(
        {"DMLC_PS_ROOT_URI": "127.0.0.1", "DMLC_PS_ROOT_PORT": "9000", "DMLC_ROLE": "worker"}
    )
    assert environment.for_ranks(MXKV_ATTEMPT="1")[LINK] == "token@127.0.0.1:5000"
    assert environment.for_ranks(MXKV_ATTEMPT="1")["MXKV_ATTEMPT"] == "1"
    assert environment.scheduler_address() == ("127.0.0.1", 9000)
    assert environment.serving_settings() == {
        "DMLC_PS_ROOT_URI": "127.0.0.1",
        "DMLC_PS_ROOT_PORT": "9000",
        "DMLC_ROLE": "worker",
    }
    helpers = environment.for_helpers()
    assert LINK not in helpers and "DMLC_PS_ROOT_URI" not in helpers
    environment.serve_with({"DMLC_PS_ROOT_URI": "127.0.0.1", "DMLC_PS_ROOT_PORT": "9001"})
    assert environment.scheduler_address() == ("127.0.0.1", 9001)  # the servers of now


def test_without_restarts_no_heartbeat_is_set(monkeypatch):
    ranks = _environment(monkeypatch, {}, "--servers", "1").for_ranks()
    assert "PS_HEARTBEAT_TIMEOUT" not in ranks


def test_rma_gets_the_eager_limit_unless_the_user_chose_one(monkeypatch):
    monkeypatch.setenv("MXKV_TRANSPORT", "rma")
    chosen = _environment(monkeypatch, {"MXKV_TRANSPORT": "rma"}).for_ranks()
    assert chosen["UCX_RNDV_THRESH"] == "16m"
    kept = _environment(monkeypatch, {"MXKV_TRANSPORT": "rma", "UCX_RNDV_THRESH": "1k"})
    assert kept.for_ranks()["UCX_RNDV_THRESH"] == "1k"


def test_nothing_else_in_launch_writes_os_environ():
    """os.environ[...] = ..., os.environ.update(...), os.putenv(...) and the like."""
    found = []
    for path in sorted(LAUNCH.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            targets = node.targets if isinstance(node, ast.Assign) else []
            written = [ast.unparse(t.value) for t in targets if isinstance(t, ast.Subscript)]
            called = ast.unparse(node.func) if isinstance(node, ast.Call) else ""
            if called.rpartition(".")[2] in WRITES:
                written.append(called.rpartition(".")[0])
            if "os.environ" in written or called in ("os.putenv", "os.unsetenv"):
                found.append(f"{path.name}:{node.lineno}")
    assert found == []


def test_openmp_threads_share_the_cores_among_the_busiest_hosts_ranks(monkeypatch):
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(16)))
    alone = _environment(monkeypatch, {}).for_ranks()  # -n 4, all on this host
    assert alone["OMP_NUM_THREADS"] == "4"
    hosts = _environment(monkeypatch, {}, "-H", "a:1,b:3").for_ranks()
    assert hosts["OMP_NUM_THREADS"] == "5"  # 16 cores / the 3 ranks on b
    one = _environment(monkeypatch, {}, "-H", "a:1").for_ranks()
    assert one["OMP_NUM_THREADS"] == "8"  # never more than MXNet's own default, cores / 2
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0})
    assert _environment(monkeypatch, {}).for_ranks()["OMP_NUM_THREADS"] == "1"  # at least 1
    assert _environment(monkeypatch, {"OMP_NUM_THREADS": "3"}).for_ranks()["OMP_NUM_THREADS"] == "3"
