"""Lenient metadata readers shared by the framework adapters."""

from __future__ import annotations

import math
from datetime import datetime

from kb_retriever.interop.coerce import as_date, as_flag, as_float, as_int, as_opt_str, as_tags


def test_readers():
    assert as_flag("false") is False and as_flag("Yes") is True and as_flag(0) is False
    assert as_int("80") == 80 and as_int("80.0") == 80 and as_int("x", 50) == 50
    assert as_float("0.5") == 0.5 and as_float(math.nan, 0.0) == 0.0 and as_float(None) is None
    assert as_opt_str("") is None and as_opt_str(3) == "3"
    assert as_tags("a, b,") == ("a", "b") and as_tags(["x", " "]) == ("x",)
    assert as_tags({"a": 1}) == () and as_tags(5) == ()
    assert as_date("2026-01-02") == datetime(2026, 1, 2) and as_date("nope") is None
