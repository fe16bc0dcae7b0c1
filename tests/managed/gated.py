"""`GatedLocal`: a test-only Local provider whose `down` (a managed job's sweep of its pools) waits for
the test: it marks `<gate>/down.<pool>` when a sweep begins, then waits until `<gate>/go` (the sweep
succeeds) or `<gate>/fail` (it raises, as a host still unreachable does) exists. The job's controller
unpickles it, so it lives in an importable module. `FullLocal`: no capacity until the test says so."""

from __future__ import annotations

from pathlib import Path

import anyio

from skyhive.errors import ProvisionError
from skyhive.providers.base import NodeHandle
from skyhive.providers.local import Local


class GatedLocal(Local):
    def __init__(self, gate: str) -> None:
        super().__init__()
        self.gate = gate

    async def down(self, pool_id: str) -> list[NodeHandle]:
        gate = Path(self.gate)
        (gate / f"down.{pool_id}").touch()
        while not (gate / "go").exists():
            if (gate / "fail").exists():
                raise ProvisionError(f"{pool_id}: host unreachable (the test's gate)")
            await anyio.sleep(0.05)
        return []


class FullLocal(Local):
    """A test-only Local provider with no capacity while `<gate>/full` exists: its launches fail as a
    cloud's do when no zone has room (`ProvisionError(kind="capacity")`), each refusal marked
    `<gate>/refused.<n>`."""

    def __init__(self, gate: str) -> None:
        super().__init__()
        self.gate = gate

    async def launch(self, spec, nodes):  # type: ignore[no-untyped-def]
        gate = Path(self.gate)
        if (gate / "full").exists():
            (gate / f"refused.{len(list(gate.glob('refused.*')))}").touch()
            raise ProvisionError("no capacity for the nodes in any zone (the test's gate)", kind="capacity")
        return await super().launch(spec, nodes)
