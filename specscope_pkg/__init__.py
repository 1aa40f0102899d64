"""specscope: a desktop profiler for speculative decoding.

``specscope.core`` is the engine (no Qt); ``specscope.app`` is the Qt view.
"""

__version__ = "0.1.0"
