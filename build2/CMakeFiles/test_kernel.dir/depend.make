# Empty dependencies file for test_kernel.
# This may be replaced when dependencies are built.
