"""Row conversions that must not depend on the installed pgvector-python version."""

from __future__ import annotations

import numpy as np

from kb_retriever.store.rows import vector_array


class _Vector:
    """Stands in for pgvector-python's ``Vector`` (0.4 and later load ``vector`` columns as
    ``Vector`` objects, which numpy cannot convert by itself)."""

    def __init__(self, values: list[float]) -> None:
        self._values = values

    def to_numpy(self) -> np.ndarray:
        return np.asarray(self._values, dtype=np.float32)


def test_vector_array_accepts_vector_objects_arrays_and_lists():
    for value in (_Vector([1.0, 2.0]), np.array([1.0, 2.0], dtype=np.float32), [1.0, 2.0]):
        out = vector_array(value)
        assert out.dtype == np.float32 and out.tolist() == [1.0, 2.0]
    assert vector_array(_Vector([0.5]), np.float64).dtype == np.float64


def test_vector_array_with_the_installed_pgvector():
    try:
        from pgvector import Vector  # 0.4 and later
    except ImportError:
        from pgvector.utils import Vector  # type: ignore[no-redef]  # 0.3
    assert vector_array(Vector([3.0, 4.0])).tolist() == [3.0, 4.0]
