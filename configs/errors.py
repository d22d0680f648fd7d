"""Errors a user can act on. The message is one line naming the source and the problem.

The CLI (flows/spmm.py) prints ``str(err)`` and exits non-zero for these; anything else is a bug and keeps its
traceback.
"""


class InputError(ValueError):
    """Bad input: a malformed file, an unknown id, a shape that does not match, a bad parameter."""


class FetchError(InputError):
    """A download failed: HTTP error, timeout, stalled server, checksum mismatch, corrupt archive."""


class StorageError(InputError):
    """The block store cannot be read or written: incomplete, corrupt, disk full."""


class ServerError(InputError):
    """A service the run needs (its Prefect API, its Dask cluster) could not start; the message says what to do."""
