"""What the TLS tests share (fmpi-relay over tls://, Redis over rediss://): a throwaway PKI made with `cryptography`, and a job."""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path


def make_pki(directory: Path) -> dict[str, Path]:
    """A CA, a relay certificate it signed (SAN 127.0.0.1, localhost), and an unrelated CA."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)

    def name(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    def ca(cn: str):
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (
            x509.CertificateBuilder().subject_name(name(cn)).issuer_name(name(cn)).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256())
        )
        return key, cert

    ca_key, ca_cert = ca("fmpi test CA")
    _, other_cert = ca("some other CA")
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder().subject_name(name("fmpi-relay")).issuer_name(ca_cert.subject).public_key(key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    paths = {name: directory / f"{name}.pem" for name in ("ca", "other_ca", "cert", "key")}
    paths["ca"].write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    paths["other_ca"].write_bytes(other_cert.public_bytes(serialization.Encoding.PEM))
    paths["cert"].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths["key"].write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return paths


JOB = """
import zlib
import numpy as np
from mpi4py import MPI
c = MPI.COMM_WORLD
r, n = c.rank, c.size
x = np.arange(300_000, dtype=np.float64) * (r + 1)   # 2.4 MB: many FORWARD chunks, many TLS records
total = c.allreduce(x, op=MPI.SUM)
assert np.array_equal(total, np.arange(300_000, dtype=np.float64) * (n * (n + 1) // 2))
c.Bcast(x, root=0)
assert np.array_equal(x, np.arange(300_000, dtype=np.float64))
got = c.alltoall([bytes([r]) * (1000 * (d + 1)) for d in range(n)])
assert got == [bytes([s]) * (1000 * (r + 1)) for s in range(n)]
for i in range(200):  # many small messages each way
    c.send(i, dest=(r + 1) % n)
    assert c.recv(source=(r - 1) % n) == i
c.barrier()
print(f"rank {r} ok {zlib.crc32(total.tobytes())}")
"""
