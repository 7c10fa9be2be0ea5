"""What an operator does to rows: `operator` (one row: retry, cancel, stop; lift a pause or
a block), `bulk` (many rows, recorded) and `selection` (which rows a bulk operation is
about). Nothing is imported here."""
