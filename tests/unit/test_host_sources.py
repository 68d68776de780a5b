"""Where mxkv-launch's hosts come from without -H/--hostfile (launch/host_sources.py), in
one process: Slurm's hostlists expanded as Slurm does, PBS node files, MPI host files, values
it cannot read refused naming the variable, and Slurm's variables read before PBS's."""

import re

import pytest

from mxkv_hybrid.launch.host_sources import (
    HostList,
    MalformedHosts,
    expand_nodelist,
    expand_tasks_per_node,
    hosts_from_environment,
    read_mpi_hostfile,
    read_pbs_nodefile,
    slurm_hosts,
)

SLURM_2X2 = {"SLURM_JOB_NODELIST": "node[01-02]", "SLURM_TASKS_PER_NODE": "2(x2)"}


@pytest.mark.parametrize(
    "nodelist, hosts",
    [
        # Slurm's documentation: slurm_hostlist_create(3), Slurm::Hostlist(3pm),
        # scontrol(1) `hostnames`, slurm.conf's node ranges (quickstart_admin)
        ("linux[1-3,6]", ["linux1", "linux2", "linux3", "linux6"]),
        ("node1,node[2-5,12]", ["node1", "node2", "node3", "node4", "node5", "node12"]),
        ("tux[1-3]", ["tux1", "tux2", "tux3"]),
        ("lx[15,18,32-33]", ["lx15", "lx18", "lx32", "lx33"]),
        (
            "rack[0-1]_blade[0-2]",
            [
                "rack0_blade0",
                "rack0_blade1",
                "rack0_blade2",
                "rack1_blade0",
                "rack1_blade1",
                "rack1_blade2",
            ],
        ),
        # zero padding: the width of a range's first number
        ("node[08-10]", ["node08", "node09", "node10"]),
        ("node[8-10]", ["node8", "node9", "node10"]),
        ("rack[01-3]", ["rack01", "rack02", "rack03"]),
        (
            "node[01-03,07],gpu-a1,rack[1-2]-n[3-4]",
            [
                "node01",
                "node02",
                "node03",
                "node07",
                "gpu-a1",
                "rack1-n3",
                "rack1-n4",
                "rack2-n3",
                "rack2-n4",
            ],
        ),
        ("gpu-a[01-02]-ib", ["gpu-a01-ib", "gpu-a02-ib"]),  # text after the bracket (dims 1)
        ("tux1 tux2\ttux3,,tux4", ["tux1", "tux2", "tux3", "tux4"]),  # Slurm's separators
        # three brackets: Slurm's _push_range_list loops over the second, then the first,
        # then the last
        (
            "a[1-2]b[3-4]c[5-6]",
            ["a1b3c5", "a1b3c6", "a2b3c5", "a2b3c6", "a1b4c5", "a1b4c6", "a2b4c5", "a2b4c6"],
        ),
    ],
)
def test_nodelists_expand_as_slurm_expands_them(nodelist, hosts):
    assert expand_nodelist(nodelist) == hosts


@pytest.mark.parametrize(
    "tasks, counts",
    [
        ("2(x3),1", [2, 2, 2, 1]),  # sbatch(1), SLURM_TASKS_PER_NODE
        ("1,2,1(x3),3,2", [1, 2, 1, 1, 1, 3, 2]),  # Slurm's env.c, uint16_array_to_str
        ("4", [4]),
    ],
)
def test_tasks_per_node_expand_their_repeats(tasks, counts):
    assert expand_tasks_per_node(tasks) == counts


def test_each_node_gets_its_task_count():
    assert slurm_hosts("node[01-03,07]", "2(x3),1") == [
        ("node01", 2),
        ("node02", 2),
        ("node03", 2),
        ("node07", 1),
    ]


@pytest.mark.parametrize(
    "nodelist, problem",
    [
        ("node[01-03", "unmatched or nested brackets"),
        ("node01]", "unmatched or nested brackets"),
        ("node[1-[2]]", "unmatched or nested brackets"),
        ("node[3-1]", "the range 3-1 in [3-1] goes down"),
        ("node[a-c]", "[a-c] holds 'a-c', not a number or a range lo-hi"),
        ("node[]", "[] holds '', not a number"),
        ("node[0-65536]", "holds more than 65536 hosts"),  # Slurm's MAX_RANGE
        (" , ", "no host names"),
    ],
)
def test_a_malformed_nodelist_is_named_with_its_value(nodelist, problem):
    with pytest.raises(MalformedHosts) as refused:
        expand_nodelist(nodelist)
    message = str(refused.value)
    assert message.startswith(f"SLURM_JOB_NODELIST={nodelist!r}: "), message
    assert problem in message and "expected a Slurm hostlist" in message, message


