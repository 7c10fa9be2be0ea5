"""Health: checks with a deadline, the report, and alerts about its problems.

    from cronjobs.health import run_health
    report = run_health(app)          # HealthReport: status ok|warn|fail, checks, problems

`SharedHealth` serves one report to many concurrent callers (the web's probes).
`health_check` registers a check of your own (`custom.py`).
"""

from .check import CHECK_ERROR, EXIT_CODES, Check, HealthReport, Problem
from .custom import HealthCheck, health_check
from .report import health_engine, run_health
from .shared import SharedHealth

__all__ = ["CHECK_ERROR", "EXIT_CODES", "Check", "HealthCheck", "HealthReport", "Problem",
           "SharedHealth", "health_check", "health_engine", "run_health"]
