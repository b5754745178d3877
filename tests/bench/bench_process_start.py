"""What each process costs before it does anything: resident memory and CPU once its modules are imported, and
the CPU of `kubectl towline --help` and `kubectl towline runs` (a new process per command; the test suite starts
it hundreds of times).

`python -m tests.bench.bench_process_start` (starts the benchmarks' cluster for `runs`: run it in a world).
Each figure is the median of BENCH_REPEATS (default 7) fresh processes: VmRSS from /proc/self/status and the
process's user + system CPU after the imports; for the plugin, the child's user + system CPU as the kernel
accounts it. BENCH_OPERATOR_PYTHONPATH runs another revision's code (its `operator`, `connectors` and
`stepkit` directories) for before/after figures. Asserts nothing about time.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
from pathlib import Path

from tests.bench.figures import table
from tests.bench.simcluster import sim_cluster

REPEATS = int(os.environ.get("BENCH_REPEATS", "7"))
PROCESSES = {
    "operator": ("towline.cli", "towline.runtime.wiring"),
    "webhook ingress": ("towline.cli", "towline.triggers.ingress.server"),
    "archive": ("towline.cli", "towline.archive.app"),
}
IMPORTED = """import importlib, json, resource, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
status = dict(line.split(":", 1) for line in open("/proc/self/status"))
usage = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"rss_kib": int(status["VmRSS"].split()[0]), "cpu": usage.ru_utime + usage.ru_stime,
                  "client": "kubernetes_asyncio.client" in sys.modules}))
"""
PLUGIN = Path(sys.executable).parent / "kubectl-towline"


def environment() -> dict[str, str]:
    other = os.environ.get("BENCH_OPERATOR_PYTHONPATH")
    return {**os.environ, "PYTHONPATH": other} if other else dict(os.environ)


def after_import(modules: tuple[str, ...]) -> tuple[float, float, bool]:
    """Median MiB, median CPU seconds, and whether kubernetes-asyncio's client was loaded."""
    samples = [json.loads(subprocess.run([sys.executable, "-c", IMPORTED, *modules], capture_output=True, text=True,
                                         check=True, env=environment(), timeout=120).stdout)
               for _ in range(REPEATS)]
    return (statistics.median(s["rss_kib"] for s in samples) / 1024, statistics.median(s["cpu"] for s in samples),
            any(s["client"] for s in samples))


def plugin_cpu(*args: str) -> float:
    """The median user + system CPU seconds of `kubectl-towline ARGS`, once it has answered (exit 0) a first
    time: CRDs just installed may answer 429 for a moment while their storage starts."""
    argv = [str(PLUGIN), *args]
    for _ in range(100):
        first = subprocess.run(argv, capture_output=True, text=True, env=environment(), timeout=120, check=False)
        if first.returncode == 0:
            break
    else:
        raise SystemExit(f"{' '.join(args)}: {first.stderr}")
    seconds = []
    for _ in range(REPEATS):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run(argv, capture_output=True, check=True, env=environment(), timeout=120)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        seconds.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    return statistics.median(seconds)


def main() -> None:
    print(f"process start: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}, "
          f"{os.environ.get('BENCH_OPERATOR_PYTHONPATH') or 'this revision'}, median of {REPEATS}\n")
    rows = []
    for name, modules in PROCESSES.items():
        mib, cpu, client = after_import(modules)
        rows.append([f"{name} after import", f"{mib:.1f} MiB", f"{cpu:.2f} s",
                     "yes" if client else "no"])
    rows.append(["`kubectl towline --help`", "", f"{plugin_cpu('--help'):.2f} s", ""])
    with sim_cluster() as cluster:
        runs = plugin_cpu("--kubeconfig", str(cluster.plane.kubeconfig), "-n", "default", "runs")
    rows.append(["`kubectl towline runs` (as the admin, no runs)", "", f"{runs:.2f} s", ""])
    print(table(["process", "resident", "CPU", "kubernetes_asyncio.client loaded"], rows))
    print(f"\nload average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
