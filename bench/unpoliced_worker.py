"""`python -m bench.unpoliced_worker worker ...`: `cronjobs worker` whose claims carry no
flow control (`Executor(flow=None)`: no probe, no hold condition, no limits) — the claim
as it was before flow control. The `flow` scenario drains with it and with the stock
worker in turns, to show what flow control costs a queue that configures no limit.
Start it with `--processes 1` (more processes would be stock `cronjobs` children)."""

from cronjobs.cli import run
from cronjobs.job import executor


def _no_flow_control(app, **_) -> None:
    """The flow control of every executor of this worker: none."""
    return None


if __name__ == "__main__":  # job processes import this module again: only patch there
    executor.flow_control = _no_flow_control
    run()  # as `cronjobs worker` runs: its own process
