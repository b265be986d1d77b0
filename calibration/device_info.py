"""What device a calibration ran on: its name, the software versions, its memory, and which
shipped hardware profile a GPU's name matches (recorded in every measured profile)."""

from __future__ import annotations

import os
import platform
import subprocess
import time
from pathlib import Path

import torch

from scape.train.devices import gpu_sharing


def cpu_model() -> str:
    """The 'model name' line of /proc/cpuinfo, else what platform says."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "CPU"


def device_name(device: torch.device, threads: int) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"{cpu_model()} ({threads} thread(s) per rank)"


# The shipped profile whose GPU a device name is, for its datasheet peak (scape reproduce
# --compute-profile): only names that say the part exactly (an H100 PCIe has another peak)
GPU_PROFILES = {"NVIDIA H100 80GB HBM3": "dgx-h100", "NVIDIA A100-SXM4-80GB": "dgx-a100",
                "NVIDIA A100-SXM4-40GB": "dgx-a100"}


def versions(device: torch.device) -> dict[str, str]:
    """What a measured profile records of the software that measured it: torch, and on a GPU
    CUDA, NCCL, the driver (nvidia-smi, where it answers) and the shipped profile of the GPU."""
    out = {"torch": torch.__version__, "date": time.strftime("%Y-%m-%d %H:%M UTC",
                                                            time.gmtime())}
    if device.type != "cuda":
        return out
    out["cuda"] = str(torch.version.cuda)
    if torch.distributed.is_nccl_available():
        out["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
    try:
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version",
                                 "--format=csv,noheader"], capture_output=True, text=True,
                                timeout=30).stdout.split()
        if driver:
            out["driver"] = driver[0]
    except (OSError, subprocess.SubprocessError):
        pass  # no nvidia-smi: the driver goes unrecorded
    name = torch.cuda.get_device_name(device)
    if name in GPU_PROFILES:
        out["gpu_profile"] = GPU_PROFILES[name]
    # ranks timed together on one GPU ([concurrency]) run side by side under MPS, in turns
    # without it
    out["gpu_sharing"] = gpu_sharing()
    return out


def memory_gb(device: torch.device) -> float:
    """GPU memory, or the host's RAM (shared by every rank of a CPU testbed), in GB (1e9 B)."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory / 1e9
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9
