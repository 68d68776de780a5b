"""Where mxkv-launch's host list comes from: -H, an MPI host file (--hostfile), or, with
neither, the batch scheduler the job runs under: Slurm's SLURM_JOB_NODELIST (a hostlist
such as node[01-03,07]) with SLURM_TASKS_PER_NODE (2(x3),1), or PBS/Torque's PBS_NODEFILE
(one host name per line, once per slot). Every reader returns (host, slots) in the order
its source gives; a value it cannot read raises MalformedHosts, which names the variable
(or file), the value and the format expected. Standard library only."""

import itertools
import re
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Tuple

HostSlots = List[Tuple[str, int]]

NODELIST = "SLURM_JOB_NODELIST"
TASKS_PER_NODE = "SLURM_TASKS_PER_NODE"
PBS_NODEFILE = "PBS_NODEFILE"

NODELIST_FORMAT = (
    "a Slurm hostlist: names separated by commas, a bracket holding numbers "
    "and ranges, e.g. node[01-03,07],gpu-a1,rack[1-2]-n[3-4]"
)
TASKS_FORMAT = (
    "one task count per node of SLURM_JOB_NODELIST, comma-separated, N(xR) for "
    "R nodes of N tasks, e.g. 2(x3),1"
)
PBS_FORMAT = "a readable file with one host name per line, repeated once per slot"
HOSTFILE_FORMAT = (
    "one host per line: host, host:slots (MPICH) or host slots=N (Open MPI), '#' starting a comment"
)
MOST_HOSTS_IN_A_RANGE = 65536  # Slurm's MAX_RANGE: it refuses a longer range too

_SEPARATOR_OUTSIDE_BRACKETS = re.compile(r"[,\s]+(?![^\[]*\])")
_NAME_WITH_BRACKETS = re.compile(r"(?:[^\[\]]|\[[^\[\]]*\])+")
_RANGE = re.compile(r"(\d+)(?:-(\d+))?")
_TASK_COUNT = re.compile(r"(\d+)(?:\(x(\d+)\))?")


class MalformedHosts(ValueError):
    """A host source whose value (None: unset) is not in its format."""

    def __init__(self, source: str, value: Optional[str], problem: str, expected: str):
        given = f"{source} (unset)" if value is None else f"{source}={value!r}"
        super().__init__(f"{given}: {problem}; expected {expected}")


@dataclass(frozen=True)
class HostList:
    """The (host, slots) a scheduler gave the job, the variables they came from, and
    another scheduler's variable that was set too and not used (empty if none)."""

    hosts: HostSlots
    source: str
    not_used: str = ""

    @property
    def total_slots(self) -> int:
        return sum(slots for _, slots in self.hosts)

    def as_hosts_option(self) -> str:
        """The form of -H: host:slots,host:slots."""
        return ",".join(f"{host}:{slots}" for host, slots in self.hosts)

    def describe(self) -> str:
        said = f"hosts from {self.source}: {self.as_hosts_option()}"
        return said + (
            f" ({self.not_used} is set too, not used: Slurm's list comes first)"
            if self.not_used
            else ""
        )


def expand_nodelist(value: str, source: str = NODELIST) -> List[str]:
    """Every host of a Slurm hostlist, as Slurm expands it: names are separated by commas
    or white space outside brackets; a bracket's numbers keep the width of the first number
    of their range (node[08-10]: node08, node09, node10); of several brackets in one name
    the last varies fastest and the others, from the one before it back to the first, ever
    slower (rack[1-2]-n[3-4]: rack1-n3, rack1-n4, rack2-n3, rack2-n4)."""
    names = [name for name in _SEPARATOR_OUTSIDE_BRACKETS.split(value.strip()) if name]
    if not names:
        raise MalformedHosts(source, value, "no host names", NODELIST_FORMAT)
    return [host for name in names for host in _expand_name(name, source, value)]


def _expand_name(name: str, source: str, value: str) -> List[str]:
    if not _NAME_WITH_BRACKETS.fullmatch(name):
        raise MalformedHosts(
            source, value, f"{name!r} has unmatched or nested brackets", NODELIST_FORMAT
        )
    pieces = re.split(r"\[([^\]]*)\]", name)  # text, numbers, text, numbers, ..., text
    texts, brackets = pieces[0::2], pieces[1::2]
    numbers = [_bracket_numbers(bracket, source, value) for bracket in brackets]
    # Slurm's order (hostlist.c, _push_range_list): the last bracket innermost, the
    # others outside it from the one before the last (outermost) back to the first
    loops = [*range(len(brackets) - 2, -1, -1), *([len(brackets) - 1] if brackets else [])]
    hosts = []
    for chosen in itertools.product(*(numbers[bracket] for bracket in loops)):
        number_of = dict(zip(loops, chosen))
        hosts.append(
            texts[0]
            + "".join(number_of[bracket] + texts[bracket + 1] for bracket in range(len(brackets)))
        )
    return hosts


