"""Built-in handlers, one class per file, each file named after its class."""
