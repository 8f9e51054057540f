# Empty dependencies file for kernelbridge_static.
# This may be replaced when dependencies are built.
