"""Which registered formats run sharded: a format does when its `Format` record carries `ShardOps`
(``Format.shard``; see kernels/formats/shard.py for what they are). Plain NumPy; no Dask."""
from __future__ import annotations

from configs.errors import InputError
from kernels.formats.shard import ShardOps


def format_name(obj) -> str:
    """The registered name of a converted object (every format's container carries it)."""
    return obj.format_name


def sharded_formats() -> list[str]:
    from kernels.formats import REGISTRY

    return sorted(name for name, f in REGISTRY.items() if f.shard is not None)


def shard_ops(obj_or_name) -> ShardOps:
    """The sharding operations of a format (name or converted object); InputError in one line otherwise."""
    from kernels.formats import REGISTRY

    name = obj_or_name if isinstance(obj_or_name, str) else format_name(obj_or_name)
    fmt = REGISTRY.get(name)
    if fmt is None or fmt.shard is None:
        raise InputError(f"format {name!r} cannot run sharded: it provides no window-range shard and column remap "
                         f"(Format.shard; sharded formats: {', '.join(sharded_formats())}); run it on one device "
                         "(--devices auto or cpu)")
    return fmt.shard
