"""Rollback variant of the idempotency race.

Usage: python dispatch_rollback.py DB_URL ROLE KEY READY_FILE
ROLE `holder`: dispatch KEY inside a Session, create READY_FILE, wait 1.5 s, roll back,
print {"role": "holder", "id": id_it_was_given}. ROLE `waiter`: wait for READY_FILE,
dispatch KEY (blocks on the holder's uncommitted row), print {"role": "waiter", "id": id}.
"""

import json
import os
import sys
import time

from _common import bare_app
from sqlalchemy.orm import Session

from cronjobs import queue


def main() -> None:
    url, role, key, ready = sys.argv[1:5]
    app = bare_app(url)
    sent = []
    app.broker.listen(lambda job_id, q, delay: sent.append(job_id))
    if role == "holder":
        with Session(app.engine) as session:
            job_id = queue.dispatch("race.key.execute", {}, idempotency_key=key, session=session,
                                    known_type=False)
            open(ready, "w").close()
            time.sleep(1.5)
            session.rollback()
        print(json.dumps({"role": role, "id": job_id, "sent": sent}))
        return
    while not os.path.exists(ready):
        time.sleep(0.005)
    time.sleep(0.2)  # make sure the holder's insert is in place before we wait on it
    job_id = queue.dispatch("race.key.execute", {}, idempotency_key=key, known_type=False)
    print(json.dumps({"role": role, "id": job_id, "sent": sent}))


if __name__ == "__main__":
    main()
