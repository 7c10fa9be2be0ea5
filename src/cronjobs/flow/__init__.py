"""Flow control above the store: `rules` (a handler's and a queue's limits, parsed and
checked) and `state` (limits, pauses, blocks and held rows as an operator sees them). The
claim applies them in `cronjobs.store`. Nothing is imported here."""
