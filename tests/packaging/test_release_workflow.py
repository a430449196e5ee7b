"""The release workflow, read without running it: which builds it makes on which runner, with which
llama.cpp flags and toolkits, what it checks in each build, and that the release gets every installer.
Also the variant knobs of the installer scripts it drives (build_deb.sh's QUICKDRAFT_DEB_VARIANT,
quickdraft.iss's Variant define), and that their file names are the ones the workflow uploads."""

from __future__ import annotations

import fnmatch
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from app import __version__

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / ".github" / "workflows" / "release.yml"
BUILD_DEB = ROOT / "packaging" / "linux" / "build_deb.sh"
ISS = ROOT / "packaging" / "windows" / "quickdraft.iss"
BUILD_JOBS = {"linux": "ubuntu", "windows": "windows", "macos": "macos"}
DYNAMIC_BACKENDS = ["-DGGML_BACKEND_DL=ON", "-DGGML_CPU_ALL_VARIANTS=ON", "-DGGML_NATIVE=OFF",
                    "-DCMAKE_INSTALL_BINDIR=llama_cpp/lib"]
CUDA_RUNTIME = {"linux": ["libcudart.so.12", "libcublas.so.12", "libcublasLt.so.12"],
                "windows": ["cudart64_12.dll", "cublas64_12.dll", "cublasLt64_12.dll"]}

needs_bash = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


@pytest.fixture(scope="module")
def workflow() -> dict:
    return yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def jobs(workflow) -> dict:
    return workflow["jobs"]


def legs(job: dict) -> list[dict]:
    """The job's matrix entries (one empty entry for a job without a matrix)."""
    return job.get("strategy", {}).get("matrix", {}).get("include") or [{}]


def resolve(text: str, leg: dict) -> str:
    """${{ matrix.NAME }} replaced by the leg's value (enough for the expressions this workflow uses)."""
    return re.sub(r"\$\{\{\s*matrix\.(\w+)\s*\}\}", lambda m: str(leg.get(m.group(1), "")), str(text))


def runs_in(job: dict, leg: dict) -> list[dict]:
    """The steps that run in this leg: a step's `if: matrix.X` (or matrix.X == 'v') is evaluated."""
    steps = []
    for step in job["steps"]:
        condition = str(step.get("if", "")).strip()
        match = re.fullmatch(r"matrix\.(\w+)(?:\s*==\s*'([^']*)')?", condition)
        if match:
            value = leg.get(match.group(1))
            if not (value if match.group(2) is None else value == match.group(2)):
                continue
        steps.append(step)
    return steps


def step_text(step: dict, leg: dict) -> str:
    with_ = " ".join(f"{k}={v}" for k, v in (step.get("with") or {}).items())
    return resolve(" ".join([str(step.get("name", "")), str(step.get("uses", "")), with_,
                             str(step.get("run", ""))]), leg)


def job_text(job: dict, leg: dict) -> str:
    """Every step of the leg, as text, with shell line continuations joined."""
    return "\n".join(step_text(step, leg) for step in runs_in(job, leg)).replace("\\\n", " ")


def cmake_args(job: dict, leg: dict) -> list[str]:
    return resolve(job.get("env", {}).get("CMAKE_ARGS", ""), leg).split()


def installer_globs(job: dict, leg: dict) -> list[str]:
    """Where the leg's installer upload step takes its files from."""
    uploads = [step for step in runs_in(job, leg) if "upload-artifact" in str(step.get("uses", ""))
               and resolve(step["with"]["name"], leg).startswith("quickdraft-")]
    assert len(uploads) == 1, "one installer upload per build"
    return resolve(uploads[0]["with"]["path"], leg).split()


# --- the build jobs ----------------------------------------------------------------------------


def test_each_os_builds_on_its_own_runner(jobs):
    for name, runner in BUILD_JOBS.items():
        assert jobs[name]["runs-on"].startswith(runner), name
    assert jobs["macos"]["runs-on"] in ("macos-14", "macos-15")   # Apple Silicon runners


