"""Quickdraft on a real GPU in one call: the product's own build of llama.cpp (setup.sh's CMake flags:
dynamic backends, one CPU module, the CUDA module for this GPU's architecture only) with llama.cpp's
llama-bench and llama-speculative-simple built from the same tree, models shaped like real ones with
random weights (what a model costs depends on its shapes, not its weights), and each of our figures
measured beside llama.cpp's on the same files in the same run.

    here, once:  scripts/gpu/pack.sh                             # .gpu/ (about 10 MiB)
    on the GPU:  python3 scripts/gpu/measure.py                  # every stage: about 8 minutes on an H100
                                                                 # (estimated; 3 to 4 of them the build)
    rehearsal:   .venv/bin/python scripts/gpu/measure.py --cpu   # the same stages on the CPU, tiny shapes

Stages, in order (name some to run only those): probe build doctor info plain race profiles replay overhead
mtp eagle3 dflash. A stage makes the models it needs on first use. Every figure is read from a tool's output; one that
cannot be read, or a tool that fails, fails its stage with the tool's log (never a 0 in a table); a failed
probe, build, doctor or info stage stops the run, any other failure leaves the later stages to run. Results
go under --out ($OUT, else results/gpu) as each stage ends: results.json, stages.json (each stage's
wall time), logs/, profile-*.json, summary.md (the tables README shows). Work (the build, the models)
stays in --work, so a second call on a warm machine reuses it; the CPU build is kept in
~/.cache/quickdraft/llama-tools, keyed by the sources' hash and the flags, as setup.sh keeps its wheel.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tarfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts" / "gpu"))   # make_shapes, beside this script
STAGES = ("probe", "build", "doctor", "info", "plain", "race", "profiles", "replay", "overhead", "mtp", "eagle3",
          "dflash", "slots")
PROMPT = "Write a Python function that parses an ISO 8601 date and returns the weekday, with tests."
# a failure in one of these stops the run; any other stage's failure is recorded and the next one starts
NEEDED_BY_ALL = ("probe", "build", "doctor", "info")
# llama.cpp's own tools, and what the product's build adds to build them from the same tree
TOOLS = ("llama-bench", "llama-speculative-simple")
TOOL_FLAGS = ("-DCMAKE_BUILD_TYPE=Release -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_EXAMPLES=ON -DLLAVA_BUILD=OFF "
              "-DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TESTS=OFF")
# one CPU module (ggml's default level: AVX2, FMA, F16C) instead of one per instruction-set level: the
# GPU does the work, and the rehearsal needs a build of minutes (ggml refuses GGML_NATIVE with modules)
CPU_MODULE_FLAGS = "-DGGML_CPU_ALL_VARIANTS=OFF"
# a model drafting for itself accepts every drafted token but where near-ties break differently between a
# single-token step and a batch; llama.cpp's drafter samples its top 10, so it needs one clear best token
RACE_ACCEPTANCE = 0.9
# builds made here for a GPU machine (--prebuild); pack.sh copies them to .gpu/prebuilt/
PREBUILT = Path.home() / ".cache" / "quickdraft" / "gpu-prebuilt"
REPLAY_DRAFTERS = ("lookup", "model", "lookup+model")


@dataclass(frozen=True)
class Plan:
    """What a run measures: the GPU's shapes and lengths, or the CPU rehearsal's tiny ones."""
    cpu: bool
    mains: tuple[str, ...]          # make_shapes keys of the main models profiled and replayed
    draft: str                      # ... of the draft model
    mtp_main: str                   # ... of the main model with an MTP head
    eagle3_pair: tuple[str, str]    # ... of a main model and an EAGLE-3 drafter of its shape
    dflash_pair: tuple[str, str]    # ... of a main model and a DFlash drafter of its shape
    gpu_layers: str
    n_predict: int
    draft_lengths: tuple[int, ...]  # K of the near-free race
    repeats: int                    # paired runs of plain decoding, ours then llama-bench's

    @staticmethod
    def for_machine(cpu: bool) -> "Plan":
        if cpu:
            return Plan(True, ("tiny",), "tiny", "qwen35-tiny", ("llama-tiny", "eagle3-tiny"),
                        ("llama-tiny", "dflash-tiny"), "0", 32, (1, 4), 1)
        return Plan(False, ("7b", "14b"), "0.5b", "qwen35-9b", ("llama3.1-8b", "eagle3-llama3.1-8b"),
                    ("llama3.1-8b", "dflash-llama3.1-8b"), "99", 256, (1, 2, 4, 8, 16), 2)


class StageError(RuntimeError):
    """A stage cannot go on: a tool failed or printed no figure. The message carries the log's tail."""