def _bracket_numbers(bracket: str, source: str, value: str) -> List[str]:
    numbers = []
    for part in bracket.split(","):
        match = _RANGE.fullmatch(part)
        if not match:
            raise MalformedHosts(
                source,
                value,
                f"[{bracket}] holds {part!r}, not a number or a range lo-hi",
                NODELIST_FORMAT,
            )
        low, high = int(match[1]), int(match[2] or match[1])
        if low > high or high - low >= MOST_HOSTS_IN_A_RANGE:
            raise MalformedHosts(
                source,
                value,
                f"the range {part} in [{bracket}] "
                + ("goes down" if low > high else f"holds more than {MOST_HOSTS_IN_A_RANGE} hosts"),
                NODELIST_FORMAT,
            )
        width = len(match[1])
        numbers += [f"{number:0{width}d}" for number in range(low, high + 1)]
    return numbers


def expand_tasks_per_node(value: str, source: str = TASKS_PER_NODE) -> List[int]:
    """The task count of each node: "2(x3),1" -> [2, 2, 2, 1]."""
    counts = []
    for part in value.strip().split(","):
        match = _TASK_COUNT.fullmatch(part)
        if not match or int(match[1]) < 1 or int(match[2] or 1) < 1:
            raise MalformedHosts(
                source,
                value,
                f"{part!r} is not a count of at least 1, alone or as N(xR) with R at least 1",
                TASKS_FORMAT,
            )
        counts += [int(match[1])] * int(match[2] or 1)
    return counts


def slurm_hosts(nodelist: str, tasks_per_node: str) -> HostSlots:
    """(node, its tasks) from SLURM_JOB_NODELIST and SLURM_TASKS_PER_NODE's values."""
    nodes = expand_nodelist(nodelist)
    counts = expand_tasks_per_node(tasks_per_node)
    if len(counts) != len(nodes):
        raise MalformedHosts(
            TASKS_PER_NODE,
            tasks_per_node,
            f"{len(counts)} task count(s) for the {len(nodes)} node(s) of {NODELIST}={nodelist!r}",
            TASKS_FORMAT,
        )
    return list(zip(nodes, counts))


def read_pbs_nodefile(path: str, source: str = PBS_NODEFILE) -> HostSlots:
    """(host, slots) of a PBS/Torque node file: a host's slots are its lines, the hosts
    in the order they first appear."""
    slots: Dict[str, int] = {}
    for number, line in enumerate(_read(path, source, PBS_FORMAT).splitlines(), 1):
        names = line.split()
        if len(names) > 1:
            raise MalformedHosts(
                source, path, f"line {number} {line.strip()!r} holds more than one name", PBS_FORMAT
            )
        for name in names:
            slots[name] = slots.get(name, 0) + 1
    if not slots:
        raise MalformedHosts(source, path, "the file names no host", PBS_FORMAT)
    return list(slots.items())


def read_mpi_hostfile(path: str, source: str = "--hostfile") -> HostSlots:
    """(host, slots) of each line of an MPI host file: `host` (1 slot), `host:slots` or
    `host slots=N`; other key=value options of Open MPI or Hydra (max_slots=, ifhn=) are
    mpiexec's and left to it."""
    hosts = []
    for number, line in enumerate(_read(path, source, HOSTFILE_FORMAT).splitlines(), 1):
        fields = line.split("#", 1)[0].split()
        if not fields:
            continue
        host, colon, count = fields[0].partition(":")
        options = [field.partition("=") for field in fields[1:]]
        counts = [count] if colon else []
        counts += [option_value for key, _, option_value in options if key == "slots"]
        if (
            not host
            or len(counts) > 1
            or not all(equals for _, equals, _ in options)
            or not all(given.isdigit() and int(given) >= 1 for given in counts)
        ):
            raise MalformedHosts(
                source,
                path,
                f"line {number} {line.strip()!r} is not a host "
                "with at most one slot count, of at least 1",
                HOSTFILE_FORMAT,
            )
        hosts.append((host, int(counts[0]) if counts else 1))
    if not hosts:
        raise MalformedHosts(source, path, "the file names no host", HOSTFILE_FORMAT)
    return hosts


def _read(path: str, source: str, expected: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError as err:
        raise MalformedHosts(source, path, f"cannot be read ({err.strerror})", expected) from None


def hosts_from_environment(environ: Mapping[str, str]) -> Optional[HostList]:
    """The host list of the scheduler the job runs under: Slurm's when SLURM_JOB_NODELIST
    is set (also when PBS_NODEFILE is: the HostList says so), else PBS/Torque's when
    PBS_NODEFILE is set, else None."""
    nodelist, nodefile = environ.get(NODELIST), environ.get(PBS_NODEFILE)
    if nodelist:
        tasks_per_node = environ.get(TASKS_PER_NODE)
        if not tasks_per_node:
            raise MalformedHosts(
                TASKS_PER_NODE, None, f"{NODELIST}={nodelist!r} is set", TASKS_FORMAT
            )
        return HostList(
            slurm_hosts(nodelist, tasks_per_node),
            f"{NODELIST}/{TASKS_PER_NODE}",
            PBS_NODEFILE if nodefile else "",
        )
    if nodefile:
        return HostList(read_pbs_nodefile(nodefile), PBS_NODEFILE)
    return None
