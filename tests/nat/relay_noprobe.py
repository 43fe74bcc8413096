"""An fmpi-relay without the probe port: ranks cannot tell a symmetric NAT from a cone one and must punch to find out."""

import asyncio
import sys

from fmpi.relay_server.server import RelayServer


async def main(port: int) -> None:
    server = RelayServer("0.0.0.0", port, probe_port=None)
    await server.start()
    print(f"fmpi-relay listening on tcp://0.0.0.0:{port} (no probe port)", flush=True)
    await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1])))
