"""scripts/gpu/measure.py stops with the tool's log when a tool fails or prints no figure (never a 0 in
a table), and its stages run end to end on tiny shapes. CI runs the whole rehearsal with llama.cpp's
real tools (.ci/run); here the tools are stand-ins that print what a broken or renamed tool would."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def measure():
    spec = importlib.util.spec_from_file_location("gpu_measure", ROOT / "scripts" / "gpu" / "measure.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_measure"] = module
    spec.loader.exec_module(module)
    return module


def fake_tool(folder: Path, name: str, script: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text("#!/usr/bin/env bash\n" + script)
    path.chmod(0o755)


def rehearsal(measure, tmp_path: Path, tools: Path):
    plan = dataclasses.replace(measure.Plan.for_machine(cpu=True), draft_lengths=(2,), n_predict=8)
    run = measure.Run(plan, tmp_path / "work", tmp_path / "out", tmp_path / "builds")
    run.tools = tools
    return run


SPEC_SIMPLE_OK = """echo "encoded   20 tokens in    0.010 seconds, speed: 2000.000 t/s" >&2
echo "decoded    9 tokens in    0.100 seconds, speed:   90.000 t/s" >&2
echo "accept    = 100.000%" >&2
"""


def test_a_speed_line_that_cannot_be_read_stops_the_run_with_the_tools_log(measure, tmp_path):
    tools = tmp_path / "bin"
    fake_tool(tools, "llama-speculative-simple", 'echo "decoded 9 tokens, speed: fast" >&2\n')
    run = rehearsal(measure, tmp_path, tools)
    with pytest.raises(measure.StageError, match="no decoding speed") as stopped:
        measure.stage_race(run)
    assert "decoded 9 tokens, speed: fast" in str(stopped.value)   # the log's tail goes with it
    assert "race" not in run.results                                # nothing recorded, no 0


def test_a_flag_the_tool_refuses_stops_the_run_with_the_tools_message(measure, tmp_path):
    """llama.cpp's argument parser exits 1 on a flag it does not know (or no longer knows)."""
    tools = tmp_path / "bin"
    fake_tool(tools, "llama-speculative-simple",
              'for a in "$@"; do [ "$a" = --spec-draft-n-max ] || continue; '
              'echo "error: invalid argument: --spec-draft-n-max" >&2; exit 1; done\n')
    run = rehearsal(measure, tmp_path, tools)
    with pytest.raises(measure.StageError, match="exited with 1") as stopped:
        measure.stage_race(run)
    assert "invalid argument: --spec-draft-n-max" in str(stopped.value)
    log = (run.out / "logs" / "race-llama-2.log").read_text()
    assert "--spec-type draft-simple --spec-draft-n-max 2 --spec-draft-n-min 0" in log


def test_the_race_reads_both_speeds_and_the_driver_writes_its_tables(measure, tmp_path):
    tools = tmp_path / "bin"
    fake_tool(tools, "llama-speculative-simple", SPEC_SIMPLE_OK)
    fake_tool(tools, "llama-bench", "echo '[{\"n_gen\": 8, \"avg_ts\": 123.5}]'\n")
    run = rehearsal(measure, tmp_path, tools)
    assert measure.drive(run, ["race", "plain"], deadline=None) == 0
    [row] = run.results["race"]
    assert row["llama_tps"] == 90.0 and row["llama_acceptance"] == 1.0
    assert row["ours_tps"] > 0 and row["ours_acceptance"] == 1.0   # its own draft: every token accepted
    assert run.results["plain"]["llama_bench_tps"] == 123.5
    stages = json.loads((run.out / "stages.json").read_text())
    assert [s["stage"] for s in stages] == ["race", "plain"] and all(s["status"] == "ok" for s in stages)
    table = (run.out / "summary.md").read_text()
    assert "| 2 | " in table and "| 90.0 |" in table and "123.5" in table


def test_a_stage_past_the_deadline_is_not_started_and_says_so(measure, tmp_path):
    run = rehearsal(measure, tmp_path, tmp_path / "bin")
    assert measure.drive(run, ["race"], deadline=-1) == 0
    [stage] = json.loads((run.out / "stages.json").read_text())
    assert stage["status"].startswith("not started (") and "race" not in run.results


def test_the_product_flags_are_setup_shs_with_one_cpu_module_and_the_tools(measure):
    flags = measure.product_flags(measure.Plan.for_machine(cpu=True))
    assert flags.startswith("-DGGML_BACKEND_DL=ON ") and flags.index("-DGGML_CPU_ALL_VARIANTS=ON") \
        < flags.index("-DGGML_CPU_ALL_VARIANTS=OFF")   # CMake takes the last
    assert "-DLLAMA_BUILD_TOOLS=ON" in flags and "-DLLAVA_BUILD=OFF" in flags


