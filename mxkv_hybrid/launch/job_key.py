"""A job's key: one private key and its self-signed certificate, in one PEM file, that every
relay of the job holds (launch/relay.py). Two relays authenticate each other by both
presenting that certificate in a TLS 1.3 handshake and both requiring it of the peer;
whoever lacks the key cannot finish the handshake. Made with the `cryptography` package;
the TLS is Python's ssl (OpenSSL)."""

import datetime
import os
import ssl
import tempfile
from typing import Optional, Tuple, Union

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.x509.oid import NameOID

from ..atomic_file import write_atomically

VALID_FOR = datetime.timedelta(days=30)  # a job's key outlives any job
# a key derived from a token: the same certificate wherever it is made (these dates, a
# serial from the token, Ed25519's deterministic signature)
DERIVED_VALIDITY = (
    datetime.datetime(2020, 1, 1, tzinfo=datetime.timezone.utc),
    datetime.datetime(2120, 1, 1, tzinfo=datetime.timezone.utc),
)


def make_job_key(path: str, secret: Optional[str] = None) -> None:
    """Writes a job key to `path`, readable by its owner only: a new one, or the one that
    `secret` (a served job's token) derives, so that every launcher holding the token makes
    the same key and certificate, byte for byte, without either crossing the network
    (HKDF-SHA256 to an Ed25519 key)."""
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "mxkv_hybrid job")])
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
    )
    key: Union[ec.EllipticCurvePrivateKey, ed25519.Ed25519PrivateKey]
    if secret is None:
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        certificate = (
            builder.public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + VALID_FOR)
            .sign(key, hashes.SHA256())
        )
    else:
        material = HKDF(
            algorithm=hashes.SHA256(), length=48, salt=None, info=b"mxkv_hybrid job key"
        ).derive(secret.encode())
        key = ed25519.Ed25519PrivateKey.from_private_bytes(material[:32])
        certificate = (
            builder.public_key(key.public_key())
            .serial_number(int.from_bytes(material[32:], "big") >> 1 | 1)
            .not_valid_before(DERIVED_VALIDITY[0])
            .not_valid_after(DERIVED_VALIDITY[1])
            .sign(key, None)
        )
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    write_atomically(path, pem + certificate.public_bytes(serialization.Encoding.PEM))
    os.chmod(path, 0o600)


def job_key_text(secret: Optional[str] = None) -> Tuple[str, ssl.SSLContext]:
    """A job key (as make_job_key makes it) as PEM text, which launchers hand to relays in
    their environment, and a client context holding it; the file it passes through (in a
    directory only its owner can read) is gone on return."""
    with tempfile.TemporaryDirectory(prefix="mxkv-relay-") as directory:
        path = os.path.join(directory, "job.pem")
        make_job_key(path, secret)
        with open(path) as f:
            return f.read(), tls_context(path, server=False)


def tls_context(path: str, server: bool) -> ssl.SSLContext:
    """TLS 1.3 only, presenting the job's certificate and requiring the peer's to be it."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER if server else ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    context.load_cert_chain(path)
    context.load_verify_locations(path)
    context.check_hostname = False  # the peer is identified by the job's certificate alone
    context.verify_mode = ssl.CERT_REQUIRED
    return context