@pytest.mark.parametrize("name", BUILD_JOBS)
def test_every_build_bundles_smoke_tests_and_uploads(jobs, name):
    for leg in legs(jobs[name]):
        text = job_text(jobs[name], leg)
        assert "packaging/quickdraft.spec" in text and "upload-artifact" in text, leg
        smoke_runs = re.findall(r"smoke_test\.py", text)
        # the bundle, and on Linux and Windows the installed app too
        assert len(smoke_runs) >= (1 if name == "macos" else 2), (name, leg.get("variant"))


@pytest.mark.parametrize("name", ["linux", "windows"])
def test_linux_and_windows_build_a_vulkan_and_a_cuda_artifact(jobs, name):
    assert sorted(leg.get("variant") for leg in legs(jobs[name])) == ["cuda", "vulkan"]
    assert jobs[name]["strategy"].get("fail-fast") is False   # a CUDA failure must not cancel the other


@pytest.mark.parametrize("name", ["linux", "windows"])
def test_every_linux_and_windows_artifact_has_the_cpu_variants_and_vulkan(jobs, name):
    for leg in legs(jobs[name]):
        args = cmake_args(jobs[name], leg)
        for flag in DYNAMIC_BACKENDS + ["-DGGML_VULKAN=ON"]:
            assert flag in args, (leg["variant"], flag)
        assert ("-DGGML_CUDA=ON" in args) is (leg["variant"] == "cuda")


@pytest.mark.parametrize("name", ["linux", "windows"])
def test_cuda_artifacts_build_cuda_12_for_a_fixed_list_of_gpus(jobs, name):
    leg = next(leg for leg in legs(jobs[name]) if leg["variant"] == "cuda")
    assert re.fullmatch(r"12\.\d+\.\d+", leg["cuda"]), leg["cuda"]
    archs = [arg.split("=", 1)[1] for arg in cmake_args(jobs[name], leg)
             if arg.startswith("-DCMAKE_CUDA_ARCHITECTURES=")]
    assert len(archs) == 1 and "native" not in archs[0]
    numbers = {int(re.match(r"\d+", arch).group()) for arch in archs[0].split(";")}
    assert {75, 80, 86, 89, 90} <= numbers   # Turing, Ampere, Ada, Hopper (RTX 20/30/40, A100, H100)
    # Pascal and Volta (GTX 10, Titan V) as PTX the driver compiles: without them the CUDA module loads
    # on such a card, the app prefers it over Vulkan, and the first kernel fails
    assert {"61-virtual", "70-virtual"} <= set(archs[0].split(";"))
    toolkit = [step for step in runs_in(jobs[name], leg) if re.match(r"CUDA .*toolkit", str(step.get("name", "")))]
    assert len(toolkit) == 1 and str(toolkit[0].get("if")) == "matrix.cuda"
    assert "${{ matrix.cuda }}" in str(toolkit[0].get("with", {}).get("cuda", "")) + str(toolkit[0].get("env", {}))
    vulkan = next(leg for leg in legs(jobs[name]) if leg["variant"] == "vulkan")
    assert toolkit[0] not in runs_in(jobs[name], vulkan)


def test_both_cuda_builds_target_the_same_gpus(jobs):
    archs = [[arg for arg in cmake_args(jobs[name], leg) if "CUDA_ARCHITECTURES" in arg]
             for name in ("linux", "windows") for leg in legs(jobs[name]) if leg["variant"] == "cuda"]
    assert len(archs) == 2 and archs[0] == archs[1]
    assert len({leg["cuda"] for name in ("linux", "windows") for leg in legs(jobs[name])
                if leg["variant"] == "cuda"}) == 1


