"""The peers' side of `bench.peers`: their no-op jobs and the set-up of their databases.

These modules run under the peer's own interpreter (Oban-py in a Python 3.12 venv the
bench makes, Procrastinate in the project's venv), so they import only the peer and the
standard library — nothing from cronjobs or the rest of `bench`.
"""
