"""The one place of kernelbridge's version, the daemon's and the SDK's alike:
CMakeLists.txt reads the line below for project(kernelbridge VERSION ...) and
pyproject.toml takes it as the distribution's version. Keep it one line of the
form __version__ = "X.Y.Z"."""

__version__ = "0.1.0"
