# Empty dependencies file for test_kernelspecs.
# This may be replaced when dependencies are built.
