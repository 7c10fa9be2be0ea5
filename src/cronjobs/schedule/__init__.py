"""Schedules: `slots` (which slot an instant is in), `scheduler` (the tick and its loop),
`overlap` (a slot while the previous run goes on), `tasks` (the task list and its switch),
`taskrows` (the task list as shown) and `manual` (Run now). The public names are
re-exported by `cronjobs.scheduler` and `cronjobs.tasks`. Nothing is imported here."""
