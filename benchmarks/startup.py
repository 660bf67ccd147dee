"""How long the command line takes to answer without running anything: ``kcert --help``,
``--version`` and a usage error, against ``python -c "import torch"`` and a bare interpreter.

Each command runs in a fresh process, interleaved with the others, ``--repeats`` times; the table
gives the median and the fastest wall time. The target (issue 13): ``kcert --help`` well under half
a second; it parses the arguments before importing torch (kcert.cli), so it should cost about the
bare interpreter plus argparse.

    python benchmarks/startup.py [--repeats N] [--compare-src DIR]

``--compare-src DIR`` adds ``python -m kcert --help`` run from another checkout's ``src`` folder (e.g. an
export of an older commit: ``git archive OLD | tar -x -C /tmp/old``, then ``--compare-src /tmp/old/src``).

The ``kcert`` script is the one installed beside this interpreter (a version manager's shim on PATH
would add its own start-up, which is not kcert's).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path


def commands() -> list[tuple[str, list[str]]]:
    script = Path(sys.executable).with_name("kcert")
    kcert = [str(script)] if script.exists() else [sys.executable, "-m", "kcert"]
    return [
        ("python -c pass", [sys.executable, "-c", "pass"]),
        ('python -c "import torch"', [sys.executable, "-c", "import torch"]),
        ("kcert --help", [*kcert, "--help"]),
        ("kcert --version", [*kcert, "--version"]),
        ("kcert certify (usage error, exit 2)", [*kcert, "certify"]),
        ("kcert certify --help", [*kcert, "certify", "--help"]),
        ("python -m kcert --help", [sys.executable, "-m", "kcert", "--help"]),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--compare-src", metavar="DIR", help="also time python -m kcert --help from this src folder")
    args = ap.parse_args()
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    cmds = [(name, argv, env) for name, argv in commands()]
    if args.compare_src:
        other = dict(env, PYTHONPATH=str(Path(args.compare_src).resolve()))
        cmds.append((f"python -m kcert --help ({args.compare_src})", [sys.executable, "-m", "kcert", "--help"], other))
    times: dict[str, list[float]] = {name: [] for name, _, _ in cmds}
    for name, argv, e in cmds:  # warm the file cache once
        subprocess.run(argv, capture_output=True, env=e)
    for _ in range(args.repeats):
        for name, argv, e in cmds:
            t = time.perf_counter()
            proc = subprocess.run(argv, capture_output=True, env=e)
            times[name].append(time.perf_counter() - t)
            expected = 2 if "usage error" in name else 0
            if proc.returncode != expected:
                raise SystemExit(f"{name}: exit {proc.returncode}, expected {expected}: {proc.stderr.decode()[-500:]}")
    import torch

    print(f"{platform.processor() or platform.machine()}, Python {platform.python_version()}, torch {torch.__version__}, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; {args.repeats} runs each, interleaved")
    print()
    print("| command | median s | fastest s |")
    print("| --- | --- | --- |")
    for name, _, _ in cmds:
        print(f"| {name} | {statistics.median(times[name]):.3f} | {min(times[name]):.3f} |")


if __name__ == "__main__":
    main()