@pytest.mark.parametrize("name", ["linux", "windows"])
def test_the_cuda_builds_check_the_runtime_libraries_are_bundled(jobs, name):
    for leg in legs(jobs[name]):
        needs = resolve("${{ matrix.bundle_needs }}", leg).split()
        check = [step for step in runs_in(jobs[name], leg) if step.get("shell") == "python"
                 and "CHECK_BUNDLE_PY" in str(step.get("run"))]
        assert len(check) == 1 and check[0]["env"]["BUNDLE_NEEDS"] == "${{ matrix.bundle_needs }}"
        module = "libggml-vulkan.so" if name == "linux" else "ggml-vulkan.dll"
        assert module in needs
        for library in CUDA_RUNTIME[name] + ["libggml-cuda.so" if name == "linux" else "ggml-cuda.dll"]:
            matched = any(fnmatch.fnmatch(library, pattern) for pattern in needs)
            assert matched is (leg["variant"] == "cuda"), (leg["variant"], library)


def test_the_bundle_check_refuses_gpu_driver_libraries(workflow):
    script = workflow["env"]["CHECK_BUNDLE_PY"]
    compile(script, "CHECK_BUNDLE_PY", "exec")
    for driver in ("libvulkan.so", "libcuda.so", "libnvidia-", "vulkan-1.dll", "nvcuda.dll"):
        assert driver in script


def test_llama_cpp_python_is_built_from_source_with_the_jobs_flags(jobs):
    for name in BUILD_JOBS:
        for leg in legs(jobs[name]):
            text = job_text(jobs[name], leg)
            build = re.search(r"pip install (.*)\$\{?llama", text)
            assert build, (name, leg.get("variant"))
            for option in ("--no-binary llama-cpp-python", "--no-cache-dir", "--force-reinstall"):
                assert option in build.group(1), (name, option)
            assert text.index("--no-binary llama-cpp-python") < text.index('pip install -e ".[packaging]"')
            assert "CMAKE_ARGS" in jobs[name]["env"]


def test_macos_builds_metal_by_default(workflow, jobs):
    assert "-DGGML_METAL=ON" in cmake_args(jobs["macos"], {})
    assert "-DGGML_METAL=OFF" not in WORKFLOW.read_text(encoding="utf-8")
    trigger = workflow.get("on", workflow.get(True))   # PyYAML reads the key `on` as True
    assert "v*" in trigger["push"]["tags"]


def test_linux_smoke_tests_load_vulkan_on_lavapipe_and_nobody_expects_cuda(jobs):
    linux = jobs["linux"]
    assert str(linux["env"]["GGML_VK_VISIBLE_DEVICES"]) == "0"
    for leg in legs(linux):
        text = job_text(linux, leg)
        assert "mesa-vulkan-drivers" in text
        runs = [line for line in text.splitlines() if "smoke_test.py" in line]
        assert len(runs) == 2 and all("--expect-backend Vulkan" in run for run in runs), runs
    whole = WORKFLOW.read_text(encoding="utf-8")
    assert not re.search(r"--expect-backend\s+CUDA", whole)   # hosted runners have no GPU


def test_the_vulkan_sdk_is_new_enough(workflow, jobs):
    version = tuple(int(n) for n in workflow["env"]["VULKAN_SDK_VERSION"].split("."))
    assert version >= (1, 3, 275)   # headers with VK_EXT_layer_settings
    assert re.fullmatch(r"[0-9a-f]{64}", workflow["env"]["VULKAN_SDK_LINUX_SHA256"])
    for name in ("linux", "windows"):
        for leg in legs(jobs[name]):
            text = job_text(jobs[name], leg)
            assert "VULKAN_SDK_VERSION" in text and "VULKAN_SDK=" in text, name


def test_every_build_reports_its_sizes(jobs):
    for name in BUILD_JOBS:
        for leg in legs(jobs[name]):
            text = job_text(jobs[name], leg)
            assert "du -h" in text and "GITHUB_STEP_SUMMARY" in text, name


# --- the release ---------------------------------------------------------------------------------


