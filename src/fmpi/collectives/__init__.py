"""Collective algorithms, written only against ``Channel`` (point-to-point).

``table.py`` decides which algorithm runs for a given operation, size and
communicator; each algorithm lives in a file named after it.
"""
