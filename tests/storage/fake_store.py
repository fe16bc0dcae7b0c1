"""FAKE: a bucket store this project has never seen, added the way the Store contract says a new store is
(`runtime/storage/store.py`): this one module plus its registration (`register_store(FakeStore(...))`),
with no edit under runtime/. Its "service" is a moto_server the test started on 127.0.0.1 (its endpoint),
with keys of its own and a region of its own, no bucket tagging and no multi-object delete — so every
request shows which store's rules it followed."""

from __future__ import annotations

from typing import Any

from skyhive.runtime.storage.store import Store


class FakeStore(Store):
    name = "fakestore"
    schemes = ("fake", "fakestore")
    tags_buckets = False  # a bucket skyhive creates holds the marker object instead
    deletes_one_by_one = True  # no DeleteObjects
    checksums_when_required = True
    keys_hint = "; fakestore: its keys are built in"

    def __init__(self, endpoint: str) -> None:
        self.url = endpoint

    def endpoint(self, bucket: Any, session: Any) -> str | None:
        return self.url

    def region(self, bucket: Any, session: Any) -> str:
        return "fake-1"

    def own_keys(self, bucket: Any) -> tuple[str, str] | None:
        return ("fake-key", "fake-secret")

    def location_constraint(self, acc: Any) -> str | None:
        return str(acc.region)  # its buckets are created in its one region
