# Empty dependencies file for kernelbridge_cli.
# This may be replaced when dependencies are built.
