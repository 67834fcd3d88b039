"""Benchmarks that print figures (``make bench`` or ``python -m bench``)."""
