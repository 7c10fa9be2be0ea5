"""Worker process of the idempotency race: dispatch N jobs over shared keys, print results.

Usage: python dispatch_keys.py DB_URL WORKER_NO N KEYS START_AT
Prints one JSON line: [[key, id], ...]. Waits until the wall clock reaches START_AT
(seconds since the epoch) so all processes start together.
"""

import json
import random
import sys
import time

from _common import bare_app

from cronjobs import queue


def main() -> None:
    url, worker, count, keys = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    start_at = float(sys.argv[5])
    app = bare_app(url)
    rng = random.Random(worker)
    plan = [f"key-{rng.randrange(keys)}" for _ in range(count)]
    with app.engine.connect():
        pass  # connect before the start line
    while time.time() < start_at:
        time.sleep(0.001)
    out = [[key, queue.dispatch("race.key.execute", {"k": key}, idempotency_key=key,
                                  known_type=False)]
           for key in plan]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
