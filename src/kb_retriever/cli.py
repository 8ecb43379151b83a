"""The kb-retriever command line: a thin shell over KnowledgeBase.

Exit codes: 0 ok, 1 a file failed to ingest or an unexpected failure, 2 bad input or
configuration (one line on stderr), 3 a benchmark gate was missed.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from . import cli_listing
from .errors import IngestInterruptedError, KbError, printable

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2

DESCRIPTION = ("Retrieval with a trust gradient for engineering knowledge bases, on\n"
               "PostgreSQL and pgvector. Without --database-url (or KB_DATABASE_URL) an\n"
               "embedded PostgreSQL is started under --home (or KB_HOME).")
EPILOG = ("examples:\n"
          "  kb-retriever ingest examples/kb --project demo\n"
          "  kb-retriever search \"what cache layer did we standardise on?\" --project demo\n"
          "  kb-retriever prompt \"how do we roll back a deploy?\" --project demo\n"
          "  kb-retriever projects                        # projects, sizes, models\n"
          "  kb-retriever documents --project demo\n"
          "  kb-retriever mcp --project demo              # MCP tools over stdio, for agents")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # argparse's own usage errors: exit 2, one line
        # The contract is one line on stderr; argparse's wrapped usage block would add more.
        print(f"kb-retriever: error: {message} (see `{self.prog} --help`)", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)


def _positive_int(text: str) -> int:
    """An argparse type: a whole number of at least 1 (argparse reports anything else)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r:.40}")
    return value


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("kb-retriever")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        from . import __version__

        return __version__


def _scope(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--project", default="default", help="project key (default: default)")
    sp.add_argument("--tenant", default="default", help="tenant id (default: default)")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="kb-retriever", description=DESCRIPTION, epilog=EPILOG,
                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    p.add_argument("--database-url", metavar="URL",
                   help="PostgreSQL with pgvector (default: KB_DATABASE_URL, else embedded)")
    p.add_argument("--home", metavar="DIR",
                   help="data directory of the embedded server (default: KB_HOME, "
                        "else ~/.kb-retriever)")
    p.add_argument("-v", "--verbose", action="store_true", help="log what the library does")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in (_ingest_parser, _query_parsers, _bench_parser, _doctor_parser, _mcp_parser):
        add(sub)
    cli_listing.add_parsers(sub, _scope)
    return p


def _ingest_parser(sub: Any) -> None:
    sp = sub.add_parser("ingest", help="ingest files or folders (Markdown, text, PDF, DOCX)",
                        description="Ingest files and folders. Unchanged files are skipped; a "
                                    "file that fails is reported and the run goes on.")
    sp.add_argument("paths", nargs="+", metavar="PATH", help="files or folders to ingest")
    _scope(sp)
    sp.add_argument("--prune", action="store_true",
                    help="delete the documents found under these paths before whose file is gone")
    sp.add_argument("--follow-symlinks", action="store_true",
                    help="follow symlinks that point outside the ingest paths")
    sp.add_argument("--json", action="store_true", help="print the report as JSON")


def _query_parsers(sub: Any) -> None:
    for name, helptext in (("search", "search and print the ranked result"),
                           ("prompt", "print the composed prompt for a question")):
        sp = sub.add_parser(name, help=helptext, description=helptext.capitalize() + ".")
        sp.add_argument("query", help="the question, in natural language")
        _scope(sp)
        sp.add_argument("--also-project", action="append", default=[], metavar="P",
                        help="search this project too (repeatable)")
        sp.add_argument("--limit", type=int, default=None, metavar="N",
                        help="how many chunks (default: KB_DEFAULT_LIMIT, 8)")
        sp.add_argument("--filters", default=None, metavar="JSON",
                        help='filters as a JSON object, e.g. \'{"tags": ["cache"], "$or": '
                             '[{"canonical_type": "decision"}, {"team": "platform"}]}\'')
        if name == "search":
            sp.add_argument("--json", action="store_true", help="print the contract JSON")
            sp.add_argument("--explain", action="store_true", help="show every score term")
            sp.add_argument("--sql", action="store_true", help="print the candidate SQL")
        else:
            sp.add_argument("--max-chars", type=_positive_int, default=None, metavar="N",
                            help="soft budget of the prompt in characters: related items, "
                                 "then context chunks are dropped to fit, but one context "
                                 "chunk and every rejected approach stay, so a prompt may "
                                 "still be longer")


def _bench_parser(sub: Any) -> None:
    sp = sub.add_parser("bench", help="run a retrieval benchmark (AskMyDocs format)",
                        description="Ingest a corpus, run its queries and report nDCG, MRR, "
                                    "citation, refusal, graph and rejected metrics.")
    sp.add_argument("--corpus", required=True, metavar="DIR", help="folder of documents")
    sp.add_argument("--queries", required=True, metavar="FILE", help="queries YAML file")
    sp.add_argument("--k", type=int, default=5, help="cut-off of the metrics (default: 5)")
    sp.add_argument("--json", action="store_true", help="print the report as JSON")
    sp.add_argument("--gate", action="store_true", help="exit 3 when a threshold is missed")
    sp.add_argument("--tune", action="store_true", help="tune reranker weights (train/held-out)")
    sp.add_argument("--project", default=None,
                    help="project to ingest into, which must hold nothing else (default: one "
                         "per corpus folder, bench-<hash of its path>)")
    sp.add_argument("--tenant", default="default", help="tenant id (default: default)")


def _doctor_parser(sub: Any) -> None:
    sp = sub.add_parser("doctor", help="check the index: recall of approximate vs exact search",
                        description="Compare the HNSW index's answers with an exact scan.")
    _scope(sp)
    sp.add_argument("--samples", type=int, default=20, help="queries to sample (default: 20)")
    sp.add_argument("--k", type=int, default=10, help="neighbours compared (default: 10)")
    sp.add_argument("--reindex", action="store_true",
                    help="first build the project's embedding model's HNSW index again with "
                         "KB_HNSW_M, KB_HNSW_EF_CONSTRUCTION and KB_HNSW_TYPE (concurrently: "
                         "searches and writes go on)")
    sp.add_argument("--json", action="store_true", help="print the report as JSON")


def _mcp_parser(sub: Any) -> None:
    sp = sub.add_parser("mcp", help="serve search to agents as MCP tools (needs kb-retriever[mcp])",
                        description="Serve the search, documents and composed prompt as Model "
                                    "Context Protocol tools, over stdio (default) or streamable "
                                    "HTTP on a loopback address. Read-only unless --allow-writes.")
    sp.add_argument("--project", action="append", default=None, metavar="P",
                    help="a project the agent may search (repeatable; default: default)")
    sp.add_argument("--tenant", default="default", help="tenant id (default: default)")
    sp.add_argument("--transport", choices=("stdio", "streamable-http"), default="stdio",
                    help="stdio for a client that starts the server (default), or "
                         "streamable-http to serve http://HOST:PORT/mcp")
    sp.add_argument("--host", default="127.0.0.1",
                    help="HTTP address, loopback only (default: 127.0.0.1)")
    sp.add_argument("--port", type=_port, default=8000, help="HTTP port (default: 8000)")
    sp.add_argument("--allow-writes", action="store_true",
                    help="also serve add_document and delete_document tools")


def _port(value: str) -> int:
    """A TCP port for ``--port``: 1 to 65535."""
    try:
        port = int(value)
    except ValueError:
        port = 0
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"a port is a number from 1 to 65535, got {value!r}")
    return port


