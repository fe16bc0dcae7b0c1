"""Accelerators a pool asks for: `sky.accelerators.A100()`, or the plain strings `"A100"` / `"A100:8"`.

    sky.Pool(provider=..., accelerator=sky.accelerators.H100(count=8))
    sky.Pool(provider=..., accelerator="A100:8")                     # the same kind of request

Every spelling becomes one `Accelerator` record, and `ClusterSpec.accelerator` carries its string
form (`"A100:8"`), which the cloud providers turn into a machine type. Local and SSH nodes cannot
be chosen by accelerator: `mismatch()` gives the warning they log when the node lacks what was asked,
naming the request and the node's real devices (`local_devices()`).

This module knows names, counts and memory only; which cloud machine carries which accelerator is
each cloud provider's business.
"""

from __future__ import annotations

import logging
import re
import shutil
import subprocess
import warnings
from collections.abc import Callable
from dataclasses import dataclass

from .held_warnings import hold

__all__ = ["Accelerator", "AcceleratorWarning", "parse", "mismatch", "warn_missing", "local_devices",
           "devices_from_smi", "Custom", "NAMES", "GENERIC", "is_generic"]

log = logging.getLogger("skyhive.providers")

#: the name that asks for any GPU, no model in particular (`"gpu:2"`: two GPUs of whatever model;
#: Slurm's own spelling): it is no model name, so it is never matched against one
GENERIC = "gpu"


def is_generic(model: str | None) -> bool:
    """True for the generic name (`"gpu"`, any case): any GPU model will do."""
    return model is not None and model.lower() == GENERIC


@dataclass(frozen=True, slots=True, kw_only=True)
class Accelerator:
    """An accelerator model and how many of it one node needs."""

    name: str
    count: int | float = 1  # whole devices, or a share of one device under 1 (SkyPilot's `L4:0.5`)
    memory_gb: float | None = None  # per device, when the model comes in several sizes
    manufacturer: str = "NVIDIA"

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise ValueError(f"accelerator name {self.name!r}: give a model name such as \"A100\"")
        count = self.count
        if isinstance(count, float) and count.is_integer() and count >= 1:
            object.__setattr__(self, "count", int(count))  # 2.0 is 2
        elif isinstance(count, bool) or not isinstance(count, (int, float)) or not 0 < count \
                or (isinstance(count, float) and count > 1):
            raise ValueError(f"accelerator {self.name} count={count!r}: need a whole number of devices "
                             "(1, 2, 8, ...) or a share of one device under 1 (0.5)")
        if self.memory_gb is not None and not self.memory_gb > 0:
            raise ValueError(f"accelerator {self.name} memory_gb={self.memory_gb!r}: need a positive number")

    @property
    def fractional(self) -> bool:
        """True for a share of one device (`count=0.5`): a job that asks for it may share the GPU with
        other such jobs; the node still needs one whole device."""
        return self.count < 1

    @property
    def devices(self) -> int:
        """How many whole devices a node needs for this request: `count`, or 1 for a share."""
        return max(1, int(self.count))

    def per_node(self) -> Accelerator:
        """The request for a node's machine: a share of a device asks for one whole device."""
        if not self.fractional:
            return self
        return Accelerator(name=self.name, count=1, memory_gb=self.memory_gb, manufacturer=self.manufacturer)

    @property
    def generic(self) -> bool:
        """True for `"gpu"` / `"gpu:N"`: any GPU model will do."""
        return is_generic(self.name)

    @property
    def cuda(self) -> bool:
        """True for NVIDIA GPUs (the torch plugin then installs the CUDA wheels)."""
        return self.manufacturer == "NVIDIA"

    def __str__(self) -> str:
        return self.name if self.count == 1 else f"{self.name}:{self.count}"

    def __eq__(self, other: object) -> bool:
        """Equal to another `Accelerator` with the same fields, and to its string form ("A100:8")."""
        if isinstance(other, str):
            return str(self) == other
        if isinstance(other, Accelerator):
            return (self.name, self.count, self.memory_gb, self.manufacturer) == (
                other.name, other.count, other.memory_gb, other.manufacturer)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(str(self))


