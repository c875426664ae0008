"""Videos of evaluation episodes (:mod:`evtrain.evaluation.video`): GIF through Pillow, MP4
through PyAV, read back with the same libraries; bounded frames, atomic files, clear errors."""

from __future__ import annotations

import contextlib
import io
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import av
import gymnasium as gym
import numpy as np
import pytest
from PIL import Image

from evtrain.config.converter import structure
from evtrain.errors import ConfigError
from evtrain.evaluation.video import VideoSettings, media_type_of, write_video
from evtrain.extras import install_hint
from tests.helpers import ROOT

COLOURS = [(255, 0, 0), (0, 255, 0), (0, 0, 255), (255, 255, 0), (0, 255, 255)]


def coloured(height: int = 24, width: int = 32) -> list[np.ndarray]:
    """One frame of each of :data:`COLOURS`, so no two frames are alike (a GIF merges repeats)."""
    return [np.full((height, width, 3), colour, np.uint8) for colour in COLOURS]


def test_a_gif_holds_every_frame_in_order_at_the_asked_speed(tmp_path: Path) -> None:
    path = write_video(coloured(), tmp_path / "episode-0", VideoSettings(fps=20))

    assert path == tmp_path / "episode-0.gif"
    assert media_type_of(path) == "image/gif"
    with Image.open(path) as image:
        assert (image.format, image.size, image.n_frames) == ("GIF", (32, 24), 5)
        assert image.info["loop"] == 0  # plays on repeat
        for index, colour in enumerate(COLOURS):
            image.seek(index)
            assert image.info["duration"] == 50  # 1000 ms / 20 fps
            assert image.convert("RGB").getpixel((5, 5)) == colour


def test_an_mp4_decodes_to_the_frames_size_count_and_rate(tmp_path: Path) -> None:
    settings = VideoSettings(format="mp4", fps=25)
    path = write_video(coloured(height=25, width=33), tmp_path / "episode-0.gif", settings)

    assert path == tmp_path / "episode-0.mp4"
    assert media_type_of(path) == "video/mp4"
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        assert stream.codec_context.name == "h264"
        assert stream.average_rate == 25
        decoded = [frame.to_ndarray(format="rgb24") for frame in container.decode(stream)]
    assert [frame.shape for frame in decoded] == [(24, 32, 3)] * 5  # odd last row/column gone
    for frame, colour in zip(decoded, COLOURS, strict=True):
        assert np.abs(frame[12, 16].astype(int) - colour).max() < 16  # lossy, but that colour


@pytest.mark.parametrize("video_format", ["gif", "mp4"])
def test_a_rendered_cartpole_episode_becomes_a_video(tmp_path: Path, video_format: str) -> None:
    env = gym.make("CartPole-v1", render_mode="rgb_array")

    rendered = 0

    def episode() -> Iterator[np.ndarray]:
        nonlocal rendered
        env.reset(seed=3)
        done = False
        while not done:
            rendered += 1
            yield env.render()  # type: ignore[misc]
            _, _, terminated, truncated, _ = env.step(rendered % 2)
            done = terminated or truncated

    settings = VideoSettings(format=video_format)  # type: ignore[arg-type]
    path = write_video(episode(), tmp_path / "cartpole", settings)
    env.close()

    if video_format == "gif":
        with Image.open(path) as image:
            assert image.size == (600, 400)
            assert 1 < image.n_frames <= rendered  # still frames merge into one
    else:
        with av.open(str(path)) as container:
            frames = list(container.decode(video=0))
        assert (len(frames), frames[0].width, frames[0].height) == (rendered, 600, 400)


