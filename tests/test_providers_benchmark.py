"""The provider benchmark runs and reports rows in the shape the benchmark runner expects."""

from __future__ import annotations

import importlib.util
from pathlib import Path


def test_bench_providers_runs_small() -> None:
    path = Path(__file__).parent.parent / "benchmarks" / "bench_providers.py"
    spec = importlib.util.spec_from_file_location("bench_providers", path)
    assert spec and spec.loader
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    rows = bench.run(chunks=300, rounds=1)
    assert [row["name"] for row in rows] == [
        "openai_stream_parse_paced",
        "openai_stream_parse_burst",
    ]
    for row in rows:
        assert set(row) == {"name", "value", "baseline", "ratio", "unit", "target", "note"}
        assert row["value"] > 0 and row["baseline"] > 0 and row["unit"] == "chunks/s"
    assert rows[0]["target"] == 0.8
