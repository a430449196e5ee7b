"""Every bad value a user can give the CLI ends in exactly one `error:` line and exit status 1, before
any model loads: no traceback, no token generated."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from app.cli import main

ROOT = Path(__file__).resolve().parents[2]


def _one_error(capsys, argv: list[str]) -> str:
    code = main(argv)
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert code == 1, captured
    assert len(lines) == 1 and lines[0].startswith("error: "), captured.err
    assert captured.out == ""
    return lines[0]


GENERATE_FLAGS = [
    (["--seed", "-2"], "--seed must be 0 or more"),
    (["--seed", str(2**64)], "--seed must be 0 or more"),
    (["--min-p", "5", "--temp", "1"], "--min-p must be between 0 and 1 (got 5.0)"),
    (["--top-p", "2"], "--top-p must be between 0 and 1"),
    (["--top-k", "-1"], "--top-k must be 0 (off) or more"),
    (["--temp", "nan"], "--temp must be 0 (greedy) or more (got nan)"),
    (["--temp", "inf"], "--temp must be 0"),
    (["--temp", "-1"], "--temp must be 0"),
    (["-n", "0"], "-n/--n-predict must be at least 1 (got 0)"),
    (["-n", "-5"], "-n/--n-predict must be at least 1 (got -5)"),
    (["-n", "ten"], "argument -n/--n-predict: invalid int value: 'ten'"),
    (["--draft-max", "-1"], "--draft-max must be between 0 and 256 (got -1)"),
    (["--draft-min", "-1"], "--draft-min must be 0 or more"),
    (["--draft-p-min", "2"], "--draft-p-min must be between 0 and 1 (got 2.0)"),
    (["--policy", "fastest"], "argument --policy: invalid choice"),
    (["-c", "-5"], "-c/--ctx must be 0"),
    (["-t", "0"], "-t/--threads must be at least 1"),
    (["-ngl", "-3"], "GPU layers must be 'auto', -1 (all) or a number of layers, not -3"),
    (["-md", "d.gguf", "-cd", "-1"], "-cd/--ctx-draft must be 0"),
    (["-md", "d.gguf", "-td", "-4"], "-td/--threads-draft must be at least 1"),
]


@pytest.mark.parametrize("flags, message", GENERATE_FLAGS)
def test_bad_generate_flags(tiny_models, capsys, flags, message):
    line = _one_error(capsys, ["generate", "-m", str(tiny_models.main), "-p", "hi", *flags])
    assert message in line


@pytest.mark.parametrize("content, message", [
    ('{"messages": "hi"}', "must be a non-empty list"),
    ('{"other": []}', "must be a non-empty list"),
    ("[]", "must be a non-empty list"),
    ("[1, 2]", "Message 1 is not"),
    ('[{"role": "user"}]', "Message 1 is not"),
    ('[{"role": "user", "content": ["a"]}]', "Message 1 is not"),
    ('[{"role": "user", "content": "a\\ud800"}]', "content of message 1 is not valid text"),
    ("[{", "cannot read messages from"),
    (b'[{"role": "user", "content": "\xff"}]', "cannot read messages from"),
])
def test_bad_messages_files(tiny_models, tmp_path, capsys, content, message):
    path = tmp_path / "m.json"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    line = _one_error(capsys, ["generate", "-m", str(tiny_models.main), "--messages", str(path)])
    assert message in line


def test_a_missing_messages_file(tiny_models, tmp_path, capsys):
    line = _one_error(capsys, ["generate", "-m", str(tiny_models.main), "--messages", str(tmp_path / "no.json")])
    assert "cannot read messages from" in line and "No such file" in line


def _jsonl(tmp_path, *lines) -> str:
    path = tmp_path / "p.jsonl"
    path.write_bytes(b"\n".join(x if isinstance(x, bytes) else x.encode() for x in lines))
    return str(path)


@pytest.mark.parametrize("lines, flags, message", [
    (['{"prompt": "hi"}'], ["-n", "0"], "-n/--n-predict must be at least 1"),
    (['{"prompt": "hi"}'], ["--repeat", "0"], "--repeat must be at least 1"),
    (['{"prompt": "hi"}'], ["--limit", "0"], "--limit must be at least 1"),
    (['{"prompt": "hi"}'], ["--draft-max", "-1"], "--draft-max must be between"),
    (['{"prompt": "hi"}', "not json"], [], "line 2 is not a prompt"),
    (['["a list"]'], [], "line 1 is not a prompt: it is not a JSON object"),
    (['{"id": "x"}'], [], 'neither "messages" nor a "prompt"'),
    (['{"prompt": 5}'], [], 'neither "messages" nor a "prompt"'),
    (['{"messages": [{"role": "user"}]}'], [], "Message 1 is not"),
    (['{"prompt": "\\udc80"}'], [], "not valid text"),
    ([b'{"prompt": "\xff\xfe"}'], [], "Cannot read prompts from"),
    ([""], [], "No prompts in"),
])
def test_bad_bench_prompts_and_flags(tiny_models, tmp_path, capsys, lines, flags, message):
    line = _one_error(capsys, ["bench", "-m", str(tiny_models.main), "--prompts", _jsonl(tmp_path, *lines), *flags])
    assert message in line


def test_a_missing_bench_file(tiny_models, tmp_path, capsys):
    line = _one_error(capsys, ["bench", "-m", str(tiny_models.main), "--prompts", str(tmp_path / "none.jsonl")])
    assert "Cannot read prompts from" in line and "No such file" in line


def test_unknown_flags_and_missing_arguments_are_one_error_line(capsys):
    assert "unrecognized arguments: --bogus" in _one_error(capsys, ["generate", "-m", "x", "-p", "y", "--bogus"])
    assert "give a main model (-m FILE.gguf)" in _one_error(capsys, ["generate", "-p", "y"])


@pytest.mark.parametrize("argv_bytes", [[b"-p", b"caf\xe9"], [b"--system", b"\xff", b"-p", b"hi"]])
def test_invalid_utf8_on_the_command_line(tiny_models, tmp_path, argv_bytes):
    """Bytes that are not UTF-8 reach Python as lone surrogates: an error, not a crash in the tokenizer."""
    r = subprocess.run([sys.executable.encode(), b"-m", b"app.cli", b"--data-dir", str(tmp_path).encode(),
                        b"generate", b"-m", str(tiny_models.main).encode(), *argv_bytes],
                       capture_output=True, cwd=ROOT, timeout=120, env={"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"})
    err = r.stderr.decode()
    assert r.returncode == 1 and r.stdout == b""
    assert err.startswith("error: ") and err.count("\n") == 1 and "not valid text" in err, err


@pytest.mark.parametrize("command", ["generate", "bench", "serve", "calibrate"])
def test_drafter_and_policy_choices_come_from_the_core(command):
    from app.cli.commands import build_parser
    from app.core.params import DrafterKind, PolicyName

    sub = next(a for a in build_parser()._actions if a.dest == "command").choices[command]
    choices = {a.dest: a.choices for a in sub._actions if a.dest in ("drafter", "policy")}
    assert tuple(choices["drafter"]) == DrafterKind.values()
    assert tuple(choices["policy"]) == PolicyName.values()


def test_an_unknown_drafter_is_one_error_line_naming_the_choices(capsys):
    line = _one_error(capsys, ["generate", "-m", "m.gguf", "-p", "hi", "--drafter", "telepathy"])
    assert "invalid choice: 'telepathy'" in line and "lookup+model" in line
