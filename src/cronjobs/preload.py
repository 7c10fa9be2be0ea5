"""Imported by the job processes' fork server only (`runner`'s preload list): builds the
preloaded App there once (`jobprocess.preload`), before any job process is forked."""

from .jobprocess import preload

preload()