@dataclass
class Run:
    plan: Plan
    work: Path
    out: Path
    build_cache: Path
    python: str = sys.executable
    tools: Path | None = None       # llama.cpp's tools, once built
    site: Path | None = None        # the product's Python packages with the build's libraries
    results: dict = field(default_factory=dict)
    stages: list = field(default_factory=list)
    fix: dict = field(default_factory=dict)   # the environment the doctor found a crashing load needs
    pack: Path | None = None                  # --pack: the whole of out as one tarball, after each stage

    # --- running tools ------------------------------------------------------------------------------

    def run(self, name: str, argv: list[str], timeout: float = 900) -> tuple[str, str]:
        """Run a tool, keep its output in logs/NAME.log, and stop the stage if it fails."""
        log = self.out / "logs" / f"{name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        try:
            done = subprocess.run(argv, capture_output=True, text=True, env=self.env(), cwd=REPO, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            log.write_text(f"$ {shlex.join(argv)}\n(timed out after {timeout:.0f} s)\n", encoding="utf-8")
            raise StageError(f"{name} ran past {timeout:.0f} s ({log})") from exc
        log.write_text(f"$ {shlex.join(argv)}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}\n"
                       f"--- exit code {done.returncode}\n", encoding="utf-8")
        if done.returncode != 0:
            raise StageError(f"{name} exited with {done.returncode} ({log}):\n{tail(done.stdout + done.stderr)}")
        return done.stdout, done.stderr

    def env(self) -> dict[str, str]:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        env.pop("LLAMA_CPP_LIB_PATH", None)   # the build's libraries sit in its llama_cpp package, as a wheel's
        paths = [str(self.site)] if self.site else []
        env["PYTHONPATH"] = os.pathsep.join(paths + [str(REPO)])
        return {**env, **self.fix}

    def quickdraft(self, name: str, *args: str) -> dict:
        """Our CLI's JSON answer to ``args`` (each command given --json)."""
        stdout, _ = self.run(name, [self.python, "-m", "app.cli", "--data-dir", str(self.work / "data"), *args])
        try:
            return json.loads(stdout)
        except ValueError as exc:
            raise StageError(f"{name} printed no JSON ({self.out / 'logs' / name}.log):\n{tail(stdout)}") from exc

    def tool(self, name: str) -> str:
        if self.tools is None:
            raise StageError("llama.cpp's tools are not built: run the build stage first")
        return str(self.tools / name)

    # --- models -------------------------------------------------------------------------------------

    def model(self, key: str) -> Path:
        """The model make_shapes.py writes for ``key``, written on first use, in a folder named by the
        writer's own hash: a warm machine's models from an older make_shapes.py (whose tied logits
        made the race invalid) are never measured again."""
        writer = hashlib.sha256((REPO / "scripts" / "gpu" / "make_shapes.py").read_bytes()).hexdigest()[:12]
        path = self.work / "models" / writer / f"{shape_name(key)}-q4_k_m.gguf"   # the name make_shapes.py gives it
        if not path.exists():
            self.run(f"make-{key}", [self.python, "scripts/gpu/make_shapes.py", str(path.parent), "--shapes", key])
        return path

    # --- results ------------------------------------------------------------------------------------

    def record(self, key: str, value) -> None:
        self.results[key] = value
        write_json(self.out / "results.json", self.results)


def shape_name(key: str) -> str:
    from make_shapes import LAID_OUT, SHAPES   # imported when first asked: it needs numpy and gguf

    return LAID_OUT[key].name if key in LAID_OUT else SHAPES[key].name


def tail(text: str, lines: int = 25) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def figure(text: str, pattern: str, what: str, log: str) -> float:
    """The number ``pattern``'s first group reads in ``text`` (its last match), or a StageError naming
    what was looked for and where: a tool that prints no figure stops the run."""
    found = re.findall(pattern, text, flags=re.MULTILINE)
    if not found:
        raise StageError(f"no {what} in the output of {log} (looked for /{pattern}/):\n{tail(text)}")
    value = found[-1][0] if isinstance(found[-1], tuple) else found[-1]
    return float(value)


def write_json(path: Path, data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


# --- stages ---------------------------------------------------------------------------------------

def stage_probe(r: Run) -> None:
    """What the machine already has: the GPU, the toolchain, Python and its packages."""
    probes = {
        "gpu": ["nvidia-smi", "--query-gpu=name,driver_version,memory.total,compute_cap", "--format=csv,noheader"],
        "nvcc": ["nvcc", "--version"], "cmake": ["cmake", "--version"], "ninja": ["ninja", "--version"],
        "compiler": ["c++", "--version"], "c++ runtime": ["c++", "-print-file-name=libstdc++.so"],
    }
    found = {}
    for name, argv in probes.items():
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
            first = name == "compiler"   # its version is its first line; the others' their last
            found[name] = (done.stdout.strip().splitlines() or [""])[0 if first else -1] if done.returncode == 0 \
                else f"exit {done.returncode}"
        except (OSError, subprocess.TimeoutExpired) as exc:
            found[name] = f"missing ({exc.__class__.__name__})"
    found["linker flags"] = " ".join(f"{k}={os.environ[k]}" for k in ("LDFLAGS", "CXXFLAGS", "CFLAGS") if k in os.environ)
    found["python"] = sys.version.split()[0]
    for package in ("numpy", "torch", "jinja2", "yaml"):
        try:
            found[package] = getattr(__import__(package), "__version__", "present")
        except ImportError:
            found[package] = "missing"
    found["cores"] = os.cpu_count()
    found["free disk GiB"] = round(shutil.disk_usage(r.work).free / 2**30, 1)
    for name, value in found.items():
        print(f"  {name}: {value}")
    r.record("machine", found)
    needed = ["cmake", "compiler"] + ([] if r.plan.cpu else ["nvcc", "gpu"])
    missing = [n for n in needed if str(found[n]).startswith(("missing", "exit"))]
    if missing or found["numpy"] == "missing":
        raise StageError(f"this machine lacks {', '.join(missing or ['numpy'])}: the build cannot run here")


def stage_build(r: Run) -> None:
    """The product's build (setup.sh's flags) with llama.cpp's tools in the same tree; then the product's
    Python package laid out as its wheel installs it: llama_cpp/ with the libraries and backend modules
    in llama_cpp/lib, beside the pure-Python packages from .gpu/wheels."""
    flags = product_flags(r.plan)
    sha, key = build_key(flags)
    root = r.build_cache / key
    print(f"  CMake flags: {flags}\n  build: {root}")
    prebuilt = REPO / ".gpu" / "prebuilt" / f"{key}.tar.xz"
    if not (root / "built").exists() and prebuilt_fits(prebuilt, root):
        unpack_prebuilt(root, prebuilt)
        print(f"  unpacked the build made elsewhere for these flags: {prebuilt.name}")
    elif not (root / "built").exists():
        compile_tree(r, root, flags)
    r.tools = root / "build" / "bin"
    r.site = lay_out_site(r, root)
    runtime = cxx_runtime(r.site / "llama_cpp" / "lib" / "libllama.so")
    asked = static_runtime_flags(root / "build")
    print(f"  libllama.so's C++ runtime: {runtime}" + (f" (the build's link lines ask for {asked})" if asked else ""))
    r.record("build", {"cmake_flags": flags, "key": key, "sources_sha256": sha, "cxx_runtime": runtime,
                       "static_runtime_flags": asked})


def static_runtime_flags(build: Path) -> list[str]:
    """The flags in the build's own link lines that link a C++ runtime statically: where the first lent
    H100's static libstdc++ came from is not in its compiler's defaults or environment."""
    lines = "".join(f.read_text(errors="replace") for f in build.glob("*.ninja")) if build.is_dir() else ""
    cache = build / "CMakeCache.txt"
    lines += cache.read_text(errors="replace") if cache.exists() else ""
    return sorted(set(re.findall(r"-static(?:-libstdc\+\+|-libgcc)?\b", lines)))


def cxx_runtime(library: Path) -> str:
    """The libstdc++ a library loads, or "static" where the toolchain linked a copy into it (the first GPU
    machine's did: every load from Python then crashed in a stream whose locale two copies had made)."""
    done = subprocess.run(["ldd", str(library)], capture_output=True, text=True)
    found = [line.split("=>")[-1].split("(")[0].strip() for line in done.stdout.splitlines() if "libstdc++" in line]
    return found[0] if found else "static (no libstdc++ among what ldd lists)"


def build_key(flags: str) -> tuple[str, str]:
    """(the sources' hash, the build's key): a build is kept, and made elsewhere (--prebuild), by these."""
    sha = (REPO / ".gpu" / "llama-src.sha256").read_text().strip()
    return sha, hashlib.sha256(f"{sha} {flags} {' '.join(TOOLS)}".encode()).hexdigest()[:16]


def product_flags(plan: Plan) -> str:
    """setup.sh's CMake flags for this machine's backend, one CPU module, and the tools."""
    env = dict(os.environ)
    backend = "cpu"
    if not plan.cpu:
        backend = "cuda"
        if "CUDA_ARCHITECTURES" not in env:   # --prebuild names it, on a machine without nvidia-smi
            env["CUDA_ARCHITECTURES"] = cuda_architecture()
    done = subprocess.run(["bash", "scripts/setup.sh", "--backend", backend, "--print-cmake"], capture_output=True,
                          text=True, cwd=REPO, env=env, timeout=60)
    if done.returncode != 0:
        raise StageError(f"setup.sh --print-cmake failed:\n{done.stderr}")
    return f"{done.stdout.strip()} {CPU_MODULE_FLAGS} {TOOL_FLAGS}"


def cuda_architecture() -> str:
    """This GPU's architecture as CMake names it (compute capability 9.0: "90")."""
    done = subprocess.run(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"], capture_output=True,
                          text=True, timeout=30)
    caps = done.stdout.split()
    return caps[0].replace(".", "") if done.returncode == 0 and caps else "native"


def compile_tree(r: Run, root: Path, flags: str, timeout: float | None = 3600) -> None:
    """Configure and build in ``root``; a build cut short there goes on where it stopped (ninja keeps
    what it compiled) when its sources are these. Unpacking them again gave every file a new time and
    the stopped --prebuild (119 of 249 steps) started over."""
    sha = (REPO / ".gpu" / "llama-src.sha256").read_text().strip()
    unpacked = root / "src.sha256"
    if not (unpacked.exists() and unpacked.read_text().strip() == sha):
        shutil.rmtree(root, ignore_errors=True)
        (root / "src").mkdir(parents=True)
        with tarfile.open(REPO / ".gpu" / "llama-src.tar.gz") as tar:
            tar.extractall(root / "src", filter="tar")
        unpacked.write_text(sha + "\n")
    [source] = (root / "src").iterdir()
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    jobs = str(os.cpu_count() or 2)
    r.run("cmake-configure", ["cmake", "-S", str(source), "-B", str(root / "build"), *generator, *shlex.split(flags)])
    targets = ["llama", "ggml-cpu", *TOOLS] + ([] if r.plan.cpu else ["ggml-cuda"])
    r.run("cmake-build", ["cmake", "--build", str(root / "build"), "--target", *targets, "-j", jobs], timeout=timeout)
    (root / "built").write_text(source.name + "\n")


def prebuilt_fits(prebuilt: Path, root: Path) -> bool:
    """Whether ``prebuilt`` was built in ``root`` (its libraries and tools find each other by the build
    folder's absolute path, CMake's build RPATH): a build made in another folder would not load."""
    if not prebuilt.exists():
        return False
    with tarfile.open(prebuilt) as tar:
        try:
            built_in = tar.extractfile("root.txt").read().decode().strip()
        except (KeyError, AttributeError):   # a build packed before the folder was recorded
            built_in = "an unrecorded folder"
    if built_in != str(root):
        print(f"  {prebuilt.name} was built in {built_in}, not {root}: compiling instead (--work must match)")
        return False
    return True


def unpack_prebuilt(root: Path, prebuilt: Path) -> None:
    """The sources (their Python package) and a build of the same flags made on another machine
    (``--prebuild``): the lease's 5 minutes of compiling go to measuring instead."""
    shutil.rmtree(root, ignore_errors=True)
    (root / "src").mkdir(parents=True)
    with tarfile.open(REPO / ".gpu" / "llama-src.tar.gz") as tar:
        tar.extractall(root / "src", filter="tar")
    with tarfile.open(prebuilt) as tar:
        tar.extractall(root / "build", filter="tar")
    [source] = (root / "src").iterdir()
    (root / "built").write_text(source.name + "\n")


def prebuild(plan: Plan, cache: Path, architecture: str) -> Path:
    """Build the GPU plan's libraries and tools here, for ``architecture`` (no GPU needed, nvcc is),
    and pack what the measurement runs into PREBUILT/KEY.tar.xz, which pack.sh carries. The flags
    must be the GPU machine's (nvcc at /usr/local/cuda/bin first on PATH, as there), and so must the
    build folder: --work as there (/tmp/qd-gpu), since the libraries find each other by its path."""
    os.environ["CUDA_ARCHITECTURES"] = architecture
    r = Run(plan, cache, REPO / "results" / "prebuild", cache)
    flags = product_flags(plan)
    _, key = build_key(flags)
    root = cache / key
    print(f"CMake flags: {flags}\nbuild: {root}", flush=True)
    if not (root / "built").exists():
        compile_tree(r, root, flags, timeout=None)
    out = PREBUILT / f"{key}.tar.xz"
    out.parent.mkdir(parents=True, exist_ok=True)
    (root / "build" / "root.txt").write_text(f"{root}\n")
    with tarfile.open(out, "w:xz") as tar:
        tar.add(root / "build" / "root.txt", arcname="root.txt")
        for path in sorted((root / "build" / "bin").iterdir()):
            if path.name.endswith((".so",)) or ".so." in path.name or path.name in TOOLS:
                tar.add(path, arcname=f"bin/{path.name}")
    print(f"{out}: {out.stat().st_size / 2**20:.1f} MiB", flush=True)
    return out


def lay_out_site(r: Run, root: Path) -> Path:
    site = r.work / "site"
    shutil.rmtree(site, ignore_errors=True)
    for wheel in compatible_wheels(REPO / ".gpu" / "wheels"):
        with zipfile.ZipFile(wheel) as z:
            z.extractall(site)
    [source] = (root / "src").iterdir()
    shutil.copytree(source / "llama_cpp", site / "llama_cpp", ignore=shutil.ignore_patterns("lib"))
    lib = site / "llama_cpp" / "lib"
    lib.mkdir()
    for library in (root / "build" / "bin").glob("*.so*"):
        shutil.copy2(library, lib)
    return site


def compatible_wheels(folder: Path) -> list[Path]:
    """The pure-Python wheels, and of the binary ones those for this Python."""
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    return [w for w in sorted(folder.glob("*.whl")) if "-py3-none-any" in w.name or f"-{tag}-{tag}-" in w.name]


def stage_doctor(r: Run) -> None:
    """Each part of a model load on its own, before anything else loads one: llama.cpp's own tool, a load
    through llama-cpp-python on the CPU and on the GPU, then with Quickdraft's start. A crash leaves
    its native backtrace in doctor/ (the first GPU run segfaulted in every load from Python)."""
    import doctor

    if r.site is None or r.tools is None:
        raise StageError("the doctor needs the build: run the build stage first")
    report = doctor.diagnose(str(r.model(r.plan.draft)), r.tools, r.out / "doctor", int(r.plan.gpu_layers),
                             env=r.env(), python=r.python)
    r.record("doctor", report)
    failed = [name for name in ("llama-bench", *doctor.CHECKS) if name in report and report[name]["exit"] != 0]
    fixed = [name for name, fix in report.get("fixes", {}).items() if fix["exit"] == 0]
    if failed and fixed:   # go on under the fix, and say so in every table's run
        r.fix = report["fixes"][fixed[0]]["env"]
        r.record("fix", {"name": fixed[0], "what": doctor.FIXES[fixed[0]], "env": r.fix, "crashed_without": failed})
        write_json(r.work / "fix.json", r.fix)   # a later call on this warm machine runs under it too
        print(f"  the doctor's fix {fixed[0]} loads ({doctor.FIXES[fixed[0]]}): the run goes on with {r.fix}", flush=True)
    elif failed:
        first = report[failed[0]]
        where = first.get("native_frames", ["no native frame"])[0]
        raise StageError(f"a model load failed: {', '.join(failed)}; the first, {failed[0]} ({first['what']}), "
                         f"in {where} ({r.out / 'doctor' / failed[0]}.log)")


def stage_info(r: Run) -> None:
    """The product names the device and puts every layer of both models on it."""
    system = r.quickdraft("info", "info", "--json")["system"]
    placed = r.quickdraft("info-pair", "info", "-m", str(r.model(r.plan.mains[0])), "-md", str(r.model(r.plan.draft)),
                          "-ngl", r.plan.gpu_layers, "-ngld", r.plan.gpu_layers, "--json")["placement"]
    print(f"  backends {system['backends']}, modules {[m['name'] for m in system['modules_loaded']]}, "
          f"device {system['device']}")
    for name, where in placed.items():
        print(f"  {name} model: {where}")
    r.record("info", {"system": system, "placement": placed})
    if not r.plan.cpu and not system["device"].startswith("CUDA"):
        raise StageError(f"quickdraft info chose {system['device']}, not a CUDA device ({system['problem']})")
    check_placement(r, placed, "quickdraft info")


def check_placement(r: Run, placement: dict, what: str) -> None:
    """On the GPU, every model wholly on a CUDA device (the rehearsal's stay on the CPU)."""
    if r.plan.cpu:
        return
    for name, where in placement.items():
        m = re.match(r"(\d+)/(\d+) layers on the GPU (CUDA\d+)", where)
        if not m or m.group(1) != m.group(2):
            raise StageError(f"{what}: the {name} model is not wholly on the GPU: {where}")


def generate(r: Run, name: str, main: Path, *args: str) -> dict:
    summary = r.quickdraft(name, "generate", "-m", str(main), "-ngl", r.plan.gpu_layers, "-n", str(r.plan.n_predict),
                           "-p", PROMPT, "--json", *args)
    check_placement(r, summary["placement"], name)
    if not summary.get("generation_tps"):
        raise StageError(f"{name}: no generation speed in our summary ({r.out / 'logs' / name}.log)")
    return summary


def stage_plain(r: Run) -> None:
    """Plain decoding of the first main model: ours (no drafter) against llama-bench's tg, paired."""
    main = r.model(r.plan.mains[0])
    ours, theirs = [], []
    for i in range(r.plan.repeats):
        ours.append(generate(r, f"plain-ours-{i}", main, "--drafter", "none")["generation_tps"])
        stdout, _ = r.run(f"plain-llama-bench-{i}", [r.tool("llama-bench"), "-m", str(main), "-ngl", r.plan.gpu_layers,
                                                     "-p", "0", "-n", str(r.plan.n_predict), "-r", "3", "-o", "json"])
        theirs.append(figure(stdout, r'"avg_ts":\s*([0-9.]+)', "llama-bench tokens/s", f"plain-llama-bench-{i}"))
    row = {"model": main.name, "ours_tps": statistics.median(ours), "llama_bench_tps": statistics.median(theirs),
           "runs": {"ours": ours, "llama_bench": theirs}}
    row["ratio"] = row["ours_tps"] / row["llama_bench_tps"]
    print(f"  ours {row['ours_tps']:.1f} t/s, llama-bench {row['llama_bench_tps']:.1f} t/s: {row['ratio']:.2f}x")
    r.record("plain", row)


def stage_race(r: Run) -> None:
    """The near-free race: the main model as its own draft (every token accepted), ours against
    llama-speculative-simple with today's flags, for each draft length K."""
    main = r.model(r.plan.mains[0])
    rows = []
    for k in r.plan.draft_lengths:
        ours = generate(r, f"race-ours-{k}", main, "-md", str(main), "-ngld", r.plan.gpu_layers, "--drafter", "model",
                        "--policy", "fixed", "--draft-max", str(k))
        name = f"race-llama-{k}"
        stdout, stderr = r.run(name, [
            r.tool("llama-speculative-simple"), "-m", str(main), "-md", str(main), "-ngl", r.plan.gpu_layers,
            "-ngld", r.plan.gpu_layers, "-c", "4096", "--spec-type", "draft-simple", "--spec-draft-n-max", str(k),
            "--spec-draft-n-min", "0", "--spec-draft-p-min", "0", "--temp", "0", "-n", str(r.plan.n_predict),
            "-p", PROMPT])
        text = stdout + stderr
        theirs = figure(text, r"decoded\s+\d+ tokens in\s+[0-9.]+ seconds, speed:\s+([0-9.]+) t/s", "decoding speed", name)
        accepted = figure(text, r"^.*accept\s+=\s+([0-9.]+)%", "acceptance", name) / 100
        if min(accepted, ours["acceptance_rate"]) < RACE_ACCEPTANCE:
            raise StageError(f"{name}: a model drafting for itself had {100 * ours['acceptance_rate']:.0f}% (ours) and "
                             f"{100 * accepted:.0f}% (llama.cpp) accepted: the race is no ceiling, its ratio would "
                             f"compare drafting luck (the 2026-11-27 H100 run's did: tied logits)")
        row = {"draft_max": k, "ours_tps": ours["generation_tps"], "ours_acceptance": ours["acceptance_rate"],
               "llama_tps": theirs, "llama_acceptance": accepted, "ratio": ours["generation_tps"] / theirs}
        print(f"  K={k}: ours {row['ours_tps']:.1f} t/s ({100 * row['ours_acceptance']:.0f}% accepted), "
              f"llama-speculative-simple {theirs:.1f} t/s ({100 * accepted:.0f}%): {row['ratio']:.2f}x")
        rows.append(row)
        r.record("race", rows)


def stage_profiles(r: Run) -> None:
    """Each main model's cost profile with the draft model (batches of 1..33), and what the draft model
    takes to catch up on skipped tokens."""
    draft = r.model(r.plan.draft)
    profiles = {}
    for key in r.plan.mains:
        name = f"calibrate-{key}"
        stdout, _ = r.run(name, [r.python, "-m", "app.cli", "--data-dir", str(r.work / "data"), "calibrate", "-m",
                                 str(r.model(key)), "-md", str(draft), "-ngl", r.plan.gpu_layers, "-ngld",
                                 r.plan.gpu_layers, "--draft-max", "32", "-c", "4096"])
        saved = re.search(r"^saved to (.+)$", stdout, flags=re.MULTILINE)
        if not saved:
            raise StageError(f"{name} saved no profile ({r.out / 'logs' / name}.log):\n{tail(stdout)}")
        shutil.copy(saved.group(1).strip(), r.out / f"profile-{key}.json")
        profile = json.loads((r.out / f"profile-{key}.json").read_text())
        batch = profile["main_batch_s"]
        profiles[key] = {"main_step_ms": 1000 * batch[0], "draft_step_ms": 1000 * profile["draft_step_s"],
                         "batch_over_step": [round(t / batch[0], 3) for t in batch[:17]]}
        print(f"  {key}: main step {profiles[key]['main_step_ms']:.2f} ms, draft step "
              f"{profiles[key]['draft_step_ms']:.2f} ms, T(n)/T(1) n=1..17: "
              + " ".join(f"{x:.2f}" for x in profiles[key]["batch_over_step"]))
        r.record("profiles", profiles)
    stdout, _ = r.run("catch-up", [r.python, "scripts/gpu/catch_up.py", str(draft), r.plan.gpu_layers])
    (r.out / "catch-up.json").write_text(stdout, encoding="utf-8")


def stage_replay(r: Run) -> None:
    """The real Qwen pair's recorded acceptance replayed against each profile: lookup, the draft model
    and both, and the best lookup could do (the oracle bound)."""
    traces = str(REPO / ".gpu" / "traces.json")
    rows = []
    for key in r.plan.mains:
        profile = str(r.out / f"profile-{key}.json")
        for drafter in REPLAY_DRAFTERS:
            name = f"replay-{key}-{drafter}"
            stdout, _ = r.run(name, [r.python, "scripts/policy_replay.py", "replay", traces, profile, "--drafter",
                                     drafter, "--catch-up", str(r.out / "catch-up.json")])
            rows.append(replay_row(key, drafter, stdout, name))
        name = f"replay-{key}-bound"
        stdout, _ = r.run(name, [r.python, "scripts/policy_replay.py", "bound", traces, profile])
        rows.append(replay_row(key, "lookup oracle bound", stdout, name))
        r.record("replay", rows)
    for row in rows:
        print(f"  {row['main']:>4} {row['drafter']:<20} median {row['median']:.2f}x, slowest {row['slowest']:.2f}x")


def replay_row(key: str, drafter: str, stdout: str, name: str) -> dict:
    pattern = r"^median ([0-9.]+)x, slowest ([0-9.]+)x"
    return {"main": key, "drafter": drafter, "median": figure(stdout, pattern, "median speedup", name),
            "slowest": float(re.findall(pattern, stdout, flags=re.MULTILINE)[-1][1])}


def stage_overhead(r: Run) -> None:
    """The host's work per drafted and per verified token, with the 152k vocabulary on the device."""
    out = r.out / "host-overhead.json"
    r.run("host-overhead", [r.python, "scripts/host_overhead.py", str(r.model(r.plan.mains[0])),
                            str(r.model(r.plan.draft)), "-ngl", r.plan.gpu_layers, "--json", str(out)])
    rounds = json.loads(out.read_text())["rounds"]
    if not rounds or not all(row["rounds"] and row["drafted"] for row in rounds):
        raise StageError(f"host_overhead.py measured no drafting rounds ({out})")
    rows = [{k: row[k] for k in ("drafter", "vocab", "draft_host_ms_per_drafted", "verify_host_ms_per_verified",
                                 "other_ms_per_round", "host_fraction")} for row in rounds]
    for row in rows:
        print(f"  {row['drafter']:<7} host {row['draft_host_ms_per_drafted']:.3f} ms a drafted token, "
              f"{row['verify_host_ms_per_verified']:.3f} ms a verified one, {100 * row['host_fraction']:.1f}% of the round")
    r.record("overhead", rows)


def stage_slots(r: Run) -> None:
    """`quickdraft serve` with one long and three short streaming clients at once, four slots (decoding
    together, and taking turns: -nocb) against one (scripts/parallel_bench.py), the first main model
    drafting with the draft model, answers run to their length (random weights)."""
    out = r.out / "parallel-bench.json"
    long, short = (64, 8) if r.plan.cpu else (300, 16)
    r.run("slots", [r.python, "scripts/parallel_bench.py", "-m", str(r.model(r.plan.mains[0])), "-md",
                    str(r.model(r.plan.draft)), "-ngl", r.plan.gpu_layers, "--long", str(long), "--short", str(short),
                    "--ignore-eos", "--turns", "--data-dir", str(r.work / "data"), "--json", str(out)], timeout=600)
    runs = json.loads(out.read_text())["runs"]
    rows = []
    for name, clients in runs.items():
        shorts = [c for c in clients if c["client"] != "long"]
        if any(c["first_token_s"] is None or not c["tokens"] for c in clients):
            raise StageError(f"slots: a client got no answer ({out})")
        rows.append({"server": name, "long_first_s": clients[0]["first_token_s"], "long_total_s": clients[0]["total_s"],
                     "short_first_s": statistics.median(c["first_token_s"] for c in shorts),
                     "short_total_s": statistics.median(c["total_s"] for c in shorts),
                     "tokens_per_s": sum(c["tokens"] for c in clients) / max(c["total_s"] for c in clients),
                     "long_server": clients[0].get("timings")})
        print(f"  {name}: short clients' first token {rows[-1]['short_first_s']:.2f} s (median), long answer "
              f"{rows[-1]['long_total_s']:.2f} s, {rows[-1]['tokens_per_s']:.1f} t/s over all")
    r.record("slots", rows)
    r.record("slots_scaling", clients_growing(r, 8 if r.plan.cpu else 64))
    keep_profiles(r)


def keep_profiles(r: Run) -> None:
    """The cost profiles the servers learned and stored (what their policies drafted by), into the results."""
    kept = r.out / "profiles"
    for profile in sorted((r.work / "data").glob("cache/profiles/*.json")):
        kept.mkdir(exist_ok=True)
        shutil.copy2(profile, kept / profile.name)


def server_side(row: dict) -> str:
    """The long answer's decoding as the server timed it, and its drafts ("-" from a run before they were kept)."""
    t = row.get("long_server") or {}
    return f"{t['predicted_ms']:.0f}, {t.get('draft_n_accepted', 0)} of {t.get('draft_n', 0)}" if t else "-"


def clients_growing(r: Run, tokens: int) -> list[dict]:
    """1 to 4 clients at once, ``tokens`` each (scripts/parallel_bench.py --scaling): the tokens per
    second summed over them, which grows where the slots' verify batches decode as one."""
    out = r.out / "parallel-scaling.json"
    r.run("slots-scaling", [r.python, "scripts/parallel_bench.py", "-m", str(r.model(r.plan.mains[0])), "-md",
                            str(r.model(r.plan.draft)), "-ngl", r.plan.gpu_layers, "--clients", "4", "--scaling",
                            str(tokens), "--data-dir", str(r.work / "data"), "--json", str(out)], timeout=600)
    [runs] = json.loads(out.read_text())["runs"].values()
    rows = [{"clients": x["clients"], "tokens_per_s": x["tokens_per_s"],
             "against_one": x["tokens_per_s"] / runs[0]["tokens_per_s"]} for x in runs]
    print("  clients at once: " + ", ".join(f"{x['clients']}: {x['tokens_per_s']:.1f} t/s ({x['against_one']:.2f}x)"
                                            for x in rows))
    return rows


def stage_mtp(r: Run) -> None:
    """One step of the MTP head against one step of its main model, on a Qwen3.5-shaped main."""
    main = r.model(r.plan.mtp_main)
    plain = generate(r, "mtp-main-alone", main, "--drafter", "none")
    drafting = generate(r, "mtp-head", main, "--drafter", "mtp", "--policy", "fixed", "--draft-max", "1")
    if not drafting["drafted"]:
        raise StageError(f"the MTP head drafted nothing ({r.out / 'logs' / 'mtp-head.log'})")
    main_ms = 1000 / plain["generation_tps"]
    head_ms = 1000 * drafting["draft_s"] / drafting["drafted"]
    row = {"model": main.name, "main_step_ms": main_ms, "mtp_step_ms": head_ms, "ratio": head_ms / main_ms}
    print(f"  main step {main_ms:.2f} ms, MTP step {head_ms:.2f} ms: {row['ratio']:.2f} of a main step")
    r.record("mtp", row)


def stage_eagle3(r: Run) -> None:
    """One step of an EAGLE-3 drafter against one step of its main model (Llama 3.1 8B shaped): a
    drafted token chained, and an accepted token taken in (its encoder and pair); then the pair raced."""
    row = drafter_step(r, "eagle3", r.plan.eagle3_pair)
    print(f"  main step {row['main_ms']:.2f} ms, EAGLE-3 step {row['step_ms']:.2f} ms "
          f"({row['step_over_main']:.2f} of a main step), an accepted token taken in {row['start_ms']:.2f} ms")
    r.record("eagle3", row)
    r.record("eagle3_race", drafter_race(r, "eagle3", r.model(r.plan.eagle3_pair[0]), r.model(r.plan.eagle3_pair[1]), 4))


def stage_dflash(r: Run) -> None:
    """A DFlash drafter's block against its main model's step and verify batch (Llama 3.1 8B shaped, a
    z-lab-shaped drafter), then the pair raced against llama-speculative-simple's draft-dflash."""
    row = drafter_step(r, "dflash", r.plan.dflash_pair)
    print(f"  main step {row['main_ms']:.2f} ms, a batch of {row['block'] + 1} {row['verify_ms']:.2f} ms, "
          f"a DFlash block of {row['block']} {row['block_ms']:.2f} ms ({row['block_over_main']:.2f} of a main "
          f"step), a decoded token taken in {row['start_ms']:.2f} ms")
    r.record("dflash", row)
    r.record("dflash_race", drafter_race(r, "dflash", r.model(r.plan.dflash_pair[0]), r.model(r.plan.dflash_pair[1]),
                                         row["block"]))


def drafter_step(r: Run, kind: str, pair: tuple[str, str]) -> dict:
    """scripts/gpu/drafter_step.py's medians for ``kind`` on the pair (make_shapes keys)."""
    main = r.model(pair[0])
    name = f"{kind}-step"
    stdout, _ = r.run(name, [r.python, "scripts/gpu/drafter_step.py", kind, str(main), str(r.model(pair[1])),
                             r.plan.gpu_layers])
    try:
        row = {"model": main.name, **json.loads(stdout)}
    except ValueError as exc:
        raise StageError(f"drafter_step.py printed no JSON ({r.out / 'logs' / name}.log):\n{tail(stdout)}") from exc
    print("  values: " + ", ".join(f"{part} {v['not_a_number']} not a number, largest {v['max_abs']:.3g}"
                                   for part, v in row["values"].items()))
    return row


def drafter_race(r: Run, kind: str, main: Path, drafter: Path, k: int) -> dict:
    """The same pair drafting K tokens a round, every round (random weights: nothing is accepted, so this
    times the drafting and verifying machinery itself), ours (``--drafter kind``) against
    llama-speculative-simple's ``draft-kind``, beside our plain decoding."""
    plain = generate(r, f"{kind}-plain", main, "--drafter", "none")
    try:
        ours = generate(r, f"{kind}-ours", main, "-md", str(drafter), "-ngld", r.plan.gpu_layers, "--drafter", kind,
                        "--policy", "fixed", "--draft-max", str(k))
    except StageError as failed:   # llama.cpp's run on the same files still says whether the files or we fail
        ours = failed
    name = f"{kind}-llama"
    stdout, stderr = r.run(name, [
        r.tool("llama-speculative-simple"), "-m", str(main), "-md", str(drafter), "-ngl", r.plan.gpu_layers,
        "-ngld", r.plan.gpu_layers, "-c", "4096", "--spec-type", f"draft-{kind}", "--spec-draft-n-max", str(k),
        "--spec-draft-n-min", "0", "--spec-draft-p-min", "0", "--temp", "0", "-n", str(r.plan.n_predict), "-p", PROMPT])
    text = stdout + stderr
    if isinstance(ours, StageError):
        llama = figure(text, r"decoded\s+\d+ tokens in\s+[0-9.]+ seconds, speed:\s+([0-9.]+) t/s", "decoding speed", name)
        raise StageError(f"{ours} (llama-speculative-simple draft-{kind} on the same files: {llama:.1f} t/s)")
    row = {"kind": kind, "draft_max": k, "plain_tps": plain["generation_tps"], "ours_tps": ours["generation_tps"],
           "ours_drafted": ours["drafted"],
           "llama_tps": figure(text, r"decoded\s+\d+ tokens in\s+[0-9.]+ seconds, speed:\s+([0-9.]+) t/s",
                               "decoding speed", name),
           "llama_drafted": figure(text, r"n_drafted\s*=\s*(\d+)", "drafted tokens", name)}
    row["ratio"] = row["ours_tps"] / row["llama_tps"]
    print(f"  K={k}, nothing accepted: ours {row['ours_tps']:.1f} t/s ({row['ours_drafted']} drafted), "
          f"llama-speculative-simple draft-{kind} {row['llama_tps']:.1f} t/s ({row['llama_drafted']:.0f} drafted): "
          f"{row['ratio']:.2f}x; ours plain {row['plain_tps']:.1f} t/s")
    return row


# --- the tables -----------------------------------------------------------------------------------

def summary_markdown(results: dict, device: str) -> str:
    """The tables README shows, one for each stage that recorded results."""
    parts = [f"Measured on {device}."]
    if "fix" in results:
        fix = results["fix"]
        parts.append(f"Every load from Python crashed as it was ({', '.join(fix['crashed_without'])}); these figures "
                     f"were run, llama.cpp's tools included, under the doctor's fix `{fix['name']}`: {fix['what']} "
                     f"({' '.join(f'{k}={v}' for k, v in fix['env'].items())}).")
    if "plain" in results:
        p = results["plain"]
        parts.append(table(["plain decoding", "ours t/s", "llama-bench t/s", "ours / llama.cpp"],
                           [[p["model"], f"{p['ours_tps']:.1f}", f"{p['llama_bench_tps']:.1f}", f"{p['ratio']:.2f}x"]]))
    if "race" in results:
        parts.append(table(
            ["own draft, K", "ours t/s", "llama-speculative-simple t/s", "ours / llama.cpp", "accepted (ours, llama.cpp)"],
            [[str(x["draft_max"]), f"{x['ours_tps']:.1f}", f"{x['llama_tps']:.1f}", f"{x['ratio']:.2f}x",
              f"{100 * x['ours_acceptance']:.0f}%, {100 * x['llama_acceptance']:.0f}%"] for x in results["race"]]))
    if "profiles" in results:
        sizes = (2, 5, 9, 17)
        parts.append(table(
            ["main (0.5B draft)", "main step ms", "draft step ms", *(f"T({n})/T(1)" for n in sizes)],
            [[key, f"{x['main_step_ms']:.2f}", f"{x['draft_step_ms']:.2f}",
              *(f"{x['batch_over_step'][n - 1]:.2f}" if n <= len(x["batch_over_step"]) else "-" for n in sizes)]
             for key, x in results["profiles"].items()]))
    if "replay" in results:
        parts.append(table(["real pair's acceptance replayed on", "drafter", "median speedup", "slowest prompt"],
                           [[x["main"], x["drafter"], f"{x['median']:.2f}x", f"{x['slowest']:.2f}x"]
                            for x in results["replay"]]))
    if "overhead" in results:
        parts.append(table(["host overhead", "ms per drafted token", "ms per verified token", "share of the round"],
                           [[x["drafter"], f"{x['draft_host_ms_per_drafted']:.3f}",
                             f"{x['verify_host_ms_per_verified']:.3f}", f"{100 * x['host_fraction']:.1f}%"]
                            for x in results["overhead"]]))
    if "mtp" in results:
        x = results["mtp"]
        parts.append(table(["MTP head", "main step ms", "MTP step ms", "MTP / main"],
                           [[x["model"], f"{x['main_step_ms']:.2f}", f"{x['mtp_step_ms']:.2f}", f"{x['ratio']:.2f}"]]))
    if "eagle3" in results:
        x = results["eagle3"]
        parts.append(table(["EAGLE-3 drafter", "main step ms", "drafted token ms", "accepted token taken in ms",
                            "drafted / main"],
                           [[x["model"], f"{x['main_ms']:.2f}", f"{x['step_ms']:.2f}",
                             f"{x['start_ms']:.2f}", f"{x['step_over_main']:.2f}"]]))
    if "dflash" in results:
        x = results["dflash"]
        parts.append(table(["DFlash drafter", "main step ms", f"batch of {x['block'] + 1} ms", f"block of {x['block']} ms",
                            "decoded token taken in ms", "block / main step"],
                           [[x["model"], f"{x['main_ms']:.2f}", f"{x['verify_ms']:.2f}",
                             f"{x['block_ms']:.2f}", f"{x['start_ms']:.2f}", f"{x['block_over_main']:.2f}"]]))
    if "slots" in results:
        parts.append(table(["four clients at once (1 long, 3 short)", "long: first token s", "long: total s",
                            "long: server's decoding ms, accepted of drafted", "short: first token s (median)",
                            "short: total s (median)", "t/s over all"],
                           [[x["server"], f"{x['long_first_s']:.2f}", f"{x['long_total_s']:.2f}", server_side(x),
                             f"{x['short_first_s']:.2f}", f"{x['short_total_s']:.2f}", f"{x['tokens_per_s']:.1f}"]
                            for x in results["slots"]]))
    if "slots_scaling" in results:
        parts.append(table(["clients at once, the same tokens each", "tokens/s summed", "against one client"],
                           [[str(x["clients"]), f"{x['tokens_per_s']:.1f}", f"{x['against_one']:.2f}x"]
                            for x in results["slots_scaling"]]))
    races = [results[key] for key in ("eagle3_race", "dflash_race") if key in results]
    if races:
        parts.append(table(["drafter, K tokens every round, none accepted", "ours t/s", "drafted",
                            "llama-speculative-simple t/s", "drafted", "ours / llama.cpp", "ours plain t/s"],
                           [[f"{x.get('kind', 'eagle3')} K={x['draft_max']}", f"{x['ours_tps']:.1f}", str(x["ours_drafted"]),
                             f"{x['llama_tps']:.1f}", f"{x['llama_drafted']:.0f}", f"{x['ratio']:.2f}x",
                             f"{x['plain_tps']:.1f}"] for x in races]))
    return "\n\n".join(parts) + "\n"


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def device_name(results: dict, cpu: bool) -> str:
    machine = results.get("machine", {})
    cores = machine.get("cores", os.cpu_count())   # the probe's count, else this machine's (probe not run)
    if cpu:
        return f"the CPU ({cores} cores; a rehearsal with tiny shapes, not a measurement)"
    return f"{machine.get('gpu', 'a GPU')}, {cores} cores"


# --- driver ---------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("stages", nargs="*", help=f"stages to run: {' '.join(STAGES)} (all)")
    parser.add_argument("--cpu", action="store_true", default=os.environ.get("CPU_ONLY") == "1",
                        help="the rehearsal: a CPU build and tiny shapes (or CPU_ONLY=1)")
    parser.add_argument("--work", default=os.environ.get("QD_GPU_WORK", "/tmp/qd-gpu"))
    parser.add_argument("--out", default=os.environ.get("OUT") or str(REPO / "results" / "gpu"))
    parser.add_argument("--build-cache", default=None,
                        help="where builds are kept (the CPU's: ~/.cache/quickdraft/llama-tools; the GPU's: WORK/builds)")
    parser.add_argument("--prebuild", metavar="ARCH", default=None,
                        help="here, without a GPU: build the GPU plan for CUDA architecture ARCH (90: H100) into "
                             "~/.cache/quickdraft/gpu-prebuilt/, which pack.sh carries and the build stage unpacks "
                             "instead of compiling")
    parser.add_argument("--pack", default=None,
                        help="after every stage, also write --out as one .tar.gz here (a device that returns few files)")
    parser.add_argument("--deadline", type=float, default=None,
                        help="seconds: start no stage after this (the lease's end; the GPU's default 480)")
    args = parser.parse_args(argv)
    unknown = [s for s in args.stages if s not in STAGES]
    if unknown:
        parser.error(f"unknown stage {', '.join(unknown)}: choose from {' '.join(STAGES)}")
    plan = Plan.for_machine(args.cpu)
    if args.prebuild:
        prebuild(plan, Path(args.build_cache or Path(args.work) / "builds"), args.prebuild)
        return 0
    work, out = Path(args.work), Path(args.out)
    work.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    cache = Path(args.build_cache) if args.build_cache else (
        Path.home() / ".cache" / "quickdraft" / "llama-tools" if args.cpu else work / "builds")
    run = Run(plan, work, out, cache, pack=Path(args.pack) if args.pack else None)
    deadline = args.deadline if args.deadline is not None else (None if args.cpu else 480)
    return drive(run, list(args.stages) or list(STAGES), deadline)


def drive(run: Run, stages: list[str], deadline: float | None) -> int:
    start = time.monotonic()
    if "build" not in stages:   # a later call on a warm machine: the build the first call made
        reuse_build(run)
    status, stopped = 0, False
    for stage in stages:
        if stopped or (deadline is not None and time.monotonic() - start > deadline):
            why = "after a failed stage that every later one needs" if stopped else f"{deadline:.0f} s had passed"
            print(f"=== {stage}: not started, {why}")
            run.stages.append({"stage": stage, "seconds": 0.0, "status": f"not started ({why})"})
            write_json(run.out / "stages.json", run.stages)
            continue
        print(f"=== {stage}", flush=True)
        began = time.monotonic()
        try:
            globals()[f"stage_{stage}"](run)
            outcome = "ok"
        except StageError as exc:
            outcome, status = f"failed: {exc}", 1
            stopped = stage in NEEDED_BY_ALL   # a failed measurement leaves the others theirs to make
        seconds = time.monotonic() - began
        run.stages.append({"stage": stage, "seconds": round(seconds, 1), "status": outcome.split("\n")[0]})
        write_json(run.out / "stages.json", run.stages)
        pack_out(run)
        print(f"=== {stage}: {seconds:.1f} s{'' if outcome == 'ok' else ', ' + outcome}", flush=True)
    table = summary_markdown(run.results, device_name(run.results, run.plan.cpu))
    (run.out / "summary.md").write_text(table, encoding="utf-8")
    pack_out(run)
    print("\n" + "\n".join(f"{s['stage']:>9}: {s['seconds']:7.1f} s  {s['status']}" for s in run.stages))
    print(f"{'total':>9}: {time.monotonic() - start:7.1f} s\n\n{table}")
    return status


def pack_out(run: Run) -> None:
    if run.pack is None:
        return
    run.pack.parent.mkdir(parents=True, exist_ok=True)
    partial = run.pack.with_name(run.pack.name + ".partial")
    with tarfile.open(partial, "w:gz") as tar:
        tar.add(run.out, arcname=run.out.name)
    partial.replace(run.pack)   # a run killed mid-write leaves the last whole one


def reuse_build(run: Run) -> None:
    site = run.work / "site"
    built = sorted(run.build_cache.glob("*/built"))
    if site.exists() and built:
        run.site, run.tools = site, built[-1].parent / "build" / "bin"
    if (run.work / "fix.json").exists():
        run.fix = json.loads((run.work / "fix.json").read_text(encoding="utf-8"))


if __name__ == "__main__":
    sys.exit(main())
