"""A scheduler process for the slot race: ticks each instant read from stdin.

Settings come from the environment (`cli_env`). Prints `ready` once the App and the
handlers are loaded, then for each ISO time read from stdin one JSON line:
`{"now": ..., "started": [[task, slot, job_id], ...], "skipped": {task: reason}}`.
The test writes the same instant to every process at once, so their ticks overlap.
"""

import json
import sys
from datetime import datetime

from cronjobs.app import current
from cronjobs.schedule.scheduler import tick

app = current()
app.handlers.registered_handlers()
with app.engine.connect():
    pass  # open the pool's first connection before the race starts
print("ready", flush=True)
for line in sys.stdin:
    now = datetime.fromisoformat(line.strip())
    report = tick(now, app=app)
    print(json.dumps({"now": line.strip(), "started": report.started,
                      "skipped": report.skipped}), flush=True)
app.close()
