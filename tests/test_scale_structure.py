"""--scale keeps a task's structure: a factor that breaks it (a group count the channels must
stay a multiple of, a weight sized by one entry and its axis by another) is replaced by the
nearest factor that keeps it, recorded as the scale used and said once."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from kernelgraph.cli import app, load_commands
from tools.api import TaskError, load_task, scale_notes, scaled_task
from tools.correctness.testsuite import build_suite

TASKS = Path(__file__).parent / "scaletasks"
load_commands()


def test_a_factor_that_breaks_a_fixed_group_count_is_replaced_by_the_nearest_that_keeps_it(
) -> None:
    path = scaled_task(TASKS / "groupnorm_fixed_groups" / "baseline.py", "0.125,0.0625")
    task = load_task(path)
    assert task.scales[0] == 0.1875  # 64 * 0.1875 = 12 -> 16 channels: one per group
    assert task._configs[0]["channels"] % 16 == 0
    assert all(c["channels"] % 16 == 0 and c["channels"] >= 16 for c in task._configs)
    (note, *_) = scale_notes(path)
    assert "--scale 0.125 breaks the task's structure" in note and "0.1875" in note
    suite = build_suite(task, seeds=(0,), unseen=False, probes=False)
    assert suite.scales[0] == 0.1875  # the scale used, in the suite (and so the receipt)
    assert any("0.1875, the nearest factor that keeps it" in n for n in suite.notes)


def test_a_factor_that_breaks_sizes_tied_together_is_replaced_and_a_holding_one_is_kept(
) -> None:
    path = scaled_task(TASKS / "layernorm_tied_sizes" / "baseline.py", "0.125")
    task = load_task(path)
    config = task._configs[0]
    assert 2 * config["width"] == config["features"] and task.scales == (task.shapes[0]["scale"],)
    assert task.scales[0] != 0.125 and abs(task.scales[0] - 0.125) <= 0.125
    held = scaled_task(TASKS / "layernorm_tied_sizes" / "baseline.py", "0.5")  # 16 and 32: holds as asked
    assert load_task(held).scales == (0.5,) and scale_notes(held) == ()


def test_the_command_line_says_the_scale_used_once() -> None:
    runner = CliRunner()
    candidate = TASKS.parent / "candidates"
    result = runner.invoke(app, ["estimate", str(TASKS / "groupnorm_fixed_groups"),
                                 str(next(candidate.glob("*.py"))), "--scale", "0.125"])
    assert result.output.count("breaks the task's structure") == 1, result.output
    assert "groupnorm_fixed_groups" in result.output and "kernelgraph-scaled" not in result.output


def test_a_factor_with_no_fit_is_refused_saying_none_keeps_the_structure() -> None:
    path = TASKS / "fixed_lengths" / "baseline.py"  # lengths fixed at 64: the sequence must stay 64
    with pytest.raises(TaskError, match=r"integer input 1 keeps values up to 64.*no factor near "
                       r"0\.125 keeps the task's structure either; the smallest factor that "
                       r"keeps it is 0\.9375") as caught:
        scaled_task(path, "0.125")
    assert "kernelgraph-scaled" not in str(caught.value)  # named as given, not the scaled copy


def test_a_refusal_names_the_smallest_factor_that_keeps_the_structure() -> None:
    """24 sequences of 200 tokens fixed in Python in a batch of 32: a batch below 24 breaks
    the input maker and shorter sequences the lengths, so --scale 0.125 has no fit within
    reach, and the refusal names the smallest factor that loads (0.75: 24 sequences, and
    the feature axis, 16 wide, stays whole)."""
    path = TASKS / "fixed_sequences" / "baseline.py"
    with pytest.raises(TaskError, match=r"no factor near 0\.125 keeps the task's structure "
                       r"either; the smallest factor that keeps it is 0\.75 \(--scale 0\.75\)"):
        scaled_task(path, "0.125")
    assert load_task(scaled_task(path, "0.75")).scales == (0.75,)  # and it does load
