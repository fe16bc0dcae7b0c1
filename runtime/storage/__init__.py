"""Object storage where training needs it: buckets as file mounts (COPY, MOUNT, MOUNT_CACHED) and a job's
checkpoint folder that survives the node. See docs/storage.md.

- `spec.py` — what a mount is (`Bucket`, `Mount`, bucket URIs), pure values the client and nodes share;
- `s3.py` — the S3 (and S3-compatible) client: endpoint and credential chains, errors naming bucket and key;
- `transfer.py` — parallel multipart copies between a folder and a bucket, nothing partial seen as complete;
- `direct.py` — small objects' GETs signed here and sent on the client's pool (less CPU per object than botocore);
- `node.py` — the node side: a mount put in place, a cached mount synced back (and uploaded when its worker
  ends), a FUSE mount; `kept.py` — the files a cached mount could not upload then, kept and named;
- `journal.py`, `uploads.py` — multipart uploads skyhive started, journaled; those of dead processes aborted;
- `plugin.py` — `Pool(mounts=...)` as a plugin;  `checkpoint.py` — `sky.checkpoint_dir()`;
- `buckets.py` — the buckets skyhive created, marked as its own (`skyhive storage ls/delete` on S3, R2, GCS).
"""
