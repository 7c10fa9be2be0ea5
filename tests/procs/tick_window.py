"""A scheduler process for the host-time-zone test: ticks every minute of [START, END).

Usage: `tick_window.py START END` (ISO, naive UTC). Settings come from the environment
(`cli_env`, with `CRONJOBS_TIMEZONE`); the host's `TZ` is whatever the test set. Each
minute is ticked at second 5. Prints one JSON line: `[[minute, task, slot key], ...]` for
every run started, in order. The runs a tick starts end before the next (as the test's
own `drive` does), so `OVERLAP = "skip"` tasks start every slot too.
"""

import json
import sys
from datetime import datetime, timedelta

from cronjobs.app import current
from cronjobs.schedule.scheduler import tick
from cronjobs.store.models import cronjob_queue

start, end = (datetime.fromisoformat(arg) for arg in sys.argv[1:3])
app = current()
started, minute = [], start
while minute < end:
    report = tick(minute + timedelta(seconds=5), app=app)
    started += [[minute.isoformat(), task, key] for task, key, _ in report.started]
    with app.engine.begin() as conn:
        conn.execute(cronjob_queue.update().where(cronjob_queue.c.status == "pending")
                     .values(status="completed"))
    minute += timedelta(minutes=1)
print(json.dumps(started))
app.close()
