"""Videos of evaluation episodes: the ``evaluation.video`` settings and one function that turns
``rgb_array`` frames into a GIF or an MP4 file, written atomically.

GIF is the default because it always works: Pillow encodes it, and Pillow is installed with
evtrain (TensorBoard needs it too), so no ffmpeg is needed.  MP4 (H.264) is smaller and
smoother but needs PyAV (``av``, whose wheels bundle the ffmpeg libraries): the ``video`` extra
(README.md, "Installing extras").

Memory stays bounded: :func:`write_video` reads at most ``max_frames`` frames (and one more, to
know whether the episode was cut) from any iterable, so a caller that yields frames as an
episode plays holds none of them itself.  An MP4's frames go to the encoder one by one; a GIF's
are kept palettised (one byte a pixel) until the file is written, because Pillow writes a GIF's
frames all at once.
"""

from __future__ import annotations

import io
import itertools
import logging
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Literal

import attrs
import numpy as np
from attrs import validators as v

from evtrain.atomic import atomic_write
from evtrain.extras import install_hint

if TYPE_CHECKING:
    from PIL import Image

logger = logging.getLogger("evtrain.evaluation")

VideoFormat = Literal["gif", "mp4"]

MEDIA_TYPES: dict[str, str] = {".gif": "image/gif", ".mp4": "video/mp4"}
"""The media type of each video file's suffix (:func:`media_type_of`)."""


_positive_int = [v.instance_of(int), v.gt(0)]


@attrs.frozen(kw_only=True)
class VideoSettings:
    """``evaluation.video``: which evaluation episodes are recorded, and how.

    The evaluation environment renders ``rgb_array`` frames (``render_mode="rgb_array"``);
    each recorded episode becomes one file and one ``artifact`` event.
    """

    episodes: int = attrs.field(default=1, validator=_positive_int)
    """How many episodes of an evaluation are recorded (the first ones; at most all of them)."""
    every: int = attrs.field(default=1, validator=_positive_int)
    """Record every n-th evaluation (1: each one; 5: the 1st, 6th, 11th, ...)."""
    fps: int = attrs.field(default=30, validator=_positive_int)
    """Frames a second on playback.  A GIF stores delays in hundredths of a second, so its fps
    is rounded to the nearest delay (30 plays at 33.3 fps), and browsers play delays under
    2/100 s (fps above 50) slower."""
    format: VideoFormat = attrs.field(default="gif", validator=v.in_(("gif", "mp4")))
    """``"gif"`` (Pillow, always installed) or ``"mp4"`` (H.264 through PyAV, the ``video``
    extra)."""
    max_frames: int = attrs.field(default=1000, validator=_positive_int)
    """At most this many frames per episode: a bound on memory and file size.  Later frames are
    not recorded, and the log says so once per video."""
    keep: int = attrs.field(default=10, validator=_positive_int)
    """The videos kept on disk per behavior: the newest ones (by step, then episode); each new
    video removes the oldest beyond it, a bound on what evaluations keep on disk."""

    def recorded(self, evaluation: int, episode: int) -> bool:
        """Whether episode ``episode`` of a behavior's ``evaluation``-th evaluation (both
        counted from 0) is recorded: the first :attr:`episodes` of every :attr:`every`-th."""
        return evaluation % self.every == 0 and episode < self.episodes


def media_type_of(path: Path) -> str:
    """The media type of a video file by its suffix: ``"image/gif"`` or ``"video/mp4"``."""
    try:
        return MEDIA_TYPES[path.suffix.lower()]
    except KeyError:
        known = ", ".join(MEDIA_TYPES)
        problem = f"{path}: no media type for suffix {path.suffix!r} (known: {known})"
        raise ValueError(problem) from None


