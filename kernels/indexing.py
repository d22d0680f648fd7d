"""Index dtypes, decided in one place: int32 while every size fits, int64 once one passes int32."""
from __future__ import annotations

import numpy as np

INT32_MAX = np.iinfo(np.int32).max


def index_dtype(*sizes: int) -> type[np.integer]:
    """The narrowest of int32/int64 that holds every size (a dimension, nnz, rows x N, an offset)."""
    return np.int32 if max((int(s) for s in sizes), default=0) <= INT32_MAX else np.int64
