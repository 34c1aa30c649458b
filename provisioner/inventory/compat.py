"""Software compatibility rules as data.

CUDA toolkit -> minimum Linux x86_64 driver: NVIDIA CUDA release notes, Table 3 "CUDA Toolkit
and Corresponding Driver Versions" (docs.nvidia.com/cuda/cuda-toolkit-release-notes/,
the CUDA 13.2 Update 2 edition). Keys are (major, minor, update).
"""

from __future__ import annotations

CUDA_MIN_DRIVER: dict[tuple[int, int, int], str] = {
    (13, 2, 0): "595.45.04",
    (13, 1, 0): "590.44.01",
    (13, 0, 0): "580.65.06",
    (12, 9, 0): "575.51.03",
    (12, 8, 1): "570.124.06",
    (12, 8, 0): "570.26",  # not 570.86, and not the 570.117 seen in one script
    (12, 6, 0): "560.28.03",
    (12, 5, 0): "555.42.02",
    (12, 4, 1): "550.54.15",
    (12, 4, 0): "550.54.14",
    (12, 2, 0): "535.54.03",
    (12, 0, 0): "525.60.13",
    (11, 8, 0): "520.61.05",
}


def version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


def cuda_key(cuda: str) -> tuple[int, int, int]:
    """'12.8' -> (12, 8, 0); '12.8.1' -> (12, 8, 1) (the third part is the update)."""
    parts = [*version_tuple(cuda), 0, 0]
    return parts[0], parts[1], parts[2]


def cuda_min_driver(cuda: str) -> tuple[str | None, bool]:
    """Minimum driver for a CUDA version and whether the table lists that exact release.

    A release missing from the table is checked against the closest older listed release,
    which is a lower bound only; callers report that as a warning.
    """
    key = cuda_key(cuda)
    if key in CUDA_MIN_DRIVER:
        return CUDA_MIN_DRIVER[key], True
    older = [k for k in CUDA_MIN_DRIVER if k < key]
    if not older:
        return None, False
    return CUDA_MIN_DRIVER[max(older)], False


def newest_cuda_listed() -> tuple[int, int, int]:
    return max(CUDA_MIN_DRIVER)


def driver_satisfies(driver: str, minimum: str) -> bool:
    return version_tuple(driver) >= version_tuple(minimum)
