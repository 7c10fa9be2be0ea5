"""Families: a root row and every row dispatched under it (`root_id`), as one run.

A family completes once per generation, decided in the transaction that finishes its
last row (`settle`), which starts the root handler's callbacks (`callbacks`)."""