_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.-]*\Z")
_SPEC = re.compile(r"\s*([A-Za-z][A-Za-z0-9_.-]*)\s*(?::\s*(\d+(?:\.\d*)?|\.\d+)\s*)?\Z")

# model -> (manufacturer, default memory per device in GB); the factories below are made from it
_CATALOG: dict[str, tuple[str, float | None]] = {
    "H100": ("NVIDIA", 80), "H200": ("NVIDIA", 141), "GH200": ("NVIDIA", 96), "B100": ("NVIDIA", 192),
    "B200": ("NVIDIA", 192), "GB200": ("NVIDIA", 192), "A100": ("NVIDIA", 80), "A800": ("NVIDIA", 80),
    "A40": ("NVIDIA", 48), "A10": ("NVIDIA", 24), "A10G": ("NVIDIA", 24), "A16": ("NVIDIA", 16),
    "A2": ("NVIDIA", 16), "L4": ("NVIDIA", 24), "L40": ("NVIDIA", 48), "L40S": ("NVIDIA", 48),
    "T4": ("NVIDIA", 16), "T4G": ("NVIDIA", 16), "V100": ("NVIDIA", 32), "P100": ("NVIDIA", 16),
    "P40": ("NVIDIA", 24), "P4": ("NVIDIA", 8), "K80": ("NVIDIA", 12),
    "RTX_4090": ("NVIDIA", 24), "RTX_3090": ("NVIDIA", 24), "RTX_A6000": ("NVIDIA", 48),
    "MI300X": ("AMD", 192), "MI250X": ("AMD", 128), "MI250": ("AMD", 128), "MI210": ("AMD", 64),
    "MI100": ("AMD", 32), "Trainium1": ("AWS", 32), "Trainium2": ("AWS", 96),
    "Inferentia2": ("AWS", 32), "Gaudi2": ("Habana", 96), "Gaudi3": ("Habana", 128),
}


def _identifier(model: str) -> str:
    """A model's name as a Python name: `RTX A4000` -> `RTX_A4000`, `H100-NVL` -> `H100_NVL`."""
    return re.sub(r"[^A-Za-z0-9]+", "_", model).strip("_")


def _from_tables() -> dict[str, tuple[str, float | None]]:
    """The models of the accelerator table (`cloud/data/accelerators.json`: model, manufacturer,
    memory per device) and of the cloud machine tables beside it (each instance type's model), by
    their Python names. Generated at import from the data files, so a model added to a table gets its
    `sky.accelerators.NAME` with no code change."""
    import json
    from pathlib import Path

    data = Path(__file__).resolve().parent / "cloud" / "data"
    out: dict[str, tuple[str, float | None]] = {}
    try:
        table = json.loads((data / "accelerators.json").read_text(encoding="utf-8"))
        for model, manufacturer, memory in table["models"]:
            out.setdefault(_identifier(model), (manufacturer or "NVIDIA", memory))
        for cloud in sorted(data.glob("*.json")):
            if cloud.name == "accelerators.json":
                continue
            for row in json.loads(cloud.read_text(encoding="utf-8")).get("types", {}).values():
                if len(row) > 2 and isinstance(row[2], str) and row[2]:
                    out.setdefault(_identifier(row[2]), ("NVIDIA", None))
    except (OSError, ValueError, KeyError, TypeError) as exc:  # a broken install: the hand-written names still work
        log.warning("skyhive: cannot read the accelerator tables in %s: %s", data, exc)
    return {name: v for name, v in out.items() if name.isidentifier() and not name[0].isdigit()}


_CATALOG = {**_from_tables(), **_CATALOG}
#: The models `sky.accelerators` has a factory for (any other name works through `Custom` or a string):
#: the ones above and every model of the accelerator and cloud machine tables.
NAMES = tuple(_CATALOG)


def _memory(name: str, memory: str | float | None) -> float | None:
    if memory is None:
        return _CATALOG.get(name, ("", None))[1]
    if isinstance(memory, str):
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(?:GB|G|GiB)?\s*", memory, re.IGNORECASE)
        if m is None:
            raise ValueError(f"{name}(memory={memory!r}): give it as \"80GB\"")
        return float(m.group(1))
    return float(memory)


