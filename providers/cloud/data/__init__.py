"""Generated machine tables shipped with skyhive (regenerate with ``python -m skyhive.providers.cloud.data.generate``)."""
