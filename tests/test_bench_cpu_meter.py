"""The bench's CPU meter counts what a process tree spends inside its window: a child
that burns CPU and exits inside the window still counts, work before the window does not."""

from __future__ import annotations

import subprocess
import sys
import time

from bench import procs

BURN = "import time\nend = time.process_time() + {s}\nwhile time.process_time() < end: pass\n"


def test_a_child_that_exits_inside_the_window_is_counted():
    parent = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    children: list[int] = []
    try:
        meter = procs.CpuMeter(lambda: [parent.pid, *children])
        meter.start()
        child = subprocess.Popen([sys.executable, "-c", BURN.format(s=0.6)])
        children.append(child.pid)
        while child.poll() is None:
            meter.sample()
            time.sleep(0.05)
        meter.sample()
        assert 0.3 <= meter.seconds() <= 2.0
    finally:
        parent.kill()
        parent.wait()


def test_cpu_spent_before_the_window_is_not_counted():
    script = BURN.format(s=0.6) + "print('burnt', flush=True)\ntime.sleep(30)\n"
    busy = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert busy.stdout.readline().strip() == "burnt"
        meter = procs.CpuMeter(lambda: procs.tree_pids([busy.pid]))
        meter.start()
        time.sleep(0.3)
        meter.sample()
        assert meter.seconds() < 0.1
    finally:
        busy.kill()
        busy.communicate()
