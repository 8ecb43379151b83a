"""Subprocess helper: start (or attach to) the embedded server of HOME, prove it answers,
print READY and then either wait to be killed (MODE hold) or exit normally (MODE exit).

usage: server_worker.py HOME MODE
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import psycopg

from kb_retriever.store.embedded import start_embedded

home, mode = Path(sys.argv[1]), sys.argv[2]
url = start_embedded(home)
with psycopg.connect(url, autocommit=True) as conn:
    assert conn.execute("SELECT 1").fetchone() == (1,)
print("READY", url, flush=True)
if mode == "hold":
    while True:
        time.sleep(1)
