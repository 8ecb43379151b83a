"""Subprocess helper: a storm of writes and reads on a few shared document ids.

usage: storm_worker.py URL PROJECT SEED THREADS OPS

Each of THREADS threads runs OPS random operations on one shared KnowledgeBase:
``add_documents`` (one of the shared ids, in one of its versions), ``delete``,
``delete_chunks`` (a stored chunk of a shared id), ``get_by_ids``, ``get_chunks`` and
``search``. Prints one JSON line: the operation counts, and every failure as
"operation: ExceptionType: message", and each operation's three slowest durations.
"""

from __future__ import annotations

import json
import random
import sys
import threading
import time
import traceback

from kb_retriever import HashingEmbedder, KnowledgeBase, Settings

sys.path.insert(0, __file__.rsplit("/", 2)[0])  # tests/concurrency, for storm_corpus
from storm_corpus import DIM, SHARED_IDS, version_text  # noqa: E402

url, project, seed, threads, ops = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6])

counts: dict[str, int] = {}
seconds: dict[str, list[float]] = {}
failures: list[str] = []
lock = threading.Lock()


def one(kb: KnowledgeBase, rng: random.Random) -> None:
    doc_id = rng.choice(SHARED_IDS)
    op = rng.choices(["add", "delete", "delete_chunks", "get", "chunks", "search"],
                     weights=[6, 1, 1, 2, 1, 2])[0]
    start = time.perf_counter()
    try:
        if op == "add":
            kb.add_documents([{"id": doc_id, "text": version_text(doc_id, rng.randrange(4)),
                               "metadata": {"storm": True}}], project=project)
        elif op == "delete":
            kb.delete([doc_id], project=project)
        elif op == "delete_chunks":
            docs = kb.get_by_ids([doc_id], project=project)
            if docs and docs[0].chunks:
                kb.delete_chunks([rng.choice(docs[0].chunks).id], project=project)
        elif op == "get":
            kb.get_by_ids([doc_id], project=project)
        elif op == "chunks":
            kb.get_chunks(filters={"metadata": {"storm": True}}, project=project)
        else:
            kb.search(f"section {rng.randrange(20)} of {doc_id}", project=project, limit=5)
    except Exception as exc:  # the storm counts every failure, whatever its type
        with lock:
            failures.append(f"{op}: {type(exc).__name__}: {str(exc)[:300]}")
            if len(failures) <= 3:
                traceback.print_exc(file=sys.stderr)
    with lock:
        counts[op] = counts.get(op, 0) + 1
        seconds.setdefault(op, []).append(round(time.perf_counter() - start, 3))


def run(kb: KnowledgeBase, n: int, thread_seed: int) -> None:
    rng = random.Random(thread_seed)
    for _ in range(n):
        one(kb, rng)


with KnowledgeBase(Settings(pool_max_size=threads + 1), embedder=HashingEmbedder(DIM),
                   database_url=url, project=project) as kb:
    workers = [threading.Thread(target=run, args=(kb, ops, seed * 100 + i))
               for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
slowest = {op: sorted(v)[-3:] for op, v in seconds.items()}
print(json.dumps({"counts": counts, "failures": failures, "slowest_s": slowest}))