def _kb(args: argparse.Namespace, *, catalog: bool = False, **kw: Any) -> Any:
    """The command's knowledge base (``catalog``: one that lists and deletes only, and leaves
    the embedder's model alone: ``kb.CatalogBase``)."""
    from .kb import CatalogBase, KnowledgeBase

    kw.setdefault("project", getattr(args, "project", "default"))
    return (CatalogBase if catalog else KnowledgeBase)(
        database_url=args.database_url, home=args.home,
        tenant=getattr(args, "tenant", "default"), **kw)


def _progress(label: str = "ingest") -> Any:
    from .write.progress import Progress

    return Progress(label)


def _setup_logging(verbose: bool) -> None:
    """Library logs (ours, pypdf's) go to stderr as one line each; pypdf's per-page chatter
    only with --verbose (a broken file is already in the ingest report)."""
    for name, quiet in (("kb_retriever", logging.WARNING), ("pypdf", logging.ERROR)):
        logger = logging.getLogger(name)
        logger.setLevel(logging.INFO if verbose else quiet)
        if not any(getattr(h, "_kb_cli", False) for h in logger.handlers):
            handler = logging.StreamHandler()  # sys.stderr at the time of each message
            handler.setFormatter(logging.Formatter("kb-retriever: %(levelname)s: %(message)s"))
            handler._kb_cli = True  # type: ignore[attr-defined]
            logger.addHandler(handler)
            logger.propagate = False


def cmd_ingest(args: argparse.Namespace) -> int:
    with _kb(args) as kb:
        try:
            report = kb.ingest(args.paths, prune=args.prune, progress=_progress(),
                               follow_symlinks=args.follow_symlinks)
        except IngestInterruptedError as exc:  # what was committed, for a --json reader too
            if args.json:
                print(json.dumps({**exc.report.__dict__, "interrupted": exc.interrupted,
                                  "remaining": exc.remaining}, indent=2, default=str))
            raise
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