@pytest.mark.parametrize("video_format", ["gif", "mp4"])
def test_frames_past_max_frames_are_neither_read_nor_kept_and_the_log_says_so_once(
    tmp_path: Path, video_format: str, caplog: pytest.LogCaptureFixture
) -> None:
    pulled = 0

    def endless() -> Iterator[np.ndarray]:
        nonlocal pulled
        while True:
            pulled += 1
            yield np.full((16, 16, 3), pulled * 7 % 256, np.uint8)

    settings = VideoSettings(format=video_format, max_frames=10)  # type: ignore[arg-type]
    path = write_video(endless(), tmp_path / "long", settings)

    assert pulled == 11  # ten frames, and one to learn that the episode went on
    if video_format == "gif":
        with Image.open(path) as image:
            assert image.n_frames == 10
    else:
        with av.open(str(path)) as container:
            assert sum(1 for _ in container.decode(video=0)) == 10
    [message] = [r.getMessage() for r in caplog.records if "max_frames" in r.getMessage()]
    assert message == (
        f"{path}: the episode had more than 10 frames; later ones are not in the video "
        "(evaluation.video.max_frames)"
    )


def test_grey_frames_are_written_as_rgb(tmp_path: Path) -> None:
    frames = [np.full((8, 8), value, np.uint8) for value in (0, 128, 255)]
    path = write_video(frames, tmp_path / "grey", VideoSettings())

    with Image.open(path) as image:
        image.seek(1)
        assert image.convert("RGB").getpixel((0, 0)) == (128, 128, 128)


def test_a_bad_frame_leaves_no_file_behind(tmp_path: Path) -> None:
    frames = [*coloured()[:2], np.zeros((10, 10, 3), np.uint8)]

    with pytest.raises(ValueError, match=r"got \(10, 10, 3\) after \(24, 32, 3\)"):
        write_video(frames, tmp_path / "broken", VideoSettings())
    assert list(tmp_path.iterdir()) == []  # neither the video nor its temporary file


def test_no_frames_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no frames to write"):
        write_video([], tmp_path / "empty", VideoSettings())


def test_mp4_without_pyav_names_the_install_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "av", None)  # what `import av` meets when it is absent

    with pytest.raises(ModuleNotFoundError) as raised:
        write_video(coloured(), tmp_path / "episode", VideoSettings(format="mp4"))
    assert install_hint("video") in str(raised.value)
    assert "format: gif" in str(raised.value)
    assert list(tmp_path.iterdir()) == []


def test_media_types_by_suffix() -> None:
    assert media_type_of(Path("a/b.GIF")) == "image/gif"
    with pytest.raises(ValueError, match=r"no media type for suffix '\.webm'"):
        media_type_of(Path("clip.webm"))


def test_the_first_episodes_of_every_nth_evaluation_are_recorded() -> None:
    settings = VideoSettings(episodes=2, every=5)
    recorded = [(e, i) for e in range(12) for i in range(4) if settings.recorded(e, i)]
    assert recorded == [(0, 0), (0, 1), (5, 0), (5, 1), (10, 0), (10, 1)]


def test_video_settings_from_yaml_data_name_the_bad_key() -> None:
    settings = structure({"episodes": 2, "every": 5, "format": "mp4"}, VideoSettings)
    assert settings == VideoSettings(episodes=2, every=5, fps=30, format="mp4", max_frames=1000)

    with pytest.raises(ConfigError) as raised:
        structure({"format": "webm"}, VideoSettings, root="evaluation.video")
    assert raised.value.problems == (
        "evaluation.video.format: expected one of 'gif', 'mp4', got 'webm'",
    )
    with pytest.raises(ConfigError) as raised:
        structure({"fps": 0}, VideoSettings, root="evaluation.video")
    assert raised.value.problems == ("evaluation.video.fps: must be > 0, got 0",)


def test_the_docs_example_writes_a_gif(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    doc = (ROOT / "docs" / "video.md").read_text()
    [example] = re.findall(r"^```python\n(.*?)^```$", doc, re.DOTALL | re.MULTILINE)
    monkeypatch.chdir(tmp_path)

    with contextlib.redirect_stdout(io.StringIO()) as out:
        exec(compile(example, "docs/video.md", "exec"), {})
    assert out.getvalue() == "videos/episode-0.gif image/gif\n"
    with Image.open(tmp_path / "videos" / "episode-0.gif") as image:
        assert image.size == (600, 400)
        delays = []
        for index in range(image.n_frames):
            image.seek(index)
            delays.append(image.info["duration"])
    assert delays and all(delay % 20 == 0 for delay in delays)  # 50 fps; repeats merged
