# Empty compiler generated dependencies file for kernelbridge.
# This may be replaced when dependencies are built.
