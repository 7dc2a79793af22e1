"""`--help` reads well at 80 columns: whole sentences, metavars that name the value, the
choices listed."""

from __future__ import annotations

import pytest

from gpu_profiler.cli import main

COMMANDS = ["profile", "demo", "backends", "suggest", "schedule", "plan", "compare", "report",
            "merge", "diagnose", "blend"]


def help_text(args, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    with pytest.raises(SystemExit) as exc:
        main([*args, "--help"])
    out, _ = capsys.readouterr()
    assert exc.value.code == 0
    return out


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_fits_80_columns(command, capsys, monkeypatch):
    out = help_text([command], capsys, monkeypatch)
    assert max(map(len, out.splitlines())) <= 80
    shown = out.replace("PATH...", "PATHS")  # click's own notation for several PATHs
    for bad in ("<str>", "<int>", "<bool>", "{path}", "{PATH}", "TEXT", "INTEGER", "..."):
        assert bad not in shown, bad


def test_metavars_and_choices(capsys, monkeypatch):
    out = help_text(["profile"], capsys, monkeypatch)
    for shown in ("Usage: gpu-profiler profile [OPTIONS] PATH",
                  "--format [hf|parquet|ipc|ipc-stream|jsonl|megatron|tokens]",
                  "--save-hist FILE", "--max-seq-len N", "--fail-if EXPR",
                  "-f, --output-format [table|json|csv|markdown]",
                  "-b, --backend [auto|numpy|numba|cuda]"):
        assert shown in out, shown
    out = help_text([], capsys, monkeypatch)  # one whole sentence per command
    listed = out.split("Commands:")[1].splitlines()[1:]
    assert [line.split()[0] for line in listed] == COMMANDS
    assert all(line.endswith(".") for line in listed)


@pytest.mark.parametrize("command", [[], *[[c] for c in COMMANDS]])
def test_dash_h_is_help(command, capsys, monkeypatch):
    """`-h` is `--help` everywhere (it was a usage error)."""
    monkeypatch.setenv("COLUMNS", "80")
    outs = []
    for flag in ("-h", "--help"):
        with pytest.raises(SystemExit) as exc:
            main([*command, flag])
        assert exc.value.code == 0
        outs.append(capsys.readouterr().out)
    assert outs[0] == outs[1] and outs[0].startswith("Usage: gpu-profiler")
