"""`quickdraft info`: what this build of llama.cpp runs on (backends, devices and their free memory),
what a GGUF file says about itself, and where a loaded pair's layers go."""

from __future__ import annotations

import json


def add_info_parser(sub, gpu_layer_args) -> None:
    info = sub.add_parser("info", help="this build's llama.cpp backends and devices; what a GGUF file says "
                                       "about itself; with -m, where a loaded pair's layers go")
    info.add_argument("file", nargs="?", help="a GGUF file to describe (no weights loaded)")
    info.add_argument("-m", "--main", help="load this main model and show where its layers went")
    info.add_argument("-md", "--draft", help="and this draft model")
    gpu_layer_args(info)
    info.add_argument("-c", "--ctx", type=int, default=4096, help="context size the pair is loaded with (4096)")
    info.add_argument("--json", action="store_true")
    info.add_argument("--brief", action="store_true", help="one line: the backend and the GPUs found")
    info.set_defaults(handler=cmd_info)


def cmd_info(args) -> int:
    from app.core.llama.devices import choose_device, system_info

    system = system_info()
    if args.brief:
        print(f"llama.cpp backends: {', '.join(system.backends)}; {system.summary()}")
        return 0
    chosen = choose_device(args.device or "auto", system)
    data: dict = {"system": _system_json(system, chosen)}
    if args.file:
        data["file"] = _file_info(args.file)
    if args.main:
        data["placement"] = _loaded_placement(args)
    if args.json:
        print(json.dumps(data, indent=2))
        return 0
    _print_system(system, chosen, args.device or "auto")
    if args.file:
        print()
        _print_rows(_file_rows(data["file"]))
    if args.main:
        print()
        _print_rows({f"{name} model": where for name, where in data["placement"].items()})
    return 0


def _system_json(system, chosen) -> dict:
    return {"backends": list(system.backends), "gpu_offload_supported": bool(system.gpus),
            "dynamic_backends": system.load.dynamic, "cpu_variant": system.load.cpu_variant,
            "cpu_variants": list(system.load.cpu_variants), "module_folders": list(system.load.folders),
            "modules_loaded": [{"name": m.name, "path": m.path} for m in system.load.loaded],
            "modules_failed": [{"name": m.name, "path": m.path, "reason": m.reason} for m in system.load.failed],
            "devices": [vars(d) for d in system.devices], "device": chosen.name if chosen else "cpu",
            "problem": system.problem(), "cpu_features": system.cpu_features, "mtp": _mtp_availability()}


def _mtp_availability() -> str:
    from app.core.llama import mtp

    return mtp.availability()


def system_summary() -> str:
    from app.core.llama.devices import system_info

    return system_info().summary()


def _print_system(system, chosen, wanted: str) -> None:
    load = system.load
    rows = {"backends": ", ".join(system.backends) or "none"}
    if load.dynamic:
        rows["modules loaded"] = ", ".join(m.name for m in load.loaded) or "none"
        for m in load.failed:
            rows[f"not loaded: {m.name}"] = m.reason
        rows["CPU variant"] = (f"{load.cpu_variant or 'none loaded'}"
                               + (f" (of {len(load.cpu_variants)}: {', '.join(load.cpu_variants)})"
                                  if load.cpu_variants else ""))
    else:
        rows["modules loaded"] = "none: the backends are built into this llama.cpp"
    rows["runs on"] = system.summary()
    how = "auto: --device cpu or a device's name to change" if wanted == "auto" else f"--device {wanted}"
    rows["models go on"] = f"{chosen.name}: {chosen.description} ({how})" if chosen else f"the CPU ({how})"
    for i, device in enumerate(system.devices):
        rows[f"device {i}"] = device.describe()
    if system.problem():
        rows["note"] = system.problem()
    rows["CPU features"] = system.cpu_features
    rows["MTP drafting"] = _mtp_availability()
    _print_rows(rows)


def _file_info(path: str) -> dict:
    from app.core.gguf.info import MTP_DRAFTER_ARCHITECTURES, read_gguf_info

    info = read_gguf_info(path)
    data = {k: v for k, v in vars(info).items() if k not in ("tokens", "chat_template", "tensor_bytes")}
    data["display_name"] = info.display_name
    data["vocab_type_name"] = info.vocab_type_name
    data["has_chat_template"] = bool(info.chat_template)
    data["memory"], data["memory_note"] = info.memory, info.memory_note()
    data["mtp_drafter_for"] = MTP_DRAFTER_ARCHITECTURES.get(info.architecture)
    data["hidden_state_drafter"] = info.hidden_state_drafter
    data["drafts_for"] = info.drafts_for() if info.hidden_state_drafter else None
    data["drafts_as"] = info.drafts_as.value if info.drafts_as else None
    return data


def _file_rows(info: dict) -> dict:
    n = info["parameter_count"]
    return {
        "file": info["path"], "name": info["display_name"], "architecture": info["architecture"],
        "parameters": f"{n / 1e9:.2f} B" if n >= 1e8 else f"{n:,}",
        "quantization": info["quantization"], "file size": f"{info['file_size'] / 2**20:.1f} MiB",
        "context length": info["context_length"], "layers": info["n_layers"],
        "vocabulary": f"{info['vocab_type_name']}, {info['vocab_size']:,} tokens",
        "bos / eos": f"{info['bos_token_id']} / {info['eos_token_id']} (add bos: {info['add_bos']})",
        "chat template": "yes" if info["has_chat_template"] else "no (a plain transcript is used)",
        "memory": info["memory_note"] or "attention (keys and values per token)",
        "MTP layers": _mtp_row(info),
        **({"drafter": _drafter_row(info)} if info["hidden_state_drafter"] else {}),
    }


def _drafter_row(info: dict) -> str:
    what = f"{info['hidden_state_drafter']}: it only drafts, for {info['drafts_for']}"
    if info["drafts_as"]:
        return f"{what} (-md FILE: it drafts with --drafter {info['drafts_as']}, the default)"
    return f"{what}; Quickdraft does not draft with {info['hidden_state_drafter']} drafters"


def _mtp_row(info: dict) -> str:
    if info["mtp_drafter_for"]:
        return (f"{info['mtp_layers']}: an MTP drafter for a {info['mtp_drafter_for']} model {info['n_embd_out']} "
                f"wide; it only drafts (-md FILE: it drafts with --drafter mtp)")
    if info["mtp_layers"]:
        return f"{info['mtp_layers']}: it can draft for itself (--drafter mtp)"
    return "none"


def _loaded_placement(args) -> dict[str, str]:
    from app.cli.model_args import load_engine

    args.ctx_draft = None
    args.threads = args.threads_draft = None
    engine = load_engine(args)
    try:
        return dict(engine.pair.placement)
    finally:
        engine.close()


def _print_rows(rows: dict) -> None:
    width = max(len(k) for k in rows)
    for key, value in rows.items():
        print(f"{key:>{width}}: {value}")
