"""Functions as handlers: `decorator` builds the handler class of a plain function
`fn(payload, job)` (what `@cronjobs.handler(TYPE, ...)` calls) and finds decorated
functions in a module for the registry. Nothing is imported here."""
