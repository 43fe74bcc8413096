"""NAT lab for fmpi tests: network namespaces + iptables NAT gateways.

See :mod:`natlab.topology` (``NatLab``, ``natlab_available``, ``cleanup_stale``).
"""
