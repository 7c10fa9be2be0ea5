"""Built-in handlers, one class per file, each file named after its class.

They are written as a plugin's handlers would be: they import only the public API
(`cronjobs`: `CronJobHandler`, `Job`, `RetryLater`, `CronjobsError`; `cronjobs.handler`,
`cronjobs.errors`, `cronjobs.queue`, `cronjobs.i18n`, `cronjobs.summary`) and the helper
modules they wrap (`cronjobs.tlscert`, `cronjobs.store.backup`, `cronjobs.health`), which the
import contract `handlers-public-api` of pyproject.toml checks.
"""
