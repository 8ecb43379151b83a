"""The ``kb-retriever`` command line: a thin shell over :class:`KnowledgeBase`.

Exit codes: 0 ok, 2 bad input or configuration (one line on stderr), 1 unexpected failure.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from .errors import KbError

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # argparse's own usage errors: exit 2, one line
        # The contract is one line on stderr; argparse's wrapped usage block would add more.
        print(f"kb-retriever: error: {message} (see `{self.prog} --help`)", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="kb-retriever", description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--database-url", help="PostgreSQL URL (else KB_DATABASE_URL, else embedded)")
    p.add_argument("--home", help="data directory of the embedded server (else KB_HOME)")
    sub = p.add_subparsers(dest="command", required=True)

    def scope(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--project", default="default", help="project key (default: default)")
        sp.add_argument("--tenant", default="default", help="tenant id (default: default)")

    sp = sub.add_parser("ingest", help="ingest files or directories")
    sp.add_argument("paths", nargs="+")
    scope(sp)
    sp.add_argument("--prune", action="store_true",
                    help="delete the documents found under these paths before whose file is gone")
    sp.add_argument("--follow-symlinks", action="store_true",
                    help="follow symlinks that point outside the ingest paths")
    sp.add_argument("--json", action="store_true", help="print the report as JSON")

    for name, helptext in (("search", "search and print the result"),
                           ("prompt", "print the composed prompt for a question")):
        sp = sub.add_parser(name, help=helptext)
        sp.add_argument("query")
        scope(sp)
        sp.add_argument("--also-project", action="append", default=[], metavar="P",
                        help="search these projects too (repeatable)")
        sp.add_argument("--limit", type=int, default=None)
        sp.add_argument("--filters", default=None, help="filters as a JSON object")
        if name == "search":
            sp.add_argument("--json", action="store_true", help="print the contract JSON")
            sp.add_argument("--explain", action="store_true", help="show every score term")
            sp.add_argument("--sql", action="store_true", help="print the candidate SQL")
        else:
            sp.add_argument("--max-chars", type=int, default=None, help="prompt budget")

    sp = sub.add_parser("bench", help="run a retrieval benchmark (AskMyDocs format)")
    sp.add_argument("--corpus", required=True)
    sp.add_argument("--queries", required=True)
    sp.add_argument("--k", type=int, default=5)
    sp.add_argument("--json", action="store_true")
    sp.add_argument("--gate", action="store_true", help="exit 3 when a threshold is missed")
    sp.add_argument("--tune", action="store_true", help="tune reranker weights (train/held-out)")
    sp.add_argument("--project", default="benchmark")
    sp.add_argument("--tenant", default="default")

    sp = sub.add_parser("doctor", help="check the index: recall of approximate vs exact search")
    scope(sp)
    sp.add_argument("--samples", type=int, default=20)
    sp.add_argument("--k", type=int, default=10)
    sp.add_argument("--json", action="store_true", help="print the report as JSON")
    return p


def _kb(args: argparse.Namespace, **kw: Any) -> Any:
    from .kb import KnowledgeBase

    return KnowledgeBase(database_url=args.database_url, home=args.home,
                         tenant=getattr(args, "tenant", "default"),
                         project=getattr(args, "project", "default"), **kw)


def _progress() -> Any:
    if not sys.stderr.isatty():
        return None

    def show(done: int, total: int, name: str) -> None:
        width = 30
        filled = int(width * done / total) if total else width
        bar = "#" * filled + "." * (width - filled)
        end = "\n" if done >= total else ""
        print(f"\r[{bar}] {done}/{total} {name[:40]:<40}", end=end, file=sys.stderr, flush=True)

    return show


def printable(text: str) -> str:
    """``text`` with control characters escaped: a file name must not move the cursor or
    recolour the terminal (``\x1b[2J``), nor forge a line of the report (``\n``)."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))


def cmd_ingest(args: argparse.Namespace) -> int:
    with _kb(args) as kb:
        report = kb.ingest(args.paths, prune=args.prune, progress=_progress(),
                           follow_symlinks=args.follow_symlinks)
    if args.json:
        print(json.dumps(report.__dict__, indent=2, default=str))
    else:
        print(report.summary())
        for label, rows in (("failed", report.failed), ("skipped", report.skipped),
                            ("warning", report.warnings)):
            for path, msg in rows:
                print(f"  {label}: {printable(path)}: {printable(msg)}")
    # The same rule for a folder and for a file named explicitly: did anything fail?
    return EXIT_FAILURE if report.failed else EXIT_OK


def _search_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    filters = None
    if args.filters:
        from .errors import FilterError

        try:
            filters = json.loads(args.filters)
        except json.JSONDecodeError as exc:
            raise FilterError(f"--filters is not valid JSON: {exc.msg}") from None
        except RecursionError:
            raise FilterError("--filters is nested too deeply") from None
    projects = [args.project, *args.also_project]
    return {"limit": args.limit, "filters": filters,
            "project": projects if len(projects) > 1 else args.project}


def cmd_search(args: argparse.Namespace) -> int:
    from .render import render_result

    with _kb(args) as kb:
        if args.sql:
            print(kb.search_sql(args.query, **_search_kwargs(args)))
            return EXIT_OK
        result = kb.search(args.query, **_search_kwargs(args))
    if args.json:
        print(json.dumps(result.to_dict(), indent=2, ensure_ascii=False, default=str))
    else:
        print(render_result(result, explain=args.explain))
    return EXIT_OK


def cmd_prompt(args: argparse.Namespace) -> int:
    from .prompt import compose_prompt

    with _kb(args) as kb:
        result = kb.search(args.query, **_search_kwargs(args))
        print(compose_prompt(result, project=args.project, timezone=kb.settings.prompt_timezone,
                             max_chars=args.max_chars))
    return EXIT_OK


def cmd_bench(args: argparse.Namespace) -> int:
    from .bench.cli import run_bench_command

    return run_bench_command(args)


def cmd_doctor(args: argparse.Namespace) -> int:
    from .doctor import run_doctor

    return run_doctor(args)


COMMANDS = {"ingest": cmd_ingest, "search": cmd_search, "prompt": cmd_prompt,
            "bench": cmd_bench, "doctor": cmd_doctor}


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except KbError as exc:
        print(f"kb-retriever: {printable(str(exc))}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # last resort: one line, the traceback only on request
        if os.environ.get("KB_DEBUG"):
            raise
        print(f"kb-retriever: unexpected {type(exc).__name__}: {exc} (set KB_DEBUG=1 for "
              "the traceback)", file=sys.stderr)
        return EXIT_FAILURE


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
