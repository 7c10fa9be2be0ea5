"""One process of the dispatch race: keyed `dispatch` of every key, in its own order.

Usage: python -m bench.racer DB_URL NAMESPACE PREFIX KEYS SEED START_AT
Waits until the wall clock reaches START_AT (s since the epoch) so all racers start
together, dispatches keys `PREFIX-0` .. `PREFIX-(KEYS-1)` shuffled by SEED, and prints
`{"calls": n, "start": t, "end": t, "ids": {key: id}}` (times: time.time()).
"""

import json
import random
import sys
import time


def main() -> None:
    url, ns, prefix, keys, seed, start_at = sys.argv[1:7]
    from cronjobs import queue

    from . import stores
    from .stores import NOOP

    app = stores.make_app(url, ns)
    plan = [f"{prefix}-{i}" for i in range(int(keys))]
    random.Random(int(seed)).shuffle(plan)
    with app.engine.connect():
        pass  # connect before the start line
    while time.time() < float(start_at):
        time.sleep(0.001)
    start = time.time()
    ids = {key: queue.dispatch(NOOP, {"key": key}, idempotency_key=key, app=app) for key in plan}
    end = time.time()
    app.close()
    print(json.dumps({"calls": len(plan), "start": start, "end": end, "ids": ids}))


if __name__ == "__main__":
    main()
