# Empty dependencies file for kernelbridge.
# This may be replaced when dependencies are built.
