"""The TFRecord checksum, in C: what evtrain's TensorBoard writer frames each record with
(``evtrain_writers.tfrecord``) and what ``evtrain compare`` checks an event file's records
against (:mod:`evtrain.compare.reading`).  TensorBoard's own is pure Python, about a hundred
times slower.
"""

from __future__ import annotations

import google_crc32c

crc32c = google_crc32c.value
"""crc32c (Castagnoli) of a bytes-like object, unmasked: Google's C code."""


def masked_crc32c(data: bytes | bytearray | memoryview) -> int:
    """The TFRecord checksum of ``data``: crc32c (Castagnoli), rotated and offset."""
    crc: int = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF
