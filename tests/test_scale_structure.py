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


def test_lengths_fixed_at_the_sequence_keep_the_sequence_whole_and_the_rest_shrinks() -> None:
    """Lengths fixed at 64 in Python mean "the whole sequence" only while the sequence is 64
    long: no factor near 0.125 keeps them, so the sequence is kept at full size (scaling it
    alone breaks the task) and the features shrink."""
    path = scaled_task(TASKS / "fixed_lengths" / "baseline.py", "0.125")
    config = load_task(path)._configs[0]
    assert (config["seq_len"], config["emb_dim"]) == (64, 16)
    (note, *_) = scale_notes(path)
    assert "integer input 1 keeps values up to 64" in note, note
    assert "seq_len kept at full size (scaling it alone breaks the task)" in note, note


def test_a_refusal_names_the_smallest_factor_that_keeps_the_structure() -> None:
    """Every entry of `fixed_batch` breaks the task scaled alone, so none can be kept at
    full size, and no factor within reach of 0.0625 holds: the refusal names the smallest
    factor that loads (0.375: 24 sequences, 16 features)."""
    path = TASKS / "fixed_batch" / "baseline.py"
    with pytest.raises(TaskError, match=r"no factor near 0\.0625 keeps the task's structure "
                       r"either; the smallest factor that keeps it is 0\.375 \(--scale 0\.375\)"):
        scaled_task(path, "0.0625")
    assert load_task(scaled_task(path, "0.375")).scales == (0.375,)  # and it does load


def test_sequences_and_lengths_fixed_in_python_keep_the_batch_and_sequence_whole() -> None:
    """24 sequences of 200 tokens fixed in Python: a batch below 24 cannot be padded and a
    sequence below 256 changes what the lengths mask, so both are kept at full size and
    only the features shrink."""
    path = scaled_task(TASKS / "fixed_sequences" / "baseline.py", "0.125")
    config = load_task(path)._configs[0]
    assert (config["max_seqs"], config["seq_len"], config["emb_dim"]) == (32, 256, 8)
    (note, *_) = scale_notes(path)
    assert "max_seqs, seq_len kept at full size" in note, note


def test_a_page_table_fixed_in_python_keeps_tokens_and_pages_whole_and_shrinks_the_heads(
) -> None:
    """Lengths, query starts and a page table fixed in Python mean the same only where the
    tokens they index and the page size their lengths count in stay whole: those two are
    kept at full size, heads and depth shrink, and the note says so."""
    path = scaled_task(TASKS / "fixed_pages" / "baseline.py", "0.125")
    task = load_task(path)
    config = task._configs[0]
    assert (config["tokens"], config["page_size"]) == (64, 16)
    assert (config["heads"], config["head_dim"]) == (8, 8)
    (note, *_) = scale_notes(path)
    assert "tokens, page_size kept at full size" in note, note
    q, kv, *_ = task.input_specs(0)
    assert q.shape == (64, 8, 8) and kv.shape == (16, 16, 8, 8)
