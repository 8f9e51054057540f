# Empty dependencies file for test_scan.
# This may be replaced when dependencies are built.