def test_only_the_wheels_for_this_python_are_laid_out(measure, tmp_path):
    names = ["gguf-0.19.0-py3-none-any.whl", "pyyaml-6.0.3-cp310-cp310-manylinux2014_x86_64.whl",
             f"pyyaml-6.0.3-cp{sys.version_info.major}{sys.version_info.minor}-cp{sys.version_info.major}"
             f"{sys.version_info.minor}-manylinux2014_x86_64.whl"]
    for name in names:
        (tmp_path / name).write_bytes(b"")
    chosen = [w.name for w in measure.compatible_wheels(tmp_path)]
    assert names[0] in chosen and names[2] in chosen and (names[1] in chosen) == (sys.version_info[:2] == (3, 10))


def test_the_doctor_names_the_native_function_a_process_crashed_in(measure, tmp_path):
    """The preloaded handler prints the native frames of a crash, and the doctor reads them back (the
    first GPU run segfaulted inside llama.cpp with only Python's frames to show for it)."""
    import shutil
    import subprocess

    import doctor  # beside measure.py, which put its folder on sys.path

    if not (shutil.which("cc") or shutil.which("gcc")):
        pytest.skip("no C compiler to build the fault handler")
    handler = doctor.compile_handler(tmp_path)
    crashed = subprocess.run([sys.executable, "-c", "import ctypes; ctypes.string_at(1)"], capture_output=True,
                             text=True, env={"LD_PRELOAD": str(handler), "PATH": "/usr/bin:/bin"})
    assert crashed.returncode == -11
    frames = doctor.native_frames(crashed.stderr)
    assert frames and "strlen" in frames[0]
    assert any("string_at" in f for f in frames)


def test_a_load_that_crashes_fails_the_doctor_stage_with_its_frame(measure, tmp_path, monkeypatch):
    import doctor

    run = rehearsal(measure, tmp_path, tmp_path / "tools")
    run.site = tmp_path / "site"
    report = {"handler": True, "llama-bench": {"exit": 0, "what": "llama.cpp's own llama-bench"},
              "cpu": {"exit": 0, "what": "cpu"},
              "gpu": {"exit": -11, "what": "the plainest load with every layer on the GPU",
                      "native_frames": ["libllama.so +0x1234 llama_model::print_info() const"]}}
    monkeypatch.setattr(doctor, "diagnose", lambda *a, **k: report)
    monkeypatch.setattr(measure.Run, "model", lambda self, key: tmp_path / f"{key}.gguf")
    with pytest.raises(measure.StageError, match=r"gpu \(the plainest load.*\), in libllama.so \+0x1234 llama_model::print_info"):
        measure.stage_doctor(run)
    assert run.results["doctor"] is report


def test_a_crash_that_a_fix_stops_lets_the_run_go_on_under_it(measure, tmp_path, monkeypatch):
    import doctor

    run = rehearsal(measure, tmp_path, tmp_path / "tools")
    run.site = tmp_path / "site"
    crash = {"exit": -11, "what": "the plainest load with every layer on the GPU"}
    report = {"handler": True, "llama-bench": {"exit": 0, "what": "llama.cpp's own llama-bench"},
              "cpu": {"exit": 0, "what": "cpu"}, "gpu": crash, "gpu-quickdraft": crash,
              "fixes": {"same-c++-runtime": {"exit": -11, "env": {"LD_PRELOAD": "/lib/libstdc++.so.6"}},
                        "one-blas-thread": {"exit": 0, "env": {"OPENBLAS_NUM_THREADS": "1"}}}}
    monkeypatch.setattr(doctor, "diagnose", lambda *a, **k: report)
    monkeypatch.setattr(measure.Run, "model", lambda self, key: tmp_path / f"{key}.gguf")
    measure.stage_doctor(run)
    assert run.env()["OPENBLAS_NUM_THREADS"] == "1"
    assert run.results["fix"]["crashed_without"] == ["gpu", "gpu-quickdraft"]
    assert "one-blas-thread" in measure.summary_markdown(run.results, "a GPU")


