"""Health (SPEC §9): checks with a deadline, the report, and alerts about its problems.

    from cronjobs.health import run_health
    report = run_health(app)          # HealthReport: status ok|warn|fail, checks, problems
"""

from .report import EXIT_CODES, Check, HealthReport, Problem, run_health

__all__ = ["EXIT_CODES", "Check", "HealthReport", "Problem", "run_health"]