def test_the_release_needs_every_build_and_attaches_every_installer(jobs):
    release = jobs["release"]
    assert set(release["needs"]) == set(jobs) - {"release"} == set(BUILD_JOBS)
    download = next(step for step in release["steps"] if "download-artifact" in str(step.get("uses")))
    pattern = download["with"]["pattern"]
    names = [resolve(step["with"]["name"], leg) for name in BUILD_JOBS for leg in legs(jobs[name])
             for step in runs_in(jobs[name], leg) if "upload-artifact" in str(step.get("uses"))]
    installers = [n for n in names if fnmatch.fnmatch(n, pattern)]
    assert len(installers) == len(set(installers)) == 5, installers   # 2 Linux, 2 Windows, 1 macOS
    assert not [n for n in names if n.startswith("smoke-") and fnmatch.fnmatch(n, pattern)]
    assert download["with"].get("merge-multiple") is True
    assert "installers/*" in " ".join(str(step.get("run", "")) for step in release["steps"])
    assert "tags/v" in release["if"]


def test_only_the_release_job_may_write_to_the_repository(workflow, jobs):
    """The build jobs run third-party actions (the CUDA installer, the MSVC prompt): read-only token."""
    assert workflow["permissions"] == {"contents": "read"}
    assert jobs["release"]["permissions"] == {"contents": "write"}
    assert all("permissions" not in jobs[name] for name in BUILD_JOBS)


# --- the installers' names -----------------------------------------------------------------------


def deb_name(variant: str | None) -> str:
    env = {"PATH": "/usr/bin:/bin"} | ({"QUICKDRAFT_DEB_VARIANT": variant} if variant else {})
    done = subprocess.run(["bash", "-c", f'source "{BUILD_DEB}" && deb_file_name "$1" amd64', "_", __version__],
                          capture_output=True, text=True, env=env, check=True)
    return done.stdout.strip()


@needs_bash
def test_linux_artifact_names_come_from_build_deb(jobs):
    linux = jobs["linux"]
    names = {}
    for leg in legs(linux):
        variant = resolve(linux["env"]["QUICKDRAFT_DEB_VARIANT"], leg)
        names[leg["variant"]] = deb_name(variant)
        assert any(fnmatch.fnmatch(f"dist/{names[leg['variant']]}", glob) for glob in installer_globs(linux, leg))
        assert names[leg["variant"]].startswith(f"{leg['package']}_")
    assert names == {"vulkan": f"quickdraft_{__version__}_amd64.deb",
                     "cuda": f"quickdraft-cuda_{__version__}_amd64.deb"}
    # each glob takes its own build's file only
    vulkan = next(leg for leg in legs(linux) if leg["variant"] == "vulkan")
    assert not any(fnmatch.fnmatch(f"dist/{names['cuda']}", glob) for glob in installer_globs(linux, vulkan))


def iss_output_name(variant: str | None) -> str:
    """OutputBaseFilename as ISPP writes it for /DAppVersion=<version> [/DVariant=<variant>]: the
    script's own #ifdef Variant block, read and applied."""
    iss = ISS.read_text(encoding="utf-8")
    block = re.search(r"^#ifdef Variant\n(.*?)^#else\n(.*?)^#endif", iss, re.M | re.S)
    assert block, "an #ifdef Variant ... #else ... #endif block"
    defines = block.group(1) if variant else block.group(2)
    suffix = re.search(r'#define VariantSuffix (.*)', defines).group(1).strip()
    value = "".join(variant if part.strip() == "Variant" else part.strip().strip('"')
                    for part in suffix.split("+"))
    base = re.search(r"^OutputBaseFilename=(.*)$", iss, re.M).group(1)
    return base.replace("{#AppName}", "Quickdraft").replace("{#AppVersion}", __version__) \
        .replace("{#VariantSuffix}", value) + ".exe"


def test_inno_setup_names_the_cuda_installer_and_keeps_the_default_name():
    assert iss_output_name(None) == f"Quickdraft-{__version__}-windows-x64-setup.exe"
    assert iss_output_name("cuda") == f"Quickdraft-{__version__}-windows-x64-cuda-setup.exe"
    iss = ISS.read_text(encoding="utf-8")
    assert len(re.findall(r"^AppId=", iss, re.M)) == 1   # one product: a variant replaces the other


