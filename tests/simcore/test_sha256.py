"""``simcore._sha256.sha256`` (imported instead of ``hashlib`` to skip OpenSSL's start-up) gives hashlib's digests.

The step model's memo keys (``simcore/perf/step.py``) are file names built from these digests, so a different digest
would silently orphan every cached table; these cases compare it with ``hashlib.sha256`` on the inputs that matter.
"""
import hashlib
import random

from simcore._sha256 import sha256


def test_known_vector_of_fips_180_2():
    # FIPS 180-2, appendix B.1: SHA-256("abc")
    assert sha256(b"abc").hexdigest() == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"


def test_empty_input_and_block_boundaries_match_hashlib():
    # 55, 56 and 64 bytes straddle the padding boundary of a 64-byte block
    for size in (0, 1, 55, 56, 63, 64, 65, 119, 120, 128, 1000):
        data = bytes(range(256)) * (size // 256 + 1)
        data = data[:size]
        assert sha256(data).hexdigest() == hashlib.sha256(data).hexdigest(), size


def test_incremental_updates_and_the_step_model_key_form_match_hashlib():
    rng = random.Random(20261201)
    for _ in range(200):
        parts = [rng.randbytes(rng.randrange(0, 300)) for _ in range(rng.randrange(1, 5))]
        ours, theirs = sha256(), hashlib.sha256()
        for part in parts:
            ours.update(part)
            theirs.update(part)
        assert ours.hexdigest() == theirs.hexdigest()
    key = "0123456789ab:fedcba987654".encode()  # f"{profile.profile_hash}:{digest}", step.py
    assert sha256(key).hexdigest()[:12] == hashlib.sha256(key).hexdigest()[:12]
