"""Search the FAQ knowledge base from the command line, or time it.

    python -m threadkeeper.adapters.knowledge "how do I claim?" [--tenant T] [-k 3] [--root DIR]
    python -m threadkeeper.adapters.knowledge --bench [--root DIR]

``--bench`` prints, per tenant, the time to load the documents and to build the index (median
of fresh builds) and the search time over a fixed set of fa/zh/en queries (median and p99).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from threadkeeper.adapters.knowledge.base import KnowledgeBase, _TenantIndex

BENCH_QUERIES = (
    "Does my plan cover dental implants?",
    "how do I file a claim and what documents do I need",
    "my visa was refused, can I get my money back",
    "what's the weather on Mars",
    "آیا ایمپلنت دندان پوشش داده می‌شود؟",
    "برای ثبت خسارت چه مدارکی لازم است؟",
    "بیمه مسافرتی ویزای شینگن",
    "种植牙可以报销吗",
    "理赔需要哪些材料",
    "签证被拒能退款吗",
)


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.3f} ms"


def bench(root: Path | None, builds: int = 5, rounds: int = 200) -> None:
    start = time.perf_counter()
    knowledge = KnowledgeBase.from_directory(root)
    print(f"load (all tenants): {_ms(time.perf_counter() - start)}")
    for tenant in knowledge.tenants():
        docs = [knowledge.get_document(tenant, i) for i in knowledge.document_ids(tenant)]
        build_times = []
        for _ in range(builds):
            start = time.perf_counter()
            index = _TenantIndex(d for d in docs if d is not None)
            build_times.append(time.perf_counter() - start)
        knowledge.search(tenant, "warm-up")
        times = []
        for _ in range(rounds):
            for query in BENCH_QUERIES:
                start = time.perf_counter()
                knowledge.search(tenant, query)
                times.append(time.perf_counter() - start)
        times.sort()
        print(
            f"{tenant}: {len(docs)} documents, {len(index.chunks)} chunks; "
            f"build median {_ms(statistics.median(build_times))} (first {_ms(build_times[0])}); "
            f"search median {_ms(statistics.median(times))}, "
            f"p99 {_ms(times[int(len(times) * 0.99)])} over {len(times)} searches"
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m threadkeeper.adapters.knowledge")
    parser.add_argument("query", nargs="?", help="a question in fa, zh or en")
    parser.add_argument("--tenant", default="_default")
    parser.add_argument("-k", type=int, default=3)
    parser.add_argument("--min-score", type=float, default=None)
    parser.add_argument("--root", type=Path, default=None, help="default: the packaged sample KB")
    parser.add_argument("--bench", action="store_true", help="time index builds and searches")
    args = parser.parse_args(argv)
    if args.bench:
        bench(args.root)
        return
    if not args.query:
        parser.error("a query or --bench is required")
    knowledge = KnowledgeBase.from_directory(args.root)
    hits = knowledge.search(args.tenant, args.query, k=args.k, min_score=args.min_score)
    if not hits:
        print("(nothing relevant)")
    for hit in hits:
        first_line = hit.chunk.text.splitlines()[0]
        print(f"{hit.score:7.3f}  {hit.chunk.chunk_id}  {hit.chunk.title} / {first_line}")


if __name__ == "__main__":
    main()
