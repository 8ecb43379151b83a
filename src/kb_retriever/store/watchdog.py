"""Stops the embedded server once no registered client process is alive.

A client that exits normally stops the server itself (``lifecycle.release`` at exit); one that
is killed cannot, so the process that starts the server also starts this watchdog. It runs as a
script (``python watchdog.py HOME PGDATA BINDIR USER INTERVAL``), imports only ``lifecycle``
beside it, and exits when the server stops, whoever stopped it.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

if __package__:
    from . import lifecycle
else:  # run as a script: the package is not imported
    import lifecycle  # type: ignore[no-redef]


def watch(home: Path, pgdata: Path, bindir: Path, user: str | None, interval: float) -> None:
    while True:
        time.sleep(interval)
        with lifecycle.home_lock(home):
            if lifecycle.postmaster_pid(pgdata) is None:
                return
            if not lifecycle.live_clients(home):
                lifecycle.pg_ctl_stop(bindir, pgdata, user)
                return


if __name__ == "__main__":
    home_arg, pgdata_arg, bindir_arg, user_arg, interval_arg = sys.argv[1:6]
    watch(Path(home_arg), Path(pgdata_arg), Path(bindir_arg), user_arg or None, float(interval_arg))
