"""Run every benchmark of the project and print one table: figure, baseline, ratio, target.

Each ``benchmarks/bench_*.py`` exposes ``run() -> list[dict]`` with rows
``{name, value, baseline, ratio, unit, target}``; a baseline is measured in the same run, side
by side, so the ratio means something on a shared, noisy machine.

    python benchmarks/run.py            # full size
    python benchmarks/run.py --quick    # reduced sizes (what CI runs)
    python benchmarks/run.py --only sessions --json
"""

from __future__ import annotations

import argparse
import compileall
import importlib.util
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def machine() -> str:
    cpus = os.cpu_count() or 0
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError):
        mem = 0.0
    return f"{platform.machine()}, {cpus} cores, {mem:.0f} GiB, Python {platform.python_version()}"


def load(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module


def fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    return str(value)


def compile_package() -> None:
    """Write the package's bytecode, as an installation has it: pip compiles what it installs,
    and Python writes it at a module's first import, unless ``PYTHONDONTWRITEBYTECODE`` is set
    (as on the machines these figures come from). Without it each server the benchmarks start
    would compile every module from source, while the baselines' (the mcp SDK's, installed)
    are compiled."""
    compileall.compile_dir(HERE.parent / "mcp_agent", quiet=1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="reduced sizes, for CI")
    parser.add_argument("--only", action="append", default=[], help="bench_NAME to run")
    parser.add_argument("--json", action="store_true", help="print rows as JSON")
    args = parser.parse_args(argv)
    if args.quick:
        os.environ["MCP_AGENT_BENCH_QUICK"] = "1"
    sys.path.insert(0, str(HERE.parent))
    compile_package()

    rows: list[dict[str, Any]] = []
    for path in sorted(HERE.glob("bench_*.py")):
        name = path.stem.removeprefix("bench_")
        if args.only and name not in args.only:
            continue
        started = time.perf_counter()
        try:
            found = load(path).run()
        except Exception as error:  # one broken benchmark must not hide the others
            found = [{"name": f"{name}: failed ({error!r})"}]
        for row in found:
            row.setdefault("group", name)
        rows.extend(found)
        print(f"[{name}: {time.perf_counter() - started:.1f} s]", file=sys.stderr)

    if args.json:
        print(json.dumps({"machine": machine(), "rows": rows}, indent=2))
        return 0
    header = ("benchmark", "value", "baseline", "ratio", "unit", "target")
    table = [header] + [
        (
            row.get("name", "?"),
            fmt(row.get("value")),
            fmt(row.get("baseline")),
            fmt(row.get("ratio")),
            row.get("unit", ""),
            row.get("target", ""),
        )
        for row in rows
    ]
    widths = [max(len(str(line[i])) for line in table) for i in range(len(header))]
    print(f"machine: {machine()}")
    for i, line in enumerate(table):
        print("| " + " | ".join(str(c).ljust(w) for c, w in zip(line, widths, strict=True)) + " |")
        if i == 0:
            print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