def cmd_search(args: argparse.Namespace) -> int:
    from .prompt.render import render_result

    kwargs = cli_listing.checked_search(args)
    with _kb(args) as kb:
        if args.sql:
            print(kb.search_sql(args.query, **kwargs))
            return EXIT_OK
        result = kb.search(args.query, **kwargs)
        cli_listing.hint_if_empty(kb, args, result)
    if args.json:
        print(json.dumps(result.to_dict(), indent=2, ensure_ascii=False, default=str))
    else:
        print(render_result(result, explain=args.explain))
    return EXIT_OK


def cmd_prompt(args: argparse.Namespace) -> int:
    from .prompt.compose import compose_prompt

    kwargs = cli_listing.checked_search(args)
    with _kb(args) as kb:
        result = kb.search(args.query, **kwargs)
        cli_listing.hint_if_empty(kb, args, result)
        searched = list(dict.fromkeys([args.project, *args.also_project]))
        text = compose_prompt(result, project=", ".join(searched),
                              timezone=kb.settings.prompt_timezone, max_chars=args.max_chars,
                              name_projects=len(searched) > 1)
    if result.should_refuse:
        print("kb-retriever: the grounding gate refuses this question (should_refuse): the "
              "knowledge base holds no evidence for it, so no model call is needed; the prompt "
              "holds the nearest matches", file=sys.stderr)
    # on a terminal, a document's escape sequences are shown, not run (as `search` does)
    print(printable(text, keep="\n\t") if sys.stdout.isatty() else text)
    return EXIT_OK


def cmd_bench(args: argparse.Namespace) -> int:
    from .bench.command import run_bench_command

    return run_bench_command(args)


def cmd_doctor(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from .doctor import diagnose, format_report

    report = diagnose(database_url=args.database_url, home=args.home,
                      tenant=args.tenant, project=args.project, samples=args.samples, k=args.k,
                      reindex=args.reindex)
    print(json.dumps(asdict(report), indent=2) if args.json else format_report(report))
    return EXIT_OK  # whatever the recall: the report says what to do


def cmd_mcp(args: argparse.Namespace) -> int:
    from .mcp import Scope, check_host, serve

    projects = tuple(dict.fromkeys(args.project or ["default"]))
    if args.transport != "stdio":
        check_host(args.host)
    scope = Scope(projects=projects, tenant=args.tenant, allow_writes=args.allow_writes)
    serve(_kb(args, project=projects[0]), scope, transport=args.transport, host=args.host,
          port=args.port, verbose=args.verbose)
    return EXIT_OK


COMMANDS = {"ingest": cmd_ingest, "search": cmd_search, "prompt": cmd_prompt,
            "bench": cmd_bench, "doctor": cmd_doctor, "mcp": cmd_mcp}


def _check_global_options(parser: argparse.ArgumentParser, argv: Sequence[str]) -> None:
    """An unknown option before the command is reported as such: argparse would take its
    value for the command (``--databse-url x search`` gave "invalid choice: 'x'")."""
    known = parser._option_string_actions  # the parser's own table of its options
    tokens = iter(argv)
    for token in tokens:
        if not token.startswith("-") or token == "--":
            return  # the command: the rest is its own
        name = token.split("=", 1)[0]
        # argparse takes a unique prefix of a long option (--data for --database-url)
        prefixed = [o for o in known if o.startswith("--") and o.startswith(name)]
        action = known.get(name) or (known[prefixed[0]] if len(prefixed) == 1
                                     and name.startswith("--") else None)
        if action is None:
            import difflib

            close = difflib.get_close_matches(name, [o for o in known if o.startswith("--")],
                                              n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            parser.error(f"unknown option {name!r} before the command{hint}")
        elif action.nargs != 0 and "=" not in token:
            next(tokens, None)  # its value


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    _check_global_options(parser, sys.argv[1:] if argv is None else list(argv))
    args = parser.parse_args(argv)
    _setup_logging(args.verbose)
    try:
        if args.command in cli_listing.COMMANDS:
            code = cli_listing.COMMANDS[args.command](args, _kb)
        else:
            code = COMMANDS[args.command](args)
        if not sys.stdout.closed:  # (the MCP server's stdio transport closes it)
            sys.stdout.flush()  # a reader that went away shows here, not at the exit
        return code
    except KbError as exc:
        print(f"kb-retriever: {printable(str(exc))}", file=sys.stderr)
        # An ingest a lost connection stopped left files out, as one whose files failed (1):
        # no bad input or configuration (2).
        return EXIT_FAILURE if isinstance(exc, IngestInterruptedError) else EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (``| head``): stop without a message, and point stdout at
        # /dev/null so the interpreter's flush at exit does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAILURE
    except Exception as exc:  # last resort: one line, the traceback only on request
        if os.environ.get("KB_DEBUG"):
            raise
        print(f"kb-retriever: unexpected {type(exc).__name__}: {exc} (set KB_DEBUG=1 for "
              "the traceback)", file=sys.stderr)
        return EXIT_FAILURE


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
