from tfbert._lazy import lazy_names

# Submodules load on first use (`tfbert.text.<module>`).
__getattr__, __dir__ = lazy_names(__name__, globals(), {})
