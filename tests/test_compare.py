"""`evtrain compare` on runs: folders written by the real TensorBoard, CSV and JSONL writers with
fixed values (the table checked against a hand computation), two real CartPole runs of the CLI
(the table and the PNG, its size read from its header), the errors (docs/compare.md)."""

from __future__ import annotations

import re
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest

from evtrain import StatsSummary
from evtrain.bus.writers import StatsWriter
from evtrain.cli import main
from evtrain.compare.comparison import Settings, compare_group
from evtrain.compare.plot import labels
from evtrain.compare.reading import Series, event_file_damage, read_stat
from evtrain.compare.runs import find_groups
from evtrain.compare.table import curve_table
from evtrain.extras import install_hint
from evtrain_writers.csv_file import CsvWriter
from evtrain_writers.jsonl import JsonlWriter
from evtrain_writers.tensorboard import TensorboardWriter
from tests.helpers import clean_env, evtrain_main, isolated_python, tensorboard_scalars

REWARD = "Environment/Cumulative Reward"
WRITERS: dict[str, type[StatsWriter]] = {
    "tensorboard": TensorboardWriter,
    "csv": CsvWriter,
    "jsonl": JsonlWriter,
}


def write_run(
    folder: Path, final: float, writer: str = "tensorboard", task: str = "CartPole"
) -> None:
    """A run whose reward is ``final / 2`` at step 100 and ``final`` at step 200, written by
    the real writer ``writer`` into ``folder/task``."""
    sink = WRITERS[writer](folder)  # type: ignore[call-arg]
    for step, value in ((100, final / 2), (200, final)):
        values = {
            REWARD: StatsSummary(full_dist=[value]),
            "Policy/Entropy": StatsSummary(full_dist=[0.5]),
        }
        sink.write_stats(task, values, step)
    sink.close()