def test_a_build_made_elsewhere_for_the_same_flags_is_unpacked_instead_of_compiled(measure, tmp_path, monkeypatch):
    import tarfile

    repo = tmp_path / "repo"
    sources = tmp_path / "llama_cpp_python-0.0.0" / "llama_cpp"
    sources.mkdir(parents=True)
    (sources / "__init__.py").write_text("")
    (repo / ".gpu" / "prebuilt").mkdir(parents=True)
    with tarfile.open(repo / ".gpu" / "llama-src.tar.gz", "w:gz") as tar:
        tar.add(sources.parent, arcname=sources.parent.name)
    (repo / ".gpu" / "llama-src.sha256").write_text("abc\n")
    (repo / ".gpu" / "wheels").mkdir()
    lib = tmp_path / "libllama.so"
    lib.write_bytes(b"\x7fELF")
    monkeypatch.setattr(measure, "REPO", repo)
    monkeypatch.setattr(measure, "product_flags", lambda plan: "-DFLAGS=1")
    monkeypatch.setattr(measure, "compile_tree", lambda *a, **k: pytest.fail("compiled instead of unpacking"))
    run = rehearsal(measure, tmp_path, tmp_path / "tools")
    key = measure.hashlib.sha256(f"abc -DFLAGS=1 {' '.join(measure.TOOLS)}".encode()).hexdigest()[:16]
    root_txt = tmp_path / "root.txt"
    root_txt.write_text(f"{tmp_path / 'elsewhere' / key}\n")
    with tarfile.open(repo / ".gpu" / "prebuilt" / f"{key}.tar.xz", "w:xz") as tar:
        tar.add(root_txt, arcname="root.txt")
        tar.add(lib, arcname="bin/libllama.so")
    assert not measure.prebuilt_fits(repo / ".gpu" / "prebuilt" / f"{key}.tar.xz", tmp_path / "builds" / key)
    root_txt.write_text(f"{tmp_path / 'builds' / key}\n")   # built in the folder this run builds in
    with tarfile.open(repo / ".gpu" / "prebuilt" / f"{key}.tar.xz", "w:xz") as tar:
        tar.add(root_txt, arcname="root.txt")
        tar.add(lib, arcname="bin/libllama.so")
    measure.stage_build(run)
    assert (run.site / "llama_cpp" / "lib" / "libllama.so").read_bytes() == b"\x7fELF"
    assert run.tools == tmp_path / "builds" / key / "build" / "bin"


def test_pack_carries_every_dependency_the_gpu_machine_runs():
    """The GPU machine reaches no package index: a dependency pack.sh leaves out fails there and nowhere
    else (the slots stage's server found no uvicorn). Only these are not needed there or come with it."""
    import re
    import tomllib

    not_carried = {"llama-cpp-python",    # built there, from the sources pack.sh carries
                   "numpy",               # the machine's Python has it
                   "PySide6-Essentials", "PySide6-Addons", "qasync", "Pygments",   # the window
                   "huggingface-hub"}     # downloads: the models are made there
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    names = {re.split(r"[=<>;\s]", d, maxsplit=1)[0] for d in dependencies}
    pack = (ROOT / "scripts" / "gpu" / "pack.sh").read_text()
    missing = sorted(n for n in names - not_carried if f"$(pin {n})" not in pack)
    assert not missing, f"pack.sh carries no wheel of {missing}"


def test_a_build_cut_short_goes_on_in_its_folder_with_its_sources(measure, tmp_path, monkeypatch):
    """A stopped --prebuild resumes: the same sources are not unpacked again (new file times made ninja
    start over); other sources are."""
    import tarfile

    repo = tmp_path / "repo"
    sources = tmp_path / "llama_cpp_python-0.0.0"
    sources.mkdir()
    (sources / "CMakeLists.txt").write_text("")
    (repo / ".gpu").mkdir(parents=True)
    with tarfile.open(repo / ".gpu" / "llama-src.tar.gz", "w:gz") as tar:
        tar.add(sources, arcname=sources.name)
    (repo / ".gpu" / "llama-src.sha256").write_text("abc\n")
    monkeypatch.setattr(measure, "REPO", repo)
    ran = []
    run = rehearsal(measure, tmp_path, tmp_path / "tools")
    monkeypatch.setattr(run, "run", lambda name, command, timeout=None: ran.append(name))
    root = tmp_path / "builds" / "key"
    measure.compile_tree(run, root, "-DFLAGS=1")
    compiled = root / "build" / "object.o"   # what the first build left
    compiled.parent.mkdir(parents=True)
    compiled.write_text("")
    measure.compile_tree(run, root, "-DFLAGS=1")
    assert compiled.exists() and ran == ["cmake-configure", "cmake-build"] * 2
    (repo / ".gpu" / "llama-src.sha256").write_text("other\n")
    measure.compile_tree(run, root, "-DFLAGS=1")
    assert not compiled.exists()
