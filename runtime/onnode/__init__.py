"""What runs inside a worker process: `instance_info`, `shard`, output filters, launch steps, and what client and worker agree on."""
