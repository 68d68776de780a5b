"""MXKV_MODE=easgd's settings, in one process: bad MXKV_TRANSPORT, MXKV_TAU and MXKV_EASGD_*
values are refused; with the centre in the leaders' MPI windows (MXKV_TRANSPORT=rma) the
launcher takes groups without servers and refuses --servers; the moving rate's rule and the
local steps' scale."""

import pytest

from mxkv_hybrid.config import Config
from mxkv_hybrid.errors import ConfigError
from mxkv_hybrid.launch.launcher import parse_arguments
from mxkv_hybrid.modes.elastic_rate import rule_alpha
from mxkv_hybrid.modes.local_lr_scale import ELASTIC_RULE_PERIOD, rule_scale

EASGD = {"MXKV_MODE": "easgd"}


@pytest.mark.parametrize(
    "setting, message",
    [
        ({"MXKV_TRANSPORT": "rdma"}, "MXKV_TRANSPORT='rdma' is invalid"),
        (
            {"MXKV_TRANSPORT": "rma", "MXKV_MODE": "sync"},
            "MXKV_TRANSPORT=rma is built for MXKV_MODE=easgd",
        ),
        (
            {"MXKV_TRANSPORT": "rma", "MXKV_GROUP_JOB": "group=0:groups=2:first_rank=0:ranks=2"},
            "which only ranks of one MPI job can reach",
        ),
        ({"MXKV_TAU": "0"}, "MXKV_TAU='0' is invalid"),
        ({"MXKV_EASGD_ALPHA": "1.5"}, "MXKV_EASGD_ALPHA='1.5' is invalid"),
        ({"MXKV_EASGD_BETA": "-1"}, "MXKV_EASGD_BETA='-1' is invalid"),
    ],
)
def test_bad_easgd_settings_are_refused(setting, message):
    with pytest.raises(ConfigError, match=message):
        Config.from_environment(dict(EASGD, **setting))


@pytest.mark.parametrize(
    "options, message",
    [
        (
            ["--group-size", "2", "--servers", "1"],
            "drop --servers, --server-hosts and --group-jobs",
        ),
        (["--group-size", "2", "--one-job", "--servers", "1"], "drop --servers"),
    ],
)
def test_the_launcher_refuses_servers_for_a_remote_centre(monkeypatch, capsys, options, message):
    monkeypatch.setenv("MXKV_MODE", "easgd")
    monkeypatch.setenv("MXKV_TRANSPORT", "rma")
    with pytest.raises(SystemExit):
        parse_arguments(["-n", "4", *options, "--", "python", "x.py"])
    assert message in capsys.readouterr().err


def test_a_remote_centre_takes_groups_without_servers(monkeypatch):
    monkeypatch.setenv("MXKV_MODE", "easgd")
    monkeypatch.setenv("MXKV_TRANSPORT", "rma")
    args = parse_arguments(["-n", "4", "--group-size", "2", "--", "python", "x.py"])
    assert args.group_size == 2 and not args.group_jobs and not args.servers


@pytest.mark.parametrize(
    "groups, tau, synchronous, alpha",
    [
        (2, 4, False, 0.1),  # the sweep's 0.1 up to RULE_PERIOD
        (4, 16, False, 0.1),
        (4, 32, False, 0.2),  # the same pull per step over a longer period
        (4, 128, False, 0.5),  # capped: 0.9 ran away
        (4, 128, True, 0.225),  # synchronous: the paper's beta / groups
        (20, 4, False, 0.045),  # beta / groups beyond 9 groups
        (20, 64, False, 0.18),
    ],
)
def test_the_moving_rate_s_rule_keeps_the_pull_per_step(groups, tau, synchronous, alpha):
    assert rule_alpha(0.9, groups, tau, synchronous) == pytest.approx(alpha)


@pytest.mark.parametrize(
    "groups, tau, scale",
    [
        (2, 32, 1.0),  # the script's rate held at tau 32 where x0.71 fell short
        (4, 64, 0.866),
        (2, 128, 0.707),
        (4, 128, 0.612),  # between MNIST-1D's x0.5 and digits' x0.71
        (4, 1024, 0.5),  # never less than one group's batch
    ],
)
def test_a_group_s_local_steps_take_the_rule_s_scale_over_easgd_s_period(groups, tau, scale):
    assert rule_scale(tau, groups, ELASTIC_RULE_PERIOD) == pytest.approx(scale, abs=1e-3)