@pytest.fixture
def results(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``a-1`` .. ``a-4`` of final rewards 1 2 3 4; ``b-1`` .. ``b-3`` of 5 each, read from
    TensorBoard, progress.csv and stats.jsonl respectively; the working folder is ``tmp_path``."""
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "results"
    for seed, final in enumerate([1.0, 2.0, 3.0, 4.0], start=1):
        write_run(folder / f"a-{seed}", final)
    for seed, writer in enumerate(WRITERS, start=1):
        write_run(folder / f"b-{seed}", 5.0, writer)
    return folder


def test_compare_prints_the_hand_computed_aggregates(
    results: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["compare", "results/a-*", "b-*", "--target", "3"]) == 0
    output = capsys.readouterr().out
    assert main(["compare", "results/a-*", "b-*", "--target", "3"]) == 0
    assert capsys.readouterr().out == output  # the same seed (0 by default): the same numbers
    lines = output.splitlines()
    assert lines[:5] == [
        "Environment/Cumulative Reward: final score = each run's last value",
        "IQM, mean, median, optimality gap with 95% confidence intervals: stratified bootstrap "
        "(2000 resamples of the runs within each task, seed 0),",
        'as in Agarwal et al., "Deep Reinforcement Learning at the Edge of the Statistical '
        'Precipice", NeurIPS 2021',
        "",
        "group        runs  tasks     IQM                mean               median"
        "             optimality gap",
    ]
    a_row, b_row = lines[5].split("  "), lines[6]
    # a: scores 1 2 3 4 of one task.  IQM: 1 and 4 dropped, (2 + 3) / 2; mean 10 / 4; median
    # of the one task's mean: 10 / 4;
    # optimality gap to 3: 3 - mean(1, 2, 3, 3) = 0.75.
    cells = [cell.strip() for cell in a_row if cell.strip()]
    assert cells[:3] == ["results/a-*", "4", "CartPole"]
    # Each interval within what any resample can give: scores of 1 to 4, gaps of 0 to 2.
    expected = [(2.5, 1.0, 4.0), (2.5, 1.0, 4.0), (2.5, 1.0, 4.0), (0.75, 0.0, 2.0)]
    for cell, (value, least, most) in zip(cells[3:], expected, strict=True):
        point, low, high = (
            float(x) for x in cell.replace("[", "").replace("]", "").replace(",", "").split()
        )
        assert point == value and least <= low < value < high <= most
    # b: every run at 5 (from TensorBoard, progress.csv, stats.jsonl): no spread; 5 >= 3: no gap.
    assert b_row == (
        "b-*             3  CartPole  5.00 [5.00, 5.00]  5.00 [5.00, 5.00]  5.00 [5.00, 5.00]"
        "  0.00 [0.00, 0.00]"
    )
    # Another group, or another order, changes nothing of a group's numbers: own generator.
    assert main(["compare", "b-*", "results/a-*", "--target", "3"]) == 0
    assert capsys.readouterr().out.splitlines()[6].split() == lines[5].split()
    curve_of_b = lines[lines.index("Learning curve of b-* (mean of 3 curves, 95% interval):") :]
    assert curve_of_b[1:] == [
        "step  mean  interval",
        " 100  2.50  [2.50, 2.50]",
        " 200  5.00  [5.00, 5.00]",
    ]


def test_a_stat_is_read_from_tensorboard_then_progress_csv_then_stats_jsonl(results: Path) -> None:
    both = results / "both"
    write_run(both, 8.0, "csv")
    write_run(both, 6.0, "tensorboard")
    found = read_stat(both / "CartPole", REWARD)
    assert found.source == both / "CartPole" and found.points == {100: 3.0, 200: 6.0}
    assert (
        read_stat(results / "b-2" / "CartPole", REWARD).source
        == results / "b-2" / "CartPole" / "progress.csv"
    )
    assert (
        read_stat(results / "b-3" / "CartPole", REWARD).source
        == results / "b-3" / "CartPole" / "stats.jsonl"
    )
    missing = read_stat(both / "CartPole", "Losses/Policy Loss")
    assert missing.source is None and missing.keys == {REWARD, "Policy/Entropy"}
    for writer in ("csv", "jsonl"):  # NaN: "nan" in progress.csv, null in stats.jsonl
        sink = WRITERS[writer](results / f"nan-{writer}")  # type: ignore[call-arg]
        for step, value in ((100, 1.0), (200, float("nan")), (300, 3.0)):
            sink.write_stats("CartPole", {REWARD: StatsSummary(full_dist=[value])}, step)
        sink.close()
        assert read_stat(results / f"nan-{writer}" / "CartPole", REWARD).points == {
            100: 1.0,
            300: 3.0,
        }


def test_a_resumed_runs_points_are_those_tensorboard_shows(results: Path) -> None:
    # A run killed after step 300 and resumed from its checkpoint of step 100: the resumed
    # writer's first summary (step 200) purges what the killed one wrote from there on.
    killed = TensorboardWriter(results / "resumed")
    for step in (100, 200, 300):
        killed.write_stats("CartPole", {REWARD: StatsSummary(full_dist=[step / 100])}, step)
    killed.close()
    resumed = TensorboardWriter(results / "resumed")
    resumed.write_stats("CartPole", {REWARD: StatsSummary(full_dist=[20.0])}, 200)
    resumed.close()
    found = read_stat(results / "resumed" / "CartPole", REWARD)
    assert found.points == {100: 1.0, 200: 20.0}


def test_a_damaged_event_file_is_named_and_the_intact_progress_csv_read_instead(
    results: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    # Rewards 3 at step 100 and 6 at step 200, in both TensorBoard and progress.csv; a byte of
    # the event file's last record flipped: TensorBoard reads step 100 alone, whose 3 was
    # reported before as the final score, without a word.
    for run, writers in (("d-1", ("tensorboard", "csv")), ("d-2", ("tensorboard",))):
        for writer in writers:
            write_run(results / run, 6.0, writer)
        (event_file,) = (results / run / "CartPole").glob("events.out.tfevents*")
        damaged = bytearray(event_file.read_bytes())
        damaged[-5] ^= 0xFF  # in the last record's data, before its checksum
        event_file.write_bytes(bytes(damaged))
    where = f"at byte {_last_record_start(damaged):,} of "
    assert main(["compare", "d-1"]) == 0
    assert capsys.readouterr().out.splitlines()[5].startswith("d-1       1  CartPole  6.00 [")
    (event_file,) = (results / "d-1" / "CartPole").glob("events.out.tfevents*")
    assert caplog.messages == [
        f"{event_file.relative_to(results.parent)}: damaged TensorBoard event file (a record's "
        f"data fails its checksum {where}{len(damaged):,}); {REWARD!r} read from "
        "results/d-1/CartPole/progress.csv instead"
    ]
    caplog.clear()
    # With no other file holding the stat, TensorBoard's points are used, and said to be cut.
    assert main(["compare", "d-2"]) == 0
    assert capsys.readouterr().out.splitlines()[5].startswith("d-2       1  CartPole  3.00 [")
    (event_file,) = (results / "d-2" / "CartPole").glob("events.out.tfevents*")
    assert caplog.messages == [
        f"{event_file.relative_to(results.parent)}: damaged TensorBoard event file (a record's "
        f"data fails its checksum {where}{len(damaged):,}); no other file of "
        f"results/d-2/CartPole holds {REWARD!r}: the points TensorBoard reads before the "
        "damage (1) are used"
    ]
    # A file that ends inside a record (TensorBoard, too, reads only the records before).
    cut = results / "cut.tfevents"
    last = _last_record_start(damaged)
    cut.write_bytes(damaged[:-3])
    assert event_file_damage(cut) == (
        f"cut short inside a record at byte {last:,} of {len(damaged) - 3:,}"
    )
    cut.write_bytes(damaged[: last + 5])
    assert event_file_damage(cut) == (
        f"cut short inside a record header at byte {last:,} of {last + 5:,}"
    )


def _last_record_start(data: bytes | bytearray) -> int:
    """Where the last record of a TFRecord file starts: each is its data's length (8 bytes),
    that length's checksum (4), the data, the data's checksum (4)."""
    offset, start = 0, 0
    while offset < len(data):
        start = offset
        (length,) = struct.unpack("<Q", data[offset : offset + 8])
        offset += 8 + 4 + length + 4
    return start


def test_unreadable_rows_of_csv_and_jsonl_are_named_and_the_runs_still_compared(
    results: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    # Every run has reward 1 at step 100 and 2 at step 200, among rows that cannot be read.
    folder = results / "e-1" / "CartPole"
    folder.mkdir(parents=True)
    (folder / "progress.csv").write_bytes(
        f"step,{REWARD}\n100,1.0\ninf,50\n".encode()
        + b"\xff\xfe,7\n"  # not UTF-8
        + b"1e300,9\nnan,9\n200,2.0\n"
    )
    folder = results / "e-2" / "CartPole"
    folder.mkdir(parents=True)
    huge = "9" * 200_000  # over the csv module's field limit of 131,072 characters
    (folder / "progress.csv").write_text(f"step,{REWARD}\n100,1.0\n{huge},{huge}\n200,2.0\n")
    folder = results / "e-3" / "CartPole"
    folder.mkdir(parents=True)

    def line(step: str) -> str:
        return f'{{"step": {step}, "stats": {{"{REWARD}": {{"value": {int(step) // 100}}}}}}}'

    rows = [
        line("100").encode(),
        b"[" * 100_000 + b"]" * 100_000,  # deeper than json's recursion limit
        line("200").replace("200", "1e300", 1).encode(),
        b"\xff",  # not UTF-8
        b"{not json",
        line("200").encode(),
        b'{"step": 3',  # the last line, torn: a run killed while writing
    ]
    (folder / "stats.jsonl").write_bytes(b"\n".join(rows))
    assert main(["compare", "e-*"]) == 0
    assert capsys.readouterr().out.splitlines()[5].startswith("e-*       3  CartPole  2.00 [")
    limit = "0 to 9,007,199,254,740,992"
    assert caplog.messages == [
        f"results/e-1/CartPole/progress.csv: row 3: step 'inf' is not a whole number from "
        f"{limit}; skipped, and 3 more rows that cannot be read",
        "results/e-2/CartPole/progress.csv: row 3: not a CSV row (field larger than field "
        "limit (131072)); skipped",
        "results/e-3/CartPole/stats.jsonl: row 2: JSON nested too deep to be a summary; "
        "skipped, and 3 more rows that cannot be read",
    ]
    # Each kind named as such where it comes first: here, bytes that are not UTF-8.
    folder = results / "f-1" / "CartPole"
    folder.mkdir(parents=True)
    (folder / "progress.csv").write_bytes(f"step,{REWARD}\n100,1.0\n".encode() + b"\xff\xfe,7\n")
    assert read_stat(folder, REWARD).warnings == (
        f"{folder / 'progress.csv'}: row 3: not UTF-8 text (invalid start byte at byte 0); skipped",
    )


def test_group_by_takes_the_first_parenthesised_group_of_the_run_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for run in ("ppo-seed1", "sac-seed1", "ppo-seed2"):
        write_run(tmp_path / "results" / run, 1.0)
    (tmp_path / "results" / "plots").mkdir()  # not a run: a glob leaves it out
    groups = find_groups(["results/*"], Path("results"), r"^(.*)-seed\d+$")
    assert [(g.name, [r.name for r in g.runs]) for g in groups] == [
        ("ppo", ["ppo-seed1", "ppo-seed2"]),
        ("sac", ["sac-seed1"]),
    ]


def test_each_behavior_of_a_run_is_a_task(
    results: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for seed, final in ((1, 1.0), (2, 2.0)):
        write_run(results / f"m-{seed}", final, task="Attacker")
        write_run(results / f"m-{seed}", 10 * final, task="Defender")
    assert main(["compare", "m-*"]) == 0
    # Scores 1 2 (Attacker) and 10 20 (Defender): task means 1.5 and 15, their mean (and
    # median, of two tasks) 8.25; IQM of 1 2 10 20 pooled: (2 + 10) / 2.  Each resample draws
    # two of each task, so its IQM, the mean of its best attacker and its worst defender, is
    # between (1 + 10) / 2 and (2 + 20) / 2, and reaches both (1 / 16 and 3 / 16 of the
    # resamples: more than the 2.5 % in each tail); its mean and median, of task means 1 to 2
    # and 10 to 20, too (1 / 16 of the resamples at each end).
    assert capsys.readouterr().out.splitlines()[5] == (
        "m-*       2  Attacker, Defender  6.00 [5.50, 11.00]  8.25 [5.50, 11.00]"
        "  8.25 [5.50, 11.00]"
    )
    assert main(["compare", "m-*", "--behavior", "Defender"]) == 0
    assert capsys.readouterr().out.splitlines()[5] == (
        "m-*       2  Defender  15.00 [10.00, 20.00]  15.00 [10.00, 20.00]  15.00 [10.00, 20.00]"
    )


def test_a_curve_prints_ten_of_its_steps_and_says_when_runs_share_none() -> None:
    settings = Settings(stat=REWARD, reps=10)
    steps = np.arange(0, 2000, 100)  # 20 steps
    long = Series(run="a", task="T", source=Path("a"), steps=steps, values=steps / 100.0)
    lines = curve_table(compare_group("long", [long], settings), settings)
    assert [line.split()[0] for line in lines[2:]] == [
        "0", "200", "400", "600", "800", "1,100", "1,300", "1,500", "1,700", "1,900",
    ]  # fmt: skip
    late = Series(run="b", task="T", source=Path("b"), steps=steps + 5000, values=steps / 1.0)
    lines = curve_table(compare_group("apart", [long, late], settings), settings)
    assert lines == [
        "Learning curve of apart (mean of 2 curves, 95% interval): none, its runs share no steps"
    ]


def test_group_by_groups_the_runs_of_every_argument_by_their_run_ids(
    results: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["compare", "results/*", "--group-by", r"^(\w)-\d$", "--last", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert (
        lines[0]
        == "Environment/Cumulative Reward: final score = each run's mean of its last 2 values"
    )
    # a: scores (0.5 + 1) / 2 .. (2 + 4) / 2 = 0.75 1.5 2.25 3, median (1.5 + 2.25) / 2
    assert lines[5].startswith("a         4  CartPole  1.88 [")
    assert lines[6].startswith("b         3  CartPole  3.75 [3.75, 3.75]")


def test_compare_errors_name_the_argument_and_the_fix(
    results: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def error(*args: str) -> str:
        assert main(["compare", *args]) == 2
        printed = capsys.readouterr()
        assert printed.out == ""
        return printed.err.strip()

    assert error("c-*") == (
        "evtrain: error: RUN_OR_GLOB 'c-*': no folder matches it, as a path or under "
        "--results-dir 'results'; give a run folder, a run id under --results-dir, or a glob "
        "of them in quotes (e.g. 'results/ppo-*')"
    )
    assert error("results") == (
        "evtrain: error: RUN_OR_GLOB 'results': 'results' is not a run folder (none of its "
        "folders holds TensorBoard event files, progress.csv or stats.jsonl); the folders in it "
        "are runs: give 'results/*'"
    )
    assert error("results/a-1/*") == (
        "evtrain: error: RUN_OR_GLOB 'results/a-1/*': none of the folders it matches is a run "
        "folder (none of their folders holds TensorBoard event files, progress.csv or "
        "stats.jsonl): 'results/a-1/CartPole'"
    )
    assert error("a-1", "--stat", "Losses/Value Loss") == (
        "evtrain: error: --stat 'Losses/Value Loss': run 'results/a-1' holds no value of it "
        "(TensorBoard, progress.csv, stats.jsonl); the stats it holds: "
        "'Environment/Cumulative Reward', 'Policy/Entropy'"
    )
    assert error("a-1", "b-1", "--behavior", "Pendulum") == (
        "evtrain: error: --behavior 'Pendulum': run 'results/a-1' has no such behavior; its "
        "behaviors: CartPole\n--behavior 'Pendulum': run 'results/b-1' has no such behavior; "
        "its behaviors: CartPole"
    )
    assert error("a-*", "--group-by", r"a-[12]") == (
        "evtrain: error: --group-by 'a-[12]': the run ids 'a-3', 'a-4' do not match it; every "
        "run needs a group (its first parenthesised group, or the whole match): widen the "
        "expression or leave those runs out"
    )
    assert error("a-*", "--output", "curves.jpg") == (
        "evtrain: error: --output 'curves.jpg': expected a .png, .svg or .pdf file, e.g. curves.png"
    )


def test_compare_sizes_past_their_limits_are_refused_naming_the_option(
    results: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # --reps 50000000 took 21 GB before, and was killed for memory.
    for reps, expected in (
        ("50000000", "expected a whole number from 1 to 100,000, got 50000000"),
        ("0", "expected a whole number from 1 to 100,000, got 0"),
        (
            "9" * 5000,
            f"expected a whole number of at most 20 digits, got one of 5,000 digits ({'9' * 20}…)",
        ),
    ):
        with pytest.raises(SystemExit) as exited:
            main(["compare", "a-*", "--reps", reps])
        assert exited.value.code == 2
        printed = capsys.readouterr()
        assert printed.out == ""
        assert (
            printed.err.splitlines()[-1] == f"evtrain compare: error: argument --reps: {expected}"
        )
    for option in ("--last", "--seed"):
        with pytest.raises(SystemExit):
            main(["compare", "a-*", option, "9" * 5000])
        assert capsys.readouterr().err.splitlines()[-1] == (
            f"evtrain compare: error: argument {option}: expected a whole number of at most 20 "
            f"digits, got one of 5,000 digits ({'9' * 20}…)"
        )
    assert main(["compare", "a-*", "--reps", "100000"]) == 0
    assert "(100000 resamples of the runs" in capsys.readouterr().out


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from a PNG's header: the signature, then the IHDR chunk."""
    header = path.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n" and header[12:16] == b"IHDR"
    width, height = struct.unpack(">II", header[16:24])
    return width, height


def test_the_figure_is_a_png_svg_or_pdf_with_readable_names_and_visible_zero_width_intervals(
    results: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from matplotlib.image import imread

    for name in ("curves.png", "curves.svg", "curves.pdf"):
        assert main(["compare", "results/a-*", "b-*", "--target", "3", "--output", name]) == 0
        assert capsys.readouterr().out.splitlines()[-1] == f"Plot: {name}"
    assert png_size(results.parent / "curves.png") == (1200, 500)
    svg = (results.parent / "curves.svg").read_text()
    assert svg.startswith('<?xml version="1.0" encoding="utf-8" standalone="no"?>')
    assert "<svg " in svg[:400]
    # Text kept as text, the groups named 'a' and 'b' (legend, labels), not by their globs.
    texts = re.findall(r"<text[^>]*>([^<]*)</text>", svg)
    assert texts.count("a") == texts.count("b") == 2  # the legend's and the first panel's
    assert not any("*" in text for text in texts)
    pdf = (results.parent / "curves.pdf").read_bytes()
    assert pdf.startswith(b"%PDF-") and pdf.rstrip().endswith(b"%%EOF")
    assert b"CreationDate" not in pdf  # the same runs, the same file
    # b's intervals have zero width (every run at 5): each aggregate panel, right of the
    # curves, still shows b's estimate in b's colour (matplotlib's second, #ff7f0e).
    pixels = imread(results.parent / "curves.png")[:, 520:, :3]
    orange = np.all(np.abs(pixels - np.asarray([1.0, 0.498, 0.055])) < 0.02, axis=-1)
    columns = np.nonzero(orange.any(axis=0))[0]
    assert len(columns) and 1 + np.count_nonzero(np.diff(columns) > 20) == 4  # four panels


def test_group_labels_drop_the_glob_and_keep_the_name() -> None:
    assert labels(["results/ppo-*", "results/sac-seed?", "a-[12]", "results/cp-1", "td3."]) == [
        "ppo",
        "sac-seed",
        "a",
        "cp-1",
        "td3.",  # neither a path nor a glob: as it is
    ]
    # Names that would be alike, or empty, are kept as given.
    assert labels(["results/ppo-*", "old/ppo-*"]) == ["results/ppo-*", "old/ppo-*"]
    assert labels(["results/*", "b-*"]) == ["results/*", "b-*"]


def evtrain(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [isolated_python(), "-m", "evtrain", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
        check=False,
        env=clean_env(),
    )


CARTPOLE = """\
behaviors:
  CartPole:
    trainer_type: ppo
    hyperparameters: {batch_size: 64, buffer_size: 128, num_epoch: 2}
    network_settings: {hidden_units: 16}
    max_steps: 512
    time_horizon: 32
    summary_freq: 128
    checkpoint_interval: 512
env_settings: {env_id: CartPole-v1, num_envs: 4}
"""


def test_compare_two_real_cartpole_runs_prints_the_table_and_draws_the_png(tmp_path: Path) -> None:
    (tmp_path / "cartpole.yaml").write_text(CARTPOLE)
    for seed in (1, 2):
        run = evtrain_main(  # the runs in process, the compare of them a real one
            "learn", "cartpole.yaml", "--run-id", f"cp-{seed}", "--seed", str(seed), cwd=tmp_path
        )
        assert run.returncode == 0, run.stderr
    finals = [
        tensorboard_scalars(tmp_path / "results" / f"cp-{s}" / "CartPole", REWARD)[-1][1]
        for s in (1, 2)
    ]
    compared = evtrain("compare", "cp-*", "--output", "plots/curves.png", cwd=tmp_path)
    assert compared.returncode == 0, compared.stderr
    lines = compared.stdout.splitlines()
    # Two runs: none dropped from the IQM; the median of two is their mean too.
    both = f"{sum(finals) / 2:.2f} ["
    row = lines[5]
    assert row.startswith("cp-*      2  CartPole  " + both) and row.count(both) == 3
    curve = lines[lines.index("Learning curve of cp-* (mean of 2 curves, 95% interval):") + 1 :]
    assert [line.split()[0] for line in curve[1:5]] == ["128", "256", "384", "512"]
    assert lines[-1] == "Plot: plots/curves.png"
    assert png_size(tmp_path / "plots" / "curves.png") == (1200, 500)


def test_without_matplotlib_the_table_is_printed_and_the_png_refused(results: Path) -> None:
    # matplotlib made unimportable in the child, as where the plot extra is not installed.
    code = (
        "import sys; sys.modules['matplotlib'] = None; from evtrain.cli import main; "
        "sys.exit(main(['compare', 'a-*', '--output', 'curves.png']))"
    )
    done = subprocess.run(
        [isolated_python(), "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=clean_env(),
        cwd=results.parent,
    )
    assert done.returncode == 1
    assert done.stdout.splitlines()[5].startswith("a-*       4  CartPole  2.50 [")
    assert done.stderr == (
        "evtrain: error: --output 'curves.png': drawing the figure needs matplotlib, which is "
        f"not installed; {install_hint('plot')} (the table above is complete without it)\n"
    )
    assert not (results.parent / "curves.png").exists()
