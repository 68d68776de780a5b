"""Exceptions raised by mxkv_hybrid."""


class MXKVError(RuntimeError):
    """Base class. `on_every_rank` errors are raised by all ranks at the same point
    (a collective found them), so the processes can exit cleanly without MPI_Abort."""

    on_every_rank = False


class RankLostError(MXKVError):
    """An MPI call failed at run time: a rank of this job ended, or the link to it broke.
    The launcher names that rank; this rank's traceback would add nothing, so the rank
    prints the message alone."""


class ConfigError(MXKVError, ValueError):
    """An MXKV_* environment variable is unknown or has an invalid value."""

    on_every_rank = True


class MismatchError(MXKVError):
    """Ranks called a collective with different keys, shapes or dtypes."""

    on_every_rank = True


class NonFiniteError(MXKVError):
    """A rank's values had NaN or Inf (MXKV_CHECK_FINITE=1); found by every rank together."""

    on_every_rank = True


class DivergenceError(MXKVError):
    """Rank 0's divergence guard found training running away, and
    MXKV_FAIL_ON_DIVERGENCE=1 asked to stop (the message says which knob to change)."""


class ServerKeyConflict(MXKVError):
    """A second store of one process would use a parameter-server key that another store
    of the process already holds (modes async and easgd keep one model per process)."""

    on_every_rank = True


class OptimizerNotSendable(MXKVError, TypeError):
    """The optimizer (or what it holds) cannot be pickled for the parameter servers, where
    it runs in modes sync and async."""
