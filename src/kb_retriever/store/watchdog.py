"""Stops the embedded server once no registered client process is alive.

A client that exits normally stops the server itself (``lifecycle.release`` at exit); one that
is killed cannot, so the process that starts the server also starts this watchdog. It runs as a
script (``python watchdog.py HOME PGDATA BINDIR USER INTERVAL SERVER_PID``), imports only
``lifecycle`` beside it, and exits when its server stops, whoever stopped it.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

if __package__:
    from . import lifecycle
else:  # run as a script: the package is not imported
    import lifecycle  # type: ignore[no-redef]


def watch(home: Path, pgdata: Path, bindir: Path, user: str | None, interval: float,
          server: int | None = None) -> None:
    """Watch the postmaster ``server`` (its pid; None: whichever runs) until it stops. A server
    stopped and started again within ``interval`` is another's to watch: its own watchdog
    started with it (the old one watched on beside it until that server stopped)."""
    while True:
        time.sleep(interval)
        try:
            if not _still_watching(home, pgdata, bindir, user, server):
                return
        except FileNotFoundError:  # the home is being removed: taking the lock would create
            return  # its file again, and the directory would stay behind


def _still_watching(home: Path, pgdata: Path, bindir: Path, user: str | None,
                    server: int | None) -> bool:
    """One look under the home's lock: False once the server stopped or was stopped here."""
    with lifecycle.home_lock(home, create=False):
        running = lifecycle.postmaster_pid(pgdata)
        if running is None or server is not None and running != server:
            return False
        if not lifecycle.live_clients(home):
            lifecycle.pg_ctl_stop(bindir, pgdata, user)
            return False
        return True


if __name__ == "__main__":
    home_arg, pgdata_arg, bindir_arg, user_arg, interval_arg, server_arg = sys.argv[1:7]
    watch(Path(home_arg), Path(pgdata_arg), Path(bindir_arg), user_arg or None, float(interval_arg),
          int(server_arg) if server_arg else None)