@pytest.mark.parametrize("tasks", ["2(x3", "0", "2(x0)", "2,,1", "two", ""])
def test_a_malformed_task_count_is_named_with_its_value(tasks):
    with pytest.raises(MalformedHosts, match=re.escape(f"SLURM_TASKS_PER_NODE={tasks!r}: ")):
        expand_tasks_per_node(tasks)


def test_task_counts_for_another_number_of_nodes_are_refused():
    with pytest.raises(MalformedHosts) as refused:
        slurm_hosts("node[01-03]", "2(x2)")
    assert str(refused.value).startswith(
        "SLURM_TASKS_PER_NODE='2(x2)': 2 task count(s) for the 3 node(s) of "
        "SLURM_JOB_NODELIST='node[01-03]'; expected one task count per node"
    )


def test_a_pbs_node_file_counts_each_hosts_lines_in_first_seen_order(tmp_path):
    nodefile = tmp_path / "nodes"
    nodefile.write_text("n2\nn1\nn2\n\nn1\nn3\nn2\n")
    assert read_pbs_nodefile(str(nodefile)) == [("n2", 3), ("n1", 2), ("n3", 1)]


@pytest.mark.parametrize(
    "text, problem",
    [
        (None, "cannot be read (No such file or directory)"),
        ("\n\n", "the file names no host"),
        ("n1\nn1 n2\n", "line 2 'n1 n2' holds more than one name"),
    ],
)
def test_a_pbs_node_file_it_cannot_read_is_named(tmp_path, text, problem):
    nodefile = tmp_path / "nodes"
    if text is not None:
        nodefile.write_text(text)
    with pytest.raises(MalformedHosts) as refused:
        read_pbs_nodefile(str(nodefile))
    assert str(refused.value).startswith(
        f"PBS_NODEFILE={str(nodefile)!r}: {problem}; expected a readable file with one host name"
    )


def test_mpi_host_files_of_mpich_and_open_mpi(tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text(
        "# mpich\nnodea:2\nnodeb  # one slot\n  # open mpi\nnodec slots=4 max_slots=8\n"
    )
    assert read_mpi_hostfile(str(hostfile)) == [("nodea", 2), ("nodeb", 1), ("nodec", 4)]


@pytest.mark.parametrize(
    "line", ["nodea:0", "nodea:x", "nodea:2 slots=3", "nodea 4", "nodea slots=", ":2"]
)
def test_a_host_file_line_it_cannot_read_is_named(tmp_path, line):
    hostfile = tmp_path / "hosts"
    hostfile.write_text(f"nodez:1\n{line}\n")
    with pytest.raises(
        MalformedHosts,
        match=re.escape(f"--hostfile={str(hostfile)!r}: line 2 {line!r} is not a host"),
    ):
        read_mpi_hostfile(str(hostfile))


def test_the_environment_names_its_source_and_slurm_comes_before_pbs(tmp_path):
    nodefile = tmp_path / "nodes"
    nodefile.write_text("pbs1\npbs1\n")
    assert hosts_from_environment({"HOME": "/root"}) is None
    assert hosts_from_environment({"PBS_NODEFILE": str(nodefile)}) == HostList(
        [("pbs1", 2)], "PBS_NODEFILE"
    )
    both = hosts_from_environment({**SLURM_2X2, "PBS_NODEFILE": str(nodefile)})
    assert both.hosts == [("node01", 2), ("node02", 2)] and both.total_slots == 4
    assert both.describe() == (
        "hosts from SLURM_JOB_NODELIST/SLURM_TASKS_PER_NODE: "
        "node01:2,node02:2 (PBS_NODEFILE is set too, not used: "
        "Slurm's list comes first)"
    )
    with pytest.raises(
        MalformedHosts,
        match=re.escape("SLURM_TASKS_PER_NODE (unset): SLURM_JOB_NODELIST='node[01-02]' is set"),
    ):
        hosts_from_environment({"SLURM_JOB_NODELIST": "node[01-02]"})
