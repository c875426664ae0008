"""Visual observations a build sends PNG-compressed, decoded to float32 in [0, 1].

A build compresses a camera (or a render texture, or a stack of them) as one or more PNG images
back to back in ``compressed_data`` (API 1.1: concatenated PNGs), each of 3 channels, and says in
``compressed_channel_mapping`` (API 1.2) which channel of the observation each channel of the
images is (``-1``: padding to fill the last image); the channels that map to the same index are
averaged (a grayscale camera is sent as RGB and mapped ``[0, 0, 0]``).  Without a mapping the
first ``channels`` channels are the observation's (one channel: the first image's mean).

The images are (H, W, C); an observation laid out channels-first (package 3.0 and later, told by
its dimension properties) is given (C, H, W).
"""

from __future__ import annotations

import io
import struct
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
from PIL import Image

from evtrain.errors import UnityDataError
from evtrain.unity.specs import ObservationSpec

__all__ = ["PNG_SIGNATURE", "decode_png_observation", "split_pngs"]

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_CHUNK = struct.Struct(">I4s")


def split_pngs(data: bytes) -> list[bytes]:
    """The PNG images written back to back in ``data``, each cut at its ``IEND`` chunk (walking
    the chunks, so a signature's bytes inside the compressed pixels cannot mislead it)."""
    images = []
    start = 0
    view = memoryview(data)
    while start < len(data):
        if data[start : start + 8] != PNG_SIGNATURE:
            raise UnityDataError(
                f"expected a PNG image at byte {start} of a compressed observation "
                f"({len(data)} bytes), found {bytes(view[start : start + 8])!r}"
            )
        at = start + 8
        while True:
            if at + 12 > len(data):
                raise UnityDataError(
                    f"a PNG image of a compressed observation ends early (at byte {at} of "
                    f"{len(data)}, without its IEND chunk)"
                )
            length, kind = _CHUNK.unpack_from(data, at)
            at += 12 + length
            if kind == b"IEND":
                break
        images.append(bytes(view[start:at]))
        start = at
    return images


def _channels(image: bytes) -> npt.NDArray[np.float32]:
    with Image.open(io.BytesIO(image)) as opened:
        pixels = np.asarray(opened)
    if pixels.ndim == 2:
        pixels = pixels[:, :, None]
    scaled: npt.NDArray[np.float32] = pixels.astype(np.float32) * np.float32(1 / 255)
    return scaled


def decode_png_observation(
    data: bytes, mapping: Sequence[int], spec: ObservationSpec
) -> npt.NDArray[np.float32]:
    """One agent's compressed observation ``data`` as an array of ``spec.shape``.

    :param mapping: the observation's ``compressed_channel_mapping`` (empty: none).
    :raises UnityDataError: the images do not decode, or do not make ``spec.shape``.
    """
    try:
        stacked = np.concatenate([_channels(image) for image in split_pngs(data)], axis=2)
    except (OSError, ValueError) as error:
        if isinstance(error, UnityDataError):
            raise
        raise UnityDataError(f"a compressed observation does not decode as PNG: {error}") from error
    channels = spec.channels
    if len(mapping) > 0:
        image = _mapped(stacked, list(mapping))
    elif channels == 1:
        image = stacked[:, :, :3].mean(axis=2, keepdims=True, dtype=np.float32)
    else:
        image = stacked[:, :, :channels]
    if spec.channels_first:
        image = image.transpose(2, 0, 1)
    if image.shape != spec.shape:
        raise UnityDataError(
            f"a compressed observation {spec.name!r} decodes to shape {image.shape}, its spec "
            f"says {spec.shape}"
        )
    return np.ascontiguousarray(image, dtype=np.float32)


def _mapped(stacked: npt.NDArray[np.float32], mapping: list[int]) -> npt.NDArray[np.float32]:
    """The observation's channels: each the mean of the image channels mapped to it."""
    if len(mapping) != stacked.shape[2]:
        raise UnityDataError(
            f"a compressed observation has {stacked.shape[2]} channels in its images but "
            f"{len(mapping)} in its channel mapping {mapping}"
        )
    used = sorted({m for m in mapping if m >= 0})
    if used != list(range(len(used))):
        raise UnityDataError(
            f"a compressed observation's channel mapping {mapping} skips a channel: expected "
            "every index from 0 to its largest"
        )
    index = np.asarray(mapping)
    if all(mapping[i] == i for i in range(len(used))) and (index[len(used) :] < 0).all():
        return stacked[:, :, : len(used)]
    out = np.empty((*stacked.shape[:2], len(used)), dtype=np.float32)
    for channel in used:
        out[:, :, channel] = stacked[:, :, index == channel].mean(axis=2)
    return out
