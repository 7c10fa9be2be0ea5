"""Integrations of cronjobs with other frameworks, each an optional extra
(`cronjobs.contrib.django`: `pip install cronjobs[django]`). Nothing here is imported by
the rest of cronjobs."""
