"""Bearer secrets (API keys, node tokens): random, shown once, stored as SHA-256.

The secrets are 256-bit random strings, so a fast hash is enough (no password stretching
needed); the prefix makes a key findable without scanning and recognisable in logs.
"""

import hashlib
import hmac
import secrets


def digest(plain: str) -> str:
    return hashlib.sha256(plain.encode()).hexdigest()


def new_secret(kind: str) -> tuple[str, str, str]:
    """Returns (plain, prefix, digest) for a new secret like `tdm_ab12cd34_<random>`."""
    prefix = secrets.token_hex(4)
    plain = f"{kind}_{prefix}_{secrets.token_urlsafe(32)}"
    return plain, prefix, digest(plain)


def split_prefix(plain: str, kind: str) -> str | None:
    parts = plain.split("_", 2)
    if len(parts) != 3 or parts[0] != kind or len(parts[1]) != 8:
        return None
    return parts[1]


def same(a: str, b: str) -> bool:
    """Constant-time equality; bytes, because compare_digest raises on non-ASCII str (a bearer
    token is whatever the client sent)."""
    return hmac.compare_digest(
        a.encode("utf-8", "surrogatepass"), b.encode("utf-8", "surrogatepass")
    )
