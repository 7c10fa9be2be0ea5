"""A job row made and run: `dispatching` writes a row; `executor` holds the pieces a
worker's pool runs rows with (terms, claim, prepare, finish) and `inline` runs one row in
the calling thread with them (`cronjobs run`, `queue.process`, `testing.drain`);
`context` is what a handler reaches while it runs, `outcome` a row's state machine and
`finishing` the writer of outcomes. Nothing is imported here."""
