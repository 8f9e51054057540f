"""The SDK's version: always the daemon's (CMakeLists.txt project VERSION)."""

__version__ = "0.1.0"
