"""kernelbridge benchmarks: the bridge and its peers, side by side on one machine."""
