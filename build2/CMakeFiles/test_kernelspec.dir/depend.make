# Empty dependencies file for test_kernelspec.
# This may be replaced when dependencies are built.