def Custom(name: str, *, count: int | float = 1, memory: str | float | None = None,  # noqa: N802 - a factory
           manufacturer: str = "NVIDIA") -> Accelerator:
    """An accelerator the catalog does not list: `Custom("MyGPU", memory="48GB", count=2)`."""
    return Accelerator(name=name, count=count, memory_gb=_memory(name, memory), manufacturer=manufacturer)


def _factory(name: str) -> Callable[..., Accelerator]:
    manufacturer = _CATALOG[name][0]

    def make(*, count: int | float = 1, memory: str | float | None = None) -> Accelerator:
        return Accelerator(name=name, count=count, memory_gb=_memory(name, memory), manufacturer=manufacturer)

    make.__name__ = make.__qualname__ = name
    make.__doc__ = f"{name} ({manufacturer}), `count` per node; `memory=\"80GB\"` picks a size."
    return make


globals().update({name: _factory(name) for name in NAMES})
__all__ += list(NAMES)


def parse(value: object, *, where: str = "accelerator") -> Accelerator | None:
    """`None`, `"A100"`, `"A100:8"` or an `Accelerator` -> an `Accelerator` (or None).

    Raises `ValueError` for a malformed string and `TypeError` for anything else, naming `where`.
    """
    if value is None or isinstance(value, Accelerator):
        return value
    if isinstance(value, str):
        m = _SPEC.match(value)
        if m is None:
            raise ValueError(f"{where}={value!r}: give a model name and an optional count, e.g. \"A100\" or \"A100:8\"")
        name, count = m.group(1), float(m.group(2) or 1)
        if count > 1 and not count.is_integer():
            raise ValueError(f"{where}={value!r}: a fractional count must be under 1 (a share of one device)")
        known = {n.upper(): n for n in NAMES}.get(name.upper(), name)
        manufacturer = _CATALOG.get(known, ("NVIDIA", None))[0]
        return Accelerator(name=known, count=int(count) if count.is_integer() else count,
                           manufacturer=manufacturer)
    raise TypeError(
        f"{where} must be a name such as \"A100\" / \"A100:8\" or sky.accelerators.A100(), "
        f"got {type(value).__name__}"
    )


class AcceleratorWarning(UserWarning):
    """A node runs without the accelerator the pool asked for (Local and SSH cannot pick one)."""


def devices_from_smi(lines: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """GPU model names from `nvidia-smi -L` lines ("GPU 0: NVIDIA A100-SXM4-80GB (UUID: ...)")."""
    out = []
    for line in lines:
        m = re.match(r"\s*GPU \d+: (.*?)\s*(?:\(UUID.*)?$", line)
        if m and m.group(1):
            out.append(m.group(1))
    return tuple(out)


def local_devices() -> tuple[str, ...]:
    """The GPUs this machine has, by model name (`nvidia-smi -L`); empty if none is found."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return ()
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=10, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ()
    return devices_from_smi(out.splitlines())


def warn_missing(requested: str | Accelerator | None, devices: tuple[str, ...], *, where: str) -> str | None:
    """Log and `warnings.warn` (as `AcceleratorWarning`) when the node `where` lacks the requested
    accelerator; returns the message, or None when nothing is missing."""
    message = mismatch(parse(requested), devices, where=where)
    if message is not None:
        log.info("%s", message)  # shown by warnings.warn; logged for the event/diagnostic logs
        if not hold(message, AcceleratorWarning):  # a pool starting shows it at the user's `Pool(` line
            warnings.warn(message, AcceleratorWarning, stacklevel=2)
    return message


def mismatch(requested: Accelerator | None, devices: tuple[str, ...], *, where: str) -> str | None:
    """The warning for a node (`where`, e.g. "Local node 0") that lacks the requested accelerator, or
    None when it has at least `requested.count` devices whose name contains the model name."""
    if requested is None:
        return None
    if requested.generic:  # any GPU model will do
        matching = list(devices)
    else:
        matching = [d for d in devices if requested.name.replace("_", " ").upper() in d.upper().replace("-", " ")]
    if len(matching) >= requested.devices:
        return None
    have = ", ".join(devices) if devices else "no GPU (nvidia-smi found none)"
    return (
        f"{where}: accelerator={str(requested)!r} was asked for, but this node has {have}; "
        "a provider that creates machines would pick one with it, Local and SSH run on what is there"
    )
