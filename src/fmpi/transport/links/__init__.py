"""Links between two ranks: the TCP link, its set-up (plan, punch, handshake), shared-memory lanes beside it,
and the fast paths of a thread that holds one."""
