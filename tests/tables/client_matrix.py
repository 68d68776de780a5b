"""The client matrix: scripts made of what real MXNet clients use (tests/workers/
gluoncv_client.py, image_classification_module.py), each run in every mode where it
applies on one host, and one row per mode across 2 emulated hosts with the relays on.
tests/jobs/test_client_matrix.py runs every cell; the drop-in guide renders this table, with the
reason where a client does not apply."""

from typing import Dict, List, NamedTuple, Tuple

MODES = ("allreduce", "sync", "async", "easgd", "lasgd")

# How each mode's 2 ranks are laid out: the modes with servers in 2 groups of 1 rank, so
# that the groups meet only on the servers.
LAYOUT: Dict[str, Tuple[str, ...]] = {
    "allreduce": (),
    "sync": ("--group-size", "1", "--servers", "1"),
    "async": ("--group-size", "1", "--servers", "1"),
    "easgd": ("--group-size", "1", "--servers", "1"),
    "lasgd": (),
}
# The modes whose ranks hold one model at every step (checked: identical weights); in the
# others each rank's (group's) model is its own, and the exchange shows in the bytes the
# store sends across groups.
ONE_MODEL = ("allreduce", "sync")


class Client(NamedTuple):
    name: str
    kind: str  # "gluon" (gluoncv_client.py's lines) or "module" (MXNet's Module.fit logs)
    epochs: int
    arguments: Tuple[str, ...]  # {data}: the tiny ImageNet; {out}: the cell's directory
    uses: str
    not_in: Dict[str, str]  # mode: why the client does not apply there

    def script(self) -> str:
        return "gluoncv_client.py" if self.kind == "gluon" else "image_classification_module.py"

    def command(self, data: str, out: str) -> List[str]:
        """The client's arguments for one cell."""
        given = [a.format(data=data, out=out) for a in self.arguments]
        return [self.script(), *given, "--num-epochs", str(self.epochs)]


_WORKERS_UPDATE = "the default there (each rank updates its own weights): the row above"
CLIENTS: List[Client] = [
    Client(
        "gluoncv",
        "gluon",
        5,
        ("--data-dir", "{data}", "--kv-store", "hybrid"),
        "a gluoncv model-zoo network (`cifar_resnet20_v1`), gluoncv's `LRSequential` "
        "(warm-up, then cosine) with no `learning_rate`, `mx.kv.create(args.kv_store)` "
        "handed to `gluon.Trainer`, 2 contexts per rank (`split_and_load`), "
        "`update_on_kvstore` left to the Trainer",
        {},
    ),
    Client(
        "gluoncv, update_on_kvstore=False",
        "gluon",
        5,
        ("--data-dir", "{data}", "--kv-store", "hybrid", "--update-on-kvstore", "0"),
        "the same with `update_on_kvstore=False`: every rank updates its weights",
        {
            "async": "refused with `ValueError`, as under `dist_async` (the servers apply "
            "every update; [the Trainer's rules](../reference/trainer-rules.md))",
            "easgd": _WORKERS_UPDATE,
            "lasgd": _WORKERS_UPDATE,
        },
    ),
    Client(
        "Module, --gc-type 2bit",
        "module",
        3,
        (
            "--kv-store",
            "hybrid",
            "--gc-type",
            "2bit",
            "--data-train",
            "{data}/train.rec",
            "--data-val",
            "{data}/val.rec",
            "--model-prefix",
            "{out}/model",
        ),
        "MXNet's `example/image-classification` shape: `Module.fit` with `--kv-store "
        "hybrid` (`mx.kv.create(args.kv_store)`), `--gc-type 2bit` "
        "(`kv.set_gradient_compression`), RecordIO shards by `kv.rank`, `Speedometer`, "
        "`do_checkpoint` on every rank",
        {},
    ),
]

# One row per mode across 2 emulated hosts (1 rank each; the servers on h1), relays on.
ACROSS_HOSTS: Dict[str, str] = {
    "allreduce": "Module, --gc-type 2bit",
    "sync": "gluoncv",
    "async": "gluoncv",
    "easgd": "gluoncv",
    "lasgd": "Module, --gc-type 2bit",
}


def client(name: str) -> Client:
    return next(c for c in CLIENTS if c.name == name)


def cells() -> List[Tuple[Client, str]]:
    """(client, mode) of every one-host cell that applies."""
    return [(c, m) for c in CLIENTS for m in MODES if m not in c.not_in]
