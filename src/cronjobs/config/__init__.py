"""Settings: one typed object built at the edge from `CRONJOBS_*` variables and `cronjobs.toml`.

Environment variables win over the TOML file. Unknown variables and keys are errors with a
"did you mean" hint, so a typo never silently falls back to a default.

- `settings`: `Settings`, every field with its default, bounds and description (the
  configuration reference is generated from it), its validators and `Settings.load()`;
- `sections`: the sections of `Settings` (`settings.dashboard`, `.uptime`, `.tls`, `.backup`,
  `.health`, `.alerts`), one model each, whose fields keep their flat keys
  (`alert_smtp_to`) as aliases;
- `tables`: the TOML tables with fields of their own (`[tasks.<task>]`: `TaskSettings`,
  `[queues.<queue>]`: `QueueSettings`, `[[uptime_checks]]`: `UptimeCheck`);
- `urls`: the database and broker URLs cronjobs accepts, and what to write instead;
- `sources`: reading the variables and the TOML file, with the "did you mean" hints.

Import the names from here (`from cronjobs.config import Settings`).
"""

from .sections import (
    SECTIONS,
    AlertSettings,
    BackupSettings,
    DashboardSettings,
    HealthSettings,
    Section,
    TlsSettings,
    UptimeSettings,
)
from .settings import Settings
from .sources import ENV_PREFIX
from .tables import QueueSettings, TaskSettings, UptimeCheck
from .urls import (
    AMQP_SCHEMES,
    DATABASE_SCHEME_FOR,
    MEMORY_BROKER,
    REDIS_SCHEMES,
    SUPPORTED_DATABASE_SCHEMES,
)

__all__ = ["AMQP_SCHEMES", "DATABASE_SCHEME_FOR", "ENV_PREFIX", "MEMORY_BROKER", "SECTIONS",
           "AlertSettings", "BackupSettings", "DashboardSettings", "HealthSettings",
           "QueueSettings", "REDIS_SCHEMES", "SUPPORTED_DATABASE_SCHEMES", "Section", "Settings",
           "TaskSettings", "TlsSettings", "UptimeCheck", "UptimeSettings"]
