"""The table of a job's ps-lite nodes when relays carry ps-lite between hosts
(mxkv_hybrid/ps/node_addresses.py): addresses that ps-lite ranks in host order, each host's
relay plan (its own nodes reachable, a stand-in for every other host's, none for its own),
and the table's JSON round trip."""

import socket

import pytest

from mxkv_hybrid.ps.node_addresses import Endpoint, PsNodes, StandIn, check_free, loopback_address

TABLE = PsNodes(
    hosts=("198.18.5.11", "198.18.5.12", "198.18.5.13"),
    relay_port=9443,
    scheduler=(0, 9000),
    servers=((0, 9100), (2, 9100)),
    leaders=((0, 9101), (1, 9100), (2, 9101)),
)


def test_ps_lite_ranks_host_0_first_and_refuses_a_hundred_hosts():
    addresses = [loopback_address(h) for h in range(100)]
    assert addresses[0] == "127.77.1.200" and addresses[99] == "127.77.1.101"
    assert sorted(addresses, reverse=True) == addresses  # ps-lite's order: name descending
    with pytest.raises(ValueError, match="at most 100 hosts"):
        loopback_address(100)


def test_each_relay_reaches_its_own_nodes_and_stands_in_for_every_other():
    plan = TABLE.relay_plan(1)
    assert plan.tls == Endpoint("198.18.5.12", 9443)
    assert plan.local == {Endpoint("127.77.1.199", 9100)}
    assert plan.stand_ins == {
        Endpoint("127.77.1.200", 9000): StandIn(
            Endpoint("198.18.5.11", 9443), Endpoint("127.77.1.200", 9000)
        ),
        Endpoint("127.77.1.200", 9100): StandIn(
            Endpoint("198.18.5.11", 9443), Endpoint("127.77.1.200", 9100)
        ),
        Endpoint("127.77.1.200", 9101): StandIn(
            Endpoint("198.18.5.11", 9443), Endpoint("127.77.1.200", 9101)
        ),
        Endpoint("127.77.1.198", 9100): StandIn(
            Endpoint("198.18.5.13", 9443), Endpoint("127.77.1.198", 9100)
        ),
        Endpoint("127.77.1.198", 9101): StandIn(
            Endpoint("198.18.5.13", 9443), Endpoint("127.77.1.198", 9101)
        ),
    }
    every = {node for h in range(3) for node in TABLE.nodes_on(h)}
    for host in range(3):
        plan = TABLE.relay_plan(host)
        assert plan.local | set(plan.stand_ins) == every
        assert not plan.local & set(plan.stand_ins)


def test_the_table_and_a_plan_survive_json():
    assert PsNodes.from_json(TABLE.to_json()) == TABLE
    plan = TABLE.relay_plan(2)
    assert type(plan).from_json(plan.to_json()) == plan


def test_a_restarted_leader_gets_a_port_of_its_own_that_every_relay_knows():
    """A group job started again must not take its leader's old address (the other nodes'
    connections to it still hold messages for the dead one)."""
    table = PsNodes(
        hosts=TABLE.hosts,
        relay_port=9443,
        scheduler=(0, 9000),
        servers=((0, 9100),),
        leaders=((0, 9101), (2, 9101)),
        restart_ports=((9102, 9103), (9102, 9103)),
    )
    assert [table.leader(1, start) for start in range(3)] == [
        Endpoint("127.77.1.198", port) for port in (9101, 9102, 9103)
    ]
    assert table.relay_plan(2).local == {Endpoint("127.77.1.198", p) for p in (9101, 9102, 9103)}
    assert Endpoint("127.77.1.198", 9103) in table.relay_plan(0).stand_ins
    with pytest.raises(ValueError, match="ports for 2 restart"):
        table.leader(1, 3)
    assert PsNodes.from_json(table.to_json()) == table
    assert TABLE.leader(2) == Endpoint("127.77.1.198", 9101)  # no restarts: the first start's


def test_a_served_job_s_hosts_may_each_have_their_relay_port():
    """Two groups joined from one machine: two relays on one address."""
    table = PsNodes(
        hosts=("198.18.5.11", "198.18.5.12", "198.18.5.12"),
        relay_port=9443,
        scheduler=(0, 9000),
        servers=((0, 9100),),
        leaders=((1, 9101), (2, 9101)),
        relay_ports=(9443, 9444, 9445),
    )
    assert table.relay_plan(2).tls == Endpoint("198.18.5.12", 9445)
    # host 1's leader listens on this machine's loopback, and host 1's relay stands in for
    # the others' nodes there: host 2's would bind the same stand-ins
    assert set(table.relay_plan(1).stand_ins) == {Endpoint("127.77.1.200", p) for p in (9000, 9100)}
    assert table.relay_plan(2).stand_ins == {}
    assert table.relay_plan(2).local == {Endpoint("127.77.1.198", 9101)}
    assert table.relay_plan(0).stand_ins[Endpoint("127.77.1.199", 9101)].relay == Endpoint(
        "198.18.5.12", 9444
    )
    assert PsNodes.from_json(table.to_json()) == table


def test_a_planned_port_that_is_taken_is_named_before_ps_lite_would_take_another():
    with socket.socket() as taken:
        taken.bind(("127.77.1.200", 0))
        taken.listen()
        node = Endpoint("127.77.1.200", taken.getsockname()[1])
        with pytest.raises(
            OSError,
            match=rf"rank 3 must listen for ps-lite at {node}, as "
            r"mxkv-launch planned \(MXKV_PS_NODES\), and that "
            r"port is taken here",
        ):
            check_free(node, "rank 3")
    check_free(node, "rank 3")  # free again
