"""The worker process, from its main loop to the job process.

`loop` (the worker's main thread and its signals), `pool` (claims and slots), the slots
(`procslots`: job processes; `threadslots`: `ISOLATION = "thread"`), `groupcommit`
(outcomes written together with the next claim), the job processes (`forkserver`: the
project's own fork server; `runner`, `jobprocess`, `preload`, `killtimer`), the periodic
duties (`housekeeping`, `heartbeat`, `sweep`), `relay` (doorbells passed on), `burst` and
`children` (`--burst`, `--processes N`). Nothing is imported here: a job process imports
only what it runs.
"""