def write_video(
    frames: Iterable[np.ndarray], path: Path, settings: VideoSettings | None = None
) -> Path:
    """Write ``frames`` (each ``(height, width, 3)`` RGB, or ``(height, width)`` grey, uint8 as
    ``render()`` returns them, all of one size) as a video at ``path`` with the suffix of
    ``settings.format``; returns that path once the file is durable.

    The file is written atomically (:func:`evtrain.atomic.atomic_write`), its folder made if
    missing: a reader sees the whole video or none.  At most ``settings.max_frames`` frames
    are read.  An MP4 drops an odd last row or column (H.264's 4:2:0 colour needs even
    sizes).  Raises :class:`ValueError` for no frames or frames of another shape, and
    :class:`ModuleNotFoundError` naming the install command when ``"mp4"`` is asked and PyAV is
    missing.
    """
    settings = settings or VideoSettings()
    target = Path(path).with_suffix(f".{settings.format}")
    encode = _encode_mp4 if settings.format == "mp4" else _encode_gif
    if settings.format == "mp4":
        _require_av()
    capped = _capped(iter(frames), settings.max_frames, target)
    first = next(capped, None)
    if first is None:
        raise ValueError(f"{target}: no frames to write (the environment rendered none)")
    shape = first.shape
    checked = (_checked(frame, shape, target) for frame in itertools.chain([first], capped))
    target.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(target, lambda file: encode(checked, file, settings))
    return target


# -- frames ----------------------------------------------------------------------------------


def _capped(frames: Iterator[np.ndarray], limit: int, target: Path) -> Iterator[np.ndarray]:
    """The first ``limit`` frames; says once in the log if there were more."""
    yield from itertools.islice(frames, limit)
    if next(frames, None) is not None:
        logger.warning(
            "%s: the episode had more than %d frames; later ones are not in the video "
            "(evaluation.video.max_frames)",
            target,
            limit,
        )


def _checked(frame: np.ndarray, shape: tuple[int, ...], target: Path) -> np.ndarray:
    """``frame`` as a contiguous uint8 RGB array, if it has the first frame's ``shape``."""
    frame = np.asarray(frame)
    if frame.shape != shape or not (frame.ndim == 2 or (frame.ndim == 3 and frame.shape[2] == 3)):
        raise ValueError(
            f"{target}: frames must all be (height, width, 3) RGB or (height, width) grey "
            f"of one size; got {frame.shape} after {shape} (render_mode='rgb_array' returns "
            "them)"
        )
    if frame.ndim == 2:
        frame = np.repeat(frame[:, :, None], 3, axis=2)
    return np.ascontiguousarray(frame, dtype=np.uint8)


# -- GIF (Pillow) ----------------------------------------------------------------------------


def _encode_gif(frames: Iterator[np.ndarray], file: BinaryIO, settings: VideoSettings) -> None:
    """An animated GIF that loops, each frame palettised as it comes (a palette per frame)."""
    from PIL import Image

    images: list[Image.Image] = [_palettised(Image.fromarray(frame)) for frame in frames]
    buffer = io.BytesIO()  # Pillow seeks back in its output; the temp file gets whole bytes
    images[0].save(
        buffer,
        format="GIF",
        save_all=True,
        append_images=images[1:],
        duration=round(1000 / settings.fps),
        loop=0,
    )
    file.write(buffer.getbuffer())


def _palettised(image: Image.Image) -> Image.Image:
    from PIL import Image

    return image.convert("P", palette=Image.Palette.ADAPTIVE, colors=256)


# -- MP4 (PyAV) ------------------------------------------------------------------------------


def _require_av() -> None:
    try:
        import av  # noqa: F401
    except ModuleNotFoundError as error:
        raise ModuleNotFoundError(
            f"evaluation.video.format: 'mp4' needs PyAV, which is not installed; "
            f"{install_hint('video')} (or: pip install av), or use format: gif (no extra "
            "needed)",
            name="av",
        ) from error


def _encode_mp4(frames: Iterator[np.ndarray], file: BinaryIO, settings: VideoSettings) -> None:
    """H.264 in an MP4 container, frames streamed to the encoder as they come."""
    import av

    with av.open(file, mode="w", format="mp4") as container:
        stream: av.VideoStream | None = None
        for frame in frames:
            even = frame[: frame.shape[0] // 2 * 2, : frame.shape[1] // 2 * 2]
            if stream is None:
                stream = container.add_stream("h264", rate=settings.fps)
                stream.height, stream.width = even.shape[:2]
                stream.pix_fmt = "yuv420p"
            video_frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(even), format="rgb24")
            container.mux(stream.encode(video_frame))
        if stream is not None:
            container.mux(stream.encode(None))  # flush the encoder's delayed frames
