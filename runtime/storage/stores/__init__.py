"""skyhive's own bucket stores, one module each behind `runtime/storage/store.py`'s `Store`: S3 (and any
S3-compatible endpoint), Cloudflare R2, Google Cloud Storage (through its XML API with HMAC keys)."""
