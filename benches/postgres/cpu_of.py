"""Runs a command and writes what it cost the machine, as JSON. Standard library only.

    python3 benches/postgres/cpu_of.py OUT.json -- COMMAND [ARGS...]

OUT.json gets:

- `client_cpu_s`: the command's own CPU time, user + system, with every process it
  waited for (the kernel's accounting, as GNU time reports it);
- `machine_busy_s`: the whole machine's busy CPU time over the same span, from
  /proc/stat (user, nice, system, irq and softirq of every core: the server, the
  kernel's network work and the command itself; idle, I/O wait and time stolen by
  the hypervisor are not busy);
- `wall_s` and `cpus`: how long it ran, and the cores the machine has.

On a machine where a client and its server share the cores, the machine's busy time
per operation says what the rate can be: when the cores are nearly all busy, the
rate is the cores over the machine's time per operation. benches/postgres/run.sh
runs each side of each point through this. The command's exit status is this
script's; its standard streams are the command's.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time


def machine_busy_s() -> float:
    """Busy CPU seconds of all cores since boot (the first line of /proc/stat)."""
    with open("/proc/stat", encoding="ascii") as stat:
        fields = stat.readline().split()
    if not fields or fields[0] != "cpu":
        raise SystemExit("cpu_of: /proc/stat does not start with the `cpu` line")
    # user nice system idle iowait irq softirq steal (guest time is inside user)
    user, nice, system, _idle, _iowait, irq, softirq = (int(x) for x in fields[1:8])
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[2] != "--":
        print("usage: cpu_of.py OUT.json -- COMMAND [ARGS...]", file=sys.stderr)
        return 2
    out, command = argv[1], argv[3:]
    busy_before, wall_before = machine_busy_s(), time.monotonic()
    status = subprocess.call(command)
    wall, busy = time.monotonic() - wall_before, machine_busy_s() - busy_before
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    with open(out, "w", encoding="utf-8") as f:
        json.dump(
            {
                "client_cpu_s": round(children.ru_utime + children.ru_stime, 4),
                "machine_busy_s": round(busy, 4),
                "wall_s": round(wall, 4),
                "cpus": os.cpu_count(),
            },
            f,
        )
        f.write("\n")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv))