def test_windows_artifact_names_come_from_the_inno_setup_script(jobs):
    windows = jobs["windows"]
    for leg in legs(windows):
        installer = next(step for step in runs_in(windows, leg) if "ISCC" in str(step.get("run", "")))
        assert "/DVariant=$env:ISS_VARIANT" in installer["run"]
        assert installer["env"]["ISS_VARIANT"] == "${{ matrix.iss_variant }}"
        name = iss_output_name(leg["iss_variant"] or None)
        globs = installer_globs(windows, leg)
        assert any(fnmatch.fnmatch(f"dist/{name}", glob) for glob in globs), (name, globs)
        others = [iss_output_name(other["iss_variant"] or None) for other in legs(windows) if other is not leg]
        assert not any(fnmatch.fnmatch(f"dist/{other}", glob) for other in others for glob in globs)


# --- build_deb.sh's package variant -------------------------------------------------------------


def control(tmp_path: Path, variant: str | None, modules: tuple[str, ...] = ()) -> dict[str, str]:
    """The control file build_deb.sh writes (its functions, sourced: no bundle needed) for a staged
    package holding these llama.cpp modules."""
    stage = tmp_path / (variant or "default")
    lib = stage / "opt" / "quickdraft" / "_internal" / "llama_cpp" / "lib"
    lib.mkdir(parents=True)
    for module in modules:
        (lib / module).write_bytes(b"\x7fELF")
    env = {"PATH": "/usr/bin:/bin"} | ({"QUICKDRAFT_DEB_VARIANT": variant} if variant else {})
    subprocess.run(["bash", "-c", f'source "{BUILD_DEB}" && write_control "$1" 1.2.3 amd64 2.35', "_", str(stage)],
                   check=True, env=env)
    text = (stage / "DEBIAN" / "control").read_text(encoding="utf-8")
    assert "\n\n" not in text.strip(), "one paragraph"
    return dict(re.findall(r"^([A-Z][\w-]*): (.*)$", text, re.M)) | {"_text": text}


@needs_bash
def test_the_cuda_package_conflicts_with_replaces_and_provides_quickdraft(tmp_path):
    fields = control(tmp_path, "cuda", ("libggml-vulkan.so", "libggml-cuda.so"))
    assert fields["Package"] == "quickdraft-cuda"
    assert fields["Conflicts"] == "quickdraft" and fields["Replaces"] == "quickdraft"
    assert fields["Provides"] == "quickdraft (= 1.2.3)"
    assert "CUDA 12" in fields["_text"]


@needs_bash
def test_the_default_package_is_unchanged(tmp_path):
    fields = control(tmp_path, None)
    assert fields["Package"] == "quickdraft"
    assert not {"Conflicts", "Replaces", "Provides"} & set(fields)
    assert fields["Recommends"] == "libgtk-3-0 | libgtk-3-0t64"
    assert "CUDA" not in fields["_text"]


@needs_bash
@pytest.mark.parametrize("variant", [None, "cuda"])
def test_a_bundle_with_the_vulkan_module_recommends_the_vulkan_loader(tmp_path, variant):
    fields = control(tmp_path, variant, ("libggml-cpu-haswell.so", "libggml-vulkan.so"))
    recommends = [r.strip() for r in fields["Recommends"].split(",")]
    assert "libvulkan1" in recommends
    assert "libvulkan1" not in fields["Depends"]   # optional at run time


@needs_bash
def test_no_gpu_driver_is_ever_a_dependency(tmp_path):
    fields = control(tmp_path, "cuda", ("libggml-vulkan.so", "libggml-cuda.so", "libcudart.so.12"))
    depends = [re.sub(r"\s*\(.*\)", "", d).strip() for d in fields["Depends"].split(",")]
    assert not [d for d in depends if re.search(r"nvidia|cuda|vulkan", d)], depends


@needs_bash
def test_an_unknown_variant_is_refused():
    done = subprocess.run(["bash", "-c", f'source "{BUILD_DEB}"'], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "QUICKDRAFT_DEB_VARIANT": "rocm"})
    assert done.returncode != 0 and "rocm" in done.stderr
